package executor

import (
	"os"
	"strings"
)

// sandboxIDs returns the ids of the sandboxes in the runsc root
// (sessions, stateless calls, the warm pool, install jobs), read from
// runsc's state files ("<container>_sandbox:<sandbox>.state", one per
// container; a sandbox's own container has its id) without running runsc.
// Sandboxes of other servers on the host, which have other roots, are not
// among them; a sandbox that stopped is listed until it is deleted.
func (r *runsc) sandboxIDs() []string {
	ents, err := os.ReadDir(r.root)
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

// LiveSandboxes counts this executor's running sandboxes: those in its
// runsc root that have a cgroup folder. Other servers'
// sandboxes on the host have cgroups there too and are not counted. Safe
// for concurrent use.
func (e *Executor) LiveSandboxes() int {
	ids := e.runsc.sandboxIDs()
	for i, id := range ids {
		ids[i] = e.cgroupName(id)
	}
	return liveSandboxes(ids, CgroupDirs())
}
