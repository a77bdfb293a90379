package executor

import (
	"os"
	"path/filepath"
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

// LiveSandboxes counts this executor's running sandboxes: those in its
// runsc root (SandboxIDs) that have a cgroup folder. Other servers'
// sandboxes on the host have cgroups there too and are not counted. Safe
// for concurrent use.
func (e *Executor) LiveSandboxes() int {
	ids := e.SandboxIDs()
	for i, id := range ids {
		ids[i] = e.cgroupName(id)
	}
	return liveSandboxes(ids, CgroupDirs())
}

// liveSandboxes counts the ids of own that have a folder among cgroupDirs
// (one folder per running sandbox under each controller).
func liveSandboxes(own, cgroupDirs []string) int {
	running := map[string]bool{}
	for _, dir := range cgroupDirs {
		running[filepath.Base(dir)] = true
	}
	n := 0
	for _, id := range own {
		if running[id] {
			n++
		}
	}
	return n
}
