// Package host is the sandbox host layer under the session service
// (package executor): the runsc binary and the OCI spec it runs, the
// loop-mounted home images, the processes a runsc root leaves on the host,
// and sandboxes' cgroups. It knows no session, no store and no session
// state; the executor decides what to run, where a home lives and when.
package host

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

// Runsc runs the Runsc binary with the global flags every call shares.
// The zero value is not usable; it is safe for concurrent use.
type Runsc struct {
	Bin      string
	Root     string
	Platform string
}

// ErrNoSandbox is returned when runsc does not know the container.
var ErrNoSandbox = errors.New("sandbox does not exist")

func (r *Runsc) Args(network string, sub ...string) []string {
	a := []string{"--root", r.Root, "--platform", r.Platform, "--overlay2", "none"}
	if network != "" {
		a = append(a, "--network", network)
	}
	return append(a, sub...)
}

// Command builds an exec.Cmd for a runsc subcommand; it does not start it.
func (r *Runsc) Command(ctx context.Context, network string, sub ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, r.Bin, r.Args(network, sub...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Run runs a short runsc subcommand and returns its stdout.
func (r *Runsc) Run(ctx context.Context, network string, sub ...string) ([]byte, error) {
	cmd := r.Command(ctx, network, sub...)
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

// Start creates and starts a sandbox from bundle (runsc run --detach).
// stdin and stdout become the sandbox's own stdio (pid 1's); nil gives it
// /dev/null.
func (r *Runsc) Start(ctx context.Context, id, bundle, network string, stdin, stdout *os.File) error {
	return r.StartCmd(ctx, id, network, []string{"run", "--detach", "--bundle", bundle, id}, stdin, stdout)
}

// StartCmd runs a runsc command that leaves a detached sandbox holding
// stdin and stdout as its stdio: run, or restore (the executor's
// checkpoint.go).
func (r *Runsc) StartCmd(ctx context.Context, id, network string, sub []string, stdin, stdout *os.File) error {
	cmd := r.Command(ctx, network, sub...)
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

// UnmountNullNetns removes the nsfs mount runsc leaves in its root for
// --network=none, once no sandbox remains.
func (r *Runsc) UnmountNullNetns() error {
	p := filepath.Join(r.Root, "null-netns")
	// runsc may stack one mount per sandbox start: take them all off.
	for i := 0; i < 1024 && Mounted(p); i++ {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s: %w", p, err)
		}
	}
	return nil
}

// Destroy kills and deletes a sandbox; a sandbox that is already gone is fine.
func (r *Runsc) Destroy(ctx context.Context, id string) error {
	_, _ = r.Run(ctx, "", "kill", "--all", id, "KILL")
	if _, err := r.Run(ctx, "", "delete", "--force", id); err != nil && !errors.Is(err, ErrNoSandbox) {
		return err
	}
	return nil
}

// Container is one row of `runsc list --format json`.
type Container struct {
	ID     string          `json:"id"`
	Pid    int             `json:"pid"`
	Status ContainerStatus `json:"status"`
}

// ContainerStatus is a container's status as runsc reports it (OCI
// runtime states); not a session's state (sandbox.State).
type ContainerStatus string

// The container statuses the executor reads.
const (
	ContainerRunning ContainerStatus = "running"
	ContainerStopped ContainerStatus = "stopped"
)

// List returns the containers under the root.
func (r *Runsc) List(ctx context.Context) ([]Container, error) {
	if _, err := os.Stat(r.Root); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	out, err := r.Run(ctx, "", "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	var cs []Container
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

// State returns one container's state.
func (r *Runsc) State(ctx context.Context, id string) (Container, error) {
	out, err := r.Run(ctx, "", "state", id)
	if err != nil {
		return Container{}, err
	}
	var c Container
	if err := json.Unmarshal(out, &c); err != nil {
		return Container{}, fmt.Errorf("decoding runsc state: %w", err)
	}
	c.checkAlive()
	return c, nil
}

// checkAlive corrects a "running" status whose sandbox process is dead:
// runsc probes with kill(pid, 0), which succeeds on a zombie, so a sandbox
// killed from outside and not yet reaped still shows as running.
func (c *Container) checkAlive() {
	if c.Status != ContainerRunning || c.Pid <= 0 {
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Pid))
	if err != nil {
		c.Status = ContainerStopped
		return
	}
	// The state follows the command name, which is in parentheses.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
		c.Status = ContainerStopped
	}
}

// SandboxIDs returns the ids of the sandboxes in the runsc root
// (sessions, stateless calls, the warm pool, install jobs), read from
// runsc's state files ("<container>_sandbox:<sandbox>.state", one per
// container; a sandbox's own container has its id) without running runsc.
// Sandboxes of other servers on the host, which have other roots, are not
// among them; a sandbox that stopped is listed until it is deleted.
func (r *Runsc) SandboxIDs() []string {
	ents, err := os.ReadDir(r.Root)
	if err != nil {
		return nil
	}
	var out []string
	for _, ent := range ents {
		name, ok := strings.CutSuffix(ent.Name(), ".state")
		if !ok {
			continue
		}
		if container, sandbox, ok := strings.Cut(name, "_sandbox:"); ok && container == sandbox {
			out = append(out, sandbox)
		}
	}
	return out
}
