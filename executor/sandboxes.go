package executor

import (
	"os"
	"strings"
)

// SandboxIDs returns the ids of the sandboxes in this executor's runsc
// root (sessions, stateless calls, the warm pool, install jobs), read from
// runsc's state files ("<container>_sandbox:<sandbox>.state", one per
// container; a sandbox's own container has its id) without running runsc.
// Sandboxes of other servers on the host, which have other roots, are not
// among them; a sandbox that stopped is listed until it is deleted. Safe
// for concurrent use.
func (e *Executor) SandboxIDs() []string {
	ents, err := os.ReadDir(e.runsc.root)
	if err != nil {
		return nil
	}
	var out []string
	for _, ent := range ents {
		name, ok := strings.CutSuffix(ent.Name(), ".state")
		if !ok {
			continue
		}
		if container, sandbox, ok := strings.Cut(name, "_sandbox:"); ok && container == sandbox {
			out = append(out, sandbox)
		}
	}
	return out
}
