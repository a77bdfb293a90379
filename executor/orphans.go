package executor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// rootProcess is a host process started by runsc for this executor's root.
type rootProcess struct {
	pid  int
	argv []string
}

// rootProcesses lists the host processes whose command line names root:
// runsc commands a dead server left running and the sandboxes and gofers
// they made.
func rootProcesses(root string) []rootProcess {
	var out []rootProcess
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
				out = append(out, rootProcess{pid: pid, argv: argv})
				break
			}
		}
	}
	return out
}

// isCLI reports whether p is a runsc command (create, run, exec, ...) rather
// than a sandbox or gofer process.
func (p rootProcess) isCLI() bool {
	base := filepath.Base(p.argv[0])
	return base != "runsc-sandbox" && base != "runsc-gofer"
}

func (p rootProcess) isExec() bool {
	for _, a := range p.argv[1:] {
		if a == "exec" {
			return true
		}
	}
	return false
}

// waitOrphanCommands waits, up to limit, for runsc commands that a
// previous server process started under root to finish (a "runsc run" in
// flight when the server died goes on to start its sandbox), then kills
// the rest, so that the reconciliation that follows sees every sandbox.
func waitOrphanCommands(ctx context.Context, root string, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		var cli []rootProcess
		for _, p := range rootProcesses(root) {
			if !p.isCLI() {
				continue
			}
			// An exec belongs to a call that is recorded failed anyway:
			// no need to wait for it (adoption stops its program).
			if p.isExec() {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
				continue
			}
			cli = append(cli, p)
		}
		if len(cli) == 0 {
			return 0
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			for _, p := range cli {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
			return len(cli)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killStraySandboxes kills sandbox and gofer processes under root whose
// container is not in keep (their runsc state is gone or broken, so
// "runsc delete" cannot reach them), and returns the containers it hit.
func killStraySandboxes(root string, keep map[string]bool) map[string]bool {
	hit := map[string]bool{}
	for _, p := range rootProcesses(root) {
		if p.isCLI() {
			continue
		}
		if id := p.argv[len(p.argv)-1]; !keep[id] {
			if syscall.Kill(p.pid, syscall.SIGKILL) == nil {
				hit[id] = true
			}
		}
	}
	return hit
}

// killSandboxProcesses sends SIGKILL to every process under root that
// belongs to one of the sandboxes ids: its sandbox and gofer processes
// and the runsc commands that name it. It returns how many it found
// alive; zombies (already dead) are not counted.
func killSandboxProcesses(root string, ids map[string]bool) int {
	n := 0
	for _, p := range rootProcesses(root) {
		hit := false
		if !p.isCLI() {
			hit = ids[p.argv[len(p.argv)-1]]
		} else {
			for _, a := range p.argv[1:] {
				if ids[a] {
					hit = true
					break
				}
			}
		}
		if hit && syscall.Kill(p.pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}
