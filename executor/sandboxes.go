package executor

import "github.com/sandboxapi/sandboxapi/executor/host"

// LiveSandboxes counts this executor's running sandboxes: those in its
// runsc root that have a cgroup folder. Other servers'
// sandboxes on the host have cgroups there too and are not counted. Safe
// for concurrent use.
func (e *Executor) LiveSandboxes() int {
	ids := e.runsc.SandboxIDs()
	for i, id := range ids {
		ids[i] = e.boxes.cgroupName(id)
	}
	return host.LiveSandboxes(ids, host.CgroupDirs())
}
