package executor

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandboxapi/sandboxapi/executor/fence"
)

// In cluster mode the executor runs a dead man's switch (package fence):
// a fence process that kills this node's sandboxes and unmounts its homes
// when the node dies, or stops renewing its hold (HoldUntil).

// startFence launches the fence process for this node's executor and
// waits until it is ready.
func (n *Node) startFence() error {
	argv := n.cfg.FenceArgv
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding this binary for the fence: %w", err)
		}
		argv = []string{exe, "fence"}
	}
	cfg := fence.Config{Root: n.runsc.Root, Homes: n.boxes.sessionsDir(), Lock: filepath.Join(n.cfg.DataDir, "fence.lock")}
	f, err := fence.Start(argv, cfg, n.log)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.fence = f
	hold := n.hold // the node registered before the executor started
	n.mu.Unlock()
	if !hold.IsZero() {
		f.HoldUntil(hold)
	}
	return nil
}
