package executor

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestCheckAliveSeesDeadSandboxes(t *testing.T) {
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer zombie.Wait()
	// Not waited for yet: it exits and stays a zombie.
	var zs containerState
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		zs = containerState{Status: "running", Pid: zombie.Process.Pid}
		if zs.checkAlive(); zs.Status == "stopped" {
			break
		}
	}
	cases := []struct {
		name string
		in   containerState
		want string
	}{
		{name: "live process", in: containerState{Status: "running", Pid: os.Getpid()}, want: "running"},
		{name: "zombie", in: containerState{Status: "running", Pid: zombie.Process.Pid}, want: "stopped"},
		{name: "gone", in: containerState{Status: "running", Pid: 1 << 30}, want: "stopped"},
		{name: "not running stays", in: containerState{Status: "created", Pid: 1 << 30}, want: "created"},
		{name: "no pid", in: containerState{Status: "running"}, want: "running"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.in
			c.checkAlive()
			if c.Status != tc.want {
				t.Errorf("status %q, want %q", c.Status, tc.want)
			}
		})
	}
}

func TestRootProcessesMatchesOnlyItsRoot(t *testing.T) {
	// This test process is not runsc: nothing matches a fresh root.
	if ps := rootProcesses(t.TempDir()); len(ps) != 0 {
		t.Fatalf("processes under a fresh root: %+v", ps)
	}
	p := rootProcess{argv: []string{"/usr/local/bin/runsc", "--root", "/x", "exec", "id"}}
	if !p.isCLI() || !p.isExec() {
		t.Errorf("runsc exec not recognised: %+v", p)
	}
	p = rootProcess{argv: []string{"runsc-sandbox", "--root=/x", "boot", "sess_a"}}
	if p.isCLI() {
		t.Errorf("sandbox taken for a command")
	}
}

// A sandbox that appears after Start's reconcile and that no session
// holds (the create a killed predecessor had under way finishing late) is
// removed, with its home, when the executor stops.
func TestStopRemovesLateOrphanSandbox(t *testing.T) {
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	kept := mustSession(t, e, "bash")
	ctx := context.Background()
	id := newID("sess_")
	h := e.home(id)
	if err := makeHome(ctx, h, e.cfg.HomeBytes); err != nil {
		t.Fatal(err)
	}
	if err := e.startSandbox(ctx, id, h.dir, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	cs, err := e.runsc.list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 0 {
		t.Fatalf("sandboxes left after stop: %+v", cs)
	}
	if ps := rootProcesses(e.runsc.root); len(ps) != 0 {
		t.Fatalf("runsc processes left after stop: %+v", ps)
	}
	if _, err := os.Stat(h.dir); !os.IsNotExist(err) {
		t.Fatalf("orphan home left: %v", err)
	}
	if _, err := os.Stat(e.home(kept.ID).image()); err != nil {
		t.Fatalf("the hibernated session's home went with the orphan: %v", err)
	}
}
