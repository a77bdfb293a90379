package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// runsc runs the runsc binary with the global flags every call shares.
// The zero value is not usable; it is safe for concurrent use.
type runsc struct {
	bin      string
	root     string
	platform string
}

// ErrNoSandbox is returned when runsc does not know the container.
var ErrNoSandbox = errors.New("sandbox does not exist")

func (r *runsc) args(network string, sub ...string) []string {
	a := []string{"--root", r.root, "--platform", r.platform, "--overlay2", "none"}
	if network != "" {
		a = append(a, "--network", network)
	}
	return append(a, sub...)
}

// command builds an exec.Cmd for a runsc subcommand; it does not start it.
func (r *runsc) command(ctx context.Context, network string, sub ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, r.bin, r.args(network, sub...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs a short runsc subcommand and returns its stdout.
func (r *runsc) run(ctx context.Context, network string, sub ...string) ([]byte, error) {
	cmd := r.command(ctx, network, sub...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if strings.Contains(msg, "does not exist") || strings.Contains(msg, "cannot find") {
			return nil, fmt.Errorf("runsc %s: %s: %w", sub[0], msg, ErrNoSandbox)
		}
		return nil, fmt.Errorf("runsc %s: %s: %w", sub[0], msg, err)
	}
	return out.Bytes(), nil
}

// start creates and starts a sandbox from bundle (runsc run --detach).
// stdin and stdout become the sandbox's own stdio (pid 1's); nil gives it
// /dev/null.
func (r *runsc) start(ctx context.Context, id, bundle, network string, stdin, stdout *os.File) error {
	return r.startCmd(ctx, id, network, []string{"run", "--detach", "--bundle", bundle, id}, stdin, stdout)
}

// startCmd runs a runsc command that leaves a detached sandbox holding
// stdin and stdout as its stdio: run, or restore (checkpoint.go).
func (r *runsc) startCmd(ctx context.Context, id, network string, sub []string, stdin, stdout *os.File) error {
	cmd := r.command(ctx, network, sub...)
	// The detached sandbox keeps its stdio for life, so runsc's own messages
	// go to a file read afterwards, and the sandbox gets /dev/null.
	logf, err := os.CreateTemp("", "runsc-run-")
	if err != nil {
		return fmt.Errorf("creating runsc log: %w", err)
	}
	defer os.Remove(logf.Name())
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = nil, nil
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.Args = append(cmd.Args[:1], append([]string{"--log", logf.Name()}, cmd.Args[1:]...)...)
	if err := cmd.Run(); err != nil {
		msg, _ := io.ReadAll(io.LimitReader(logf, 64<<10))
		return fmt.Errorf("runsc %s: %s: %w", sub[0], lastLines(string(msg), 3), err)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// unmountNullNetns removes the nsfs mount runsc leaves in its root for
// --network=none, once no sandbox remains.
func (r *runsc) unmountNullNetns() error {
	p := filepath.Join(r.root, "null-netns")
	// runsc may stack one mount per sandbox start: take them all off.
	for i := 0; i < 1024 && mounted(p); i++ {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s: %w", p, err)
		}
	}
	return nil
}

// destroy kills and deletes a sandbox; a sandbox that is already gone is fine.
func (r *runsc) destroy(ctx context.Context, id string) error {
	_, _ = r.run(ctx, "", "kill", "--all", id, "KILL")
	if _, err := r.run(ctx, "", "delete", "--force", id); err != nil && !errors.Is(err, ErrNoSandbox) {
		return err
	}
	return nil
}

// containerState is one row of `runsc list --format json`.
type containerState struct {
	ID     string          `json:"id"`
	Pid    int             `json:"pid"`
	Status containerStatus `json:"status"`
}

// containerStatus is a container's status as runsc reports it (OCI
// runtime states); not a session's state (sandbox.State).
type containerStatus string

// The container statuses the executor reads.
const (
	containerRunning containerStatus = "running"
	containerStopped containerStatus = "stopped"
)

// list returns the containers under the root.
func (r *runsc) list(ctx context.Context) ([]containerState, error) {
	if _, err := os.Stat(r.root); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	out, err := r.run(ctx, "", "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	var cs []containerState
	if s := bytes.TrimSpace(out); len(s) > 0 && !bytes.Equal(s, []byte("null")) {
		if err := json.Unmarshal(s, &cs); err != nil {
			return nil, fmt.Errorf("decoding runsc list: %w", err)
		}
	}
	for i := range cs {
		cs[i].checkAlive()
	}
	return cs, nil
}

// state returns one container's state.
func (r *runsc) state(ctx context.Context, id string) (containerState, error) {
	out, err := r.run(ctx, "", "state", id)
	if err != nil {
		return containerState{}, err
	}
	var c containerState
	if err := json.Unmarshal(out, &c); err != nil {
		return containerState{}, fmt.Errorf("decoding runsc state: %w", err)
	}
	c.checkAlive()
	return c, nil
}

// checkAlive corrects a "running" status whose sandbox process is dead:
// runsc probes with kill(pid, 0), which succeeds on a zombie, so a sandbox
// killed from outside and not yet reaped still shows as running.
func (c *containerState) checkAlive() {
	if c.Status != containerRunning || c.Pid <= 0 {
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Pid))
	if err != nil {
		c.Status = containerStopped
		return
	}
	// The state follows the command name, which is in parentheses.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
		c.Status = containerStopped
	}
}
