package host

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RootProcess is a host process started by runsc for this executor's root.
type RootProcess struct {
	PID  int
	Argv []string
}

// RootProcesses lists the host processes whose command line names root:
// runsc commands a dead server left running and the sandboxes and gofers
// they made.
func RootProcesses(root string) []RootProcess {
	var out []RootProcess
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if !strings.HasPrefix(filepath.Base(argv[0]), "runsc") {
			continue
		}
		for _, a := range argv {
			if a == root || a == "--root="+root {
				out = append(out, RootProcess{PID: pid, Argv: argv})
				break
			}
		}
	}
	return out
}

// IsCLI reports whether p is a runsc command (create, run, exec, ...) rather
// than a sandbox or gofer process.
func (p RootProcess) IsCLI() bool {
	base := filepath.Base(p.Argv[0])
	return base != "runsc-sandbox" && base != "runsc-gofer"
}

func (p RootProcess) IsExec() bool {
	for _, a := range p.Argv[1:] {
		if a == "exec" {
			return true
		}
	}
	return false
}

// WaitOrphanCommands waits, up to limit, for runsc commands that a
// previous server process started under root to finish (a "runsc run" in
// flight when the server died goes on to start its sandbox), then kills
// the rest, so that the reconciliation that follows sees every sandbox.
func WaitOrphanCommands(ctx context.Context, root string, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		var cli []RootProcess
		for _, p := range RootProcesses(root) {
			if !p.IsCLI() {
				continue
			}
			// An exec belongs to a call that is recorded failed anyway:
			// no need to wait for it (adoption stops its program).
			if p.IsExec() {
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
				continue
			}
			cli = append(cli, p)
		}
		if len(cli) == 0 {
			return 0
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			for _, p := range cli {
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
			return len(cli)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// KillStraySandboxes kills sandbox and gofer processes under root whose
// container is not in keep (their runsc state is gone or broken, so
// "runsc delete" cannot reach them), and returns the containers it hit.
func KillStraySandboxes(root string, keep map[string]bool) map[string]bool {
	hit := map[string]bool{}
	for _, p := range RootProcesses(root) {
		if p.IsCLI() {
			continue
		}
		if id := p.Argv[len(p.Argv)-1]; !keep[id] {
			if syscall.Kill(p.PID, syscall.SIGKILL) == nil {
				hit[id] = true
			}
		}
	}
	return hit
}

// KillSandboxProcesses sends SIGKILL to every process under root that
// belongs to one of the sandboxes ids: its sandbox and gofer processes
// and the runsc commands that name it. It returns how many it found
// alive; zombies (already dead) are not counted.
func KillSandboxProcesses(root string, ids map[string]bool) int {
	n := 0
	for _, p := range RootProcesses(root) {
		hit := false
		if !p.IsCLI() {
			hit = ids[p.Argv[len(p.Argv)-1]]
		} else {
			for _, a := range p.Argv[1:] {
				if ids[a] {
					hit = true
					break
				}
			}
		}
		if hit && syscall.Kill(p.PID, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}
