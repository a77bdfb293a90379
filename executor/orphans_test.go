package executor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
		want containerStatus
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
	_, h := startOrphan(t, e)
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

// A sandbox whose start was cut short can run with no state runsc lists
// (here: its state file removed): Stop kills its processes all the same.
func TestStopKillsUnlistedSandboxProcesses(t *testing.T) {
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	ctx := context.Background()
	id, h := startOrphan(t, e)
	states, _ := filepath.Glob(filepath.Join(e.runsc.root, "*"+id+"*.state"))
	if len(states) == 0 {
		t.Fatalf("no state file for %s in %s", id, e.runsc.root)
	}
	for _, p := range states {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if cs, err := e.runsc.list(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("runsc still lists: %+v %v", cs, err)
	}
	if len(rootProcesses(e.runsc.root)) == 0 {
		t.Fatal("the sandbox runs no process")
	}
	_ = e.Stop(ctx)
	for deadline := time.Now().Add(5 * time.Second); len(rootProcesses(e.runsc.root)) > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if ps := rootProcesses(e.runsc.root); len(ps) != 0 {
		t.Fatalf("processes of an unlisted sandbox left after stop: %+v", ps)
	}
	for _, p := range CgroupDirs() {
		if strings.HasSuffix(p, "/"+id) {
			t.Errorf("cgroup of the killed sandbox left: %s", p)
		}
	}
	if _, err := os.Stat(h.dir); !os.IsNotExist(err) {
		t.Errorf("home of the killed sandbox left: %v", err)
		_ = unmountHome(h.dir)
	}
}

// startOrphan starts a sandbox on a fresh home that no session holds, as
// a create a killed predecessor had under way leaves one.
func startOrphan(t *testing.T, e *Executor) (string, home) {
	t.Helper()
	ctx := context.Background()
	id := newID("sess_")
	h := e.home(id)
	if err := makeHome(ctx, h, e.cfg.HomeBytes); err != nil {
		t.Fatal(err)
	}
	if err := e.startSandbox(ctx, id, h.dir, ""); err != nil {
		t.Fatal(err)
	}
	return id, h
}
