package host

import (
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
	var zs Container
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		zs = Container{Status: "running", Pid: zombie.Process.Pid}
		if zs.checkAlive(); zs.Status == "stopped" {
			break
		}
	}
	cases := []struct {
		name string
		in   Container
		want ContainerStatus
	}{
		{name: "live process", in: Container{Status: "running", Pid: os.Getpid()}, want: "running"},
		{name: "zombie", in: Container{Status: "running", Pid: zombie.Process.Pid}, want: "stopped"},
		{name: "gone", in: Container{Status: "running", Pid: 1 << 30}, want: "stopped"},
		{name: "not running stays", in: Container{Status: "created", Pid: 1 << 30}, want: "created"},
		{name: "no pid", in: Container{Status: "running"}, want: "running"},
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
	if ps := RootProcesses(t.TempDir()); len(ps) != 0 {
		t.Fatalf("processes under a fresh root: %+v", ps)
	}
	p := RootProcess{Argv: []string{"/usr/local/bin/runsc", "--root", "/x", "exec", "id"}}
	if !p.IsCLI() || !p.IsExec() {
		t.Errorf("runsc exec not recognised: %+v", p)
	}
	p = RootProcess{Argv: []string{"runsc-sandbox", "--root=/x", "boot", "sess_a"}}
	if p.IsCLI() {
		t.Errorf("sandbox taken for a command")
	}
}
