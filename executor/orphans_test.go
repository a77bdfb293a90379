package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/host"
)

// A sandbox that appears after Start's reconcile and that no session
// holds (the create a killed predecessor had under way finishing late) is
// removed, with its home, when the executor stops.
func TestStopRemovesLateOrphanSandbox(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	kept := mustSession(t, e, "bash")
	ctx := context.Background()
	_, h := startOrphan(t, e)
	if err := e.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	cs, err := e.runsc.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 0 {
		t.Fatalf("sandboxes left after stop: %+v", cs)
	}
	if ps := host.RootProcesses(e.runsc.Root); len(ps) != 0 {
		t.Fatalf("runsc processes left after stop: %+v", ps)
	}
	if _, err := os.Stat(h.Dir); !os.IsNotExist(err) {
		t.Fatalf("orphan home left: %v", err)
	}
	if _, err := os.Stat(e.boxes.home(kept.ID).Image()); err != nil {
		t.Fatalf("the hibernated session's home went with the orphan: %v", err)
	}
}

// A sandbox whose start was cut short can run with no state runsc lists
// (here: its state file removed): Stop kills its processes all the same.
func TestStopKillsUnlistedSandboxProcesses(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	ctx := context.Background()
	id, h := startOrphan(t, e)
	states, _ := filepath.Glob(filepath.Join(e.runsc.Root, "*"+id+"*.state"))
	if len(states) == 0 {
		t.Fatalf("no state file for %s in %s", id, e.runsc.Root)
	}
	for _, p := range states {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if cs, err := e.runsc.List(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("runsc still lists: %+v %v", cs, err)
	}
	if len(host.RootProcesses(e.runsc.Root)) == 0 {
		t.Fatal("the sandbox runs no process")
	}
	_ = e.Stop(ctx)
	for deadline := time.Now().Add(5 * time.Second); len(host.RootProcesses(e.runsc.Root)) > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if ps := host.RootProcesses(e.runsc.Root); len(ps) != 0 {
		t.Fatalf("processes of an unlisted sandbox left after stop: %+v", ps)
	}
	for _, p := range host.CgroupDirs() {
		if strings.HasSuffix(p, "/"+id) {
			t.Errorf("cgroup of the killed sandbox left: %s", p)
		}
	}
	if _, err := os.Stat(h.Dir); !os.IsNotExist(err) {
		t.Errorf("home of the killed sandbox left: %v", err)
		_ = host.UnmountHome(h.Dir)
	}
}

// startOrphan starts a sandbox on a fresh home that no session holds, as
// a create a killed predecessor had under way leaves one.
func startOrphan(t *testing.T, e *Executor) (string, host.Home) {
	t.Helper()
	ctx := context.Background()
	id := newID("sess_")
	h := e.boxes.home(id)
	if err := host.MakeHome(ctx, h, e.cfg.HomeBytes); err != nil {
		t.Fatal(err)
	}
	if err := e.boxes.startSandbox(ctx, id, h.Dir, ""); err != nil {
		t.Fatal(err)
	}
	return id, h
}
