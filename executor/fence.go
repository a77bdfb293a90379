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

// startFence launches the fence process for this executor and waits until
// it is ready.
func (e *Executor) startFence() error {
	argv := e.cfg.FenceArgv
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding this binary for the fence: %w", err)
		}
		argv = []string{exe, "fence"}
	}
	cfg := fence.Config{Root: e.runsc.Root, Homes: e.sessionsDir(), Lock: filepath.Join(e.cfg.DataDir, "fence.lock")}
	f, err := fence.Start(argv, cfg, e.log)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.fence = f
	hold := e.hold // the node registered before the executor started
	e.mu.Unlock()
	if !hold.IsZero() {
		f.HoldUntil(hold)
	}
	return nil
}
