package executor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The dead man's switch. In cluster mode Start launches a fence process
// (`sandboxapi fence`, a re-run of this binary) that holds the read end
// of a pipe whose only write end is the node's. When the node dies, by
// SIGKILL too, the kernel closes that end: the fence reads EOF, kills
// every process under the node's runsc root and unmounts the node's home
// mounts, so that when another node claims the sessions after the lease
// has run out, no image is still mounted here. A node that stops normally
// writes 'q' first, and the fence exits without touching anything.
//
// The fence holds a lock file while it runs, and says "ready" on its
// stdout only once it has it: a node that restarts at once waits there
// until the fence of its previous process has finished, before it looks
// at what is left under its root.

// FenceConfig is what the fence process needs; data only.
type FenceConfig struct {
	// Root is the node's runsc root: every process that names it dies.
	Root string
	// Homes is the node's sessions folder: every mount at
	// <Homes>/<id>/home is unmounted (never lazily).
	Homes string
	// Lock is a file held locked while the fence runs.
	Lock string
}

// Flags renders cfg as the fence command's flags.
func (c FenceConfig) Flags() []string {
	return []string{"--root", c.Root, "--homes", c.Homes, "--lock", c.Lock}
}

// FenceSignals are the signals a fence process ignores: it must outlive
// the node (whose terminal, process group or supervisor may signal it
// too) and a log reader that has gone (SIGPIPE).
var FenceSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE}

// fenceQuit is the byte a node writes when it stops normally.
const fenceQuit = 'q'

// fenceBudget bounds the fencing of a dead node; what has not worked by
// then is logged and left.
const fenceBudget = 10 * time.Second

// RunFence is the fence process: it takes cfg.Lock, writes "ready\n" to
// ready and closes it, then waits on in (the node's pipe). A fenceQuit
// byte ends it quietly; EOF or a read error without one means the node is
// dead: every process under cfg.Root is killed and every home under
// cfg.Homes unmounted, retried for up to fenceBudget. Its process should
// ignore the signals in FenceSignals first.
func RunFence(ctx context.Context, cfg FenceConfig, in io.Reader, ready io.WriteCloser, log *slog.Logger) error {
	if cfg.Root == "" || cfg.Homes == "" || cfg.Lock == "" {
		return errors.New("fence: --root, --homes and --lock are required")
	}
	lock, err := os.OpenFile(cfg.Lock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("fence: opening lock: %w", err)
	}
	defer lock.Close()
	for unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := io.WriteString(ready, "ready\n"); err != nil {
		return fmt.Errorf("fence: saying ready: %w", err)
	}
	ready.Close()
	var b [1]byte
	for {
		n, err := in.Read(b[:])
		if n == 1 && b[0] == fenceQuit {
			return nil
		}
		if err != nil {
			break // EOF: the node is gone
		}
	}
	start := time.Now()
	killed, unmounted, ferr := fenceHost(cfg, time.Now().Add(fenceBudget))
	log.Warn("node process gone: fenced its sandboxes and homes", "root", cfg.Root, "killed", killed, "unmounted", unmounted,
		"ms", time.Since(start).Milliseconds(), "err", ferr)
	return ferr
}

// fenceHost kills every process under cfg.Root and unmounts every home
// under cfg.Homes, again and again (a dying sandbox holds its mounts, a
// runsc command in flight may still start one) until none is left or
// deadline passes.
func fenceHost(cfg FenceConfig, deadline time.Time) (killed, unmounted int, err error) {
	images := map[string]bool{} // behind the homes' loop devices
	for {
		procs := rootProcesses(cfg.Root)
		for _, p := range procs {
			if syscall.Kill(p.pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		var left []error
		for _, m := range homeMounts(cfg.Homes) {
			if img := loopBacking(m.source); img != "" {
				images[img] = true
			}
			if err := unix.Unmount(m.point, 0); err == nil {
				unmounted++
			} else if !errors.Is(err, unix.EINVAL) {
				left = append(left, fmt.Errorf("unmounting %s: %w", m.point, err))
			}
		}
		if len(procs) == 0 && len(left) == 0 {
			// The images are whole once their loop devices let go.
			for img := range images {
				if err := settleImage(img, deadline); err != nil {
					left = append(left, err)
				}
			}
			return killed, unmounted, errors.Join(left...)
		}
		if time.Now().After(deadline) {
			if len(procs) > 0 {
				left = append(left, fmt.Errorf("%d processes under %s still alive", len(procs), cfg.Root))
			}
			return killed, unmounted, errors.Join(left...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mountedHome is a mounted home: its mount point and its source (the loop
// device).
type mountedHome struct {
	point, source string
}

// homeMounts lists the homes mounted at <homes>/<id>/home in this mount
// namespace.
func homeMounts(homes string) []mountedHome {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	homes = filepath.Clean(homes)
	var out []mountedHome
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		if filepath.Base(p) != "home" || filepath.Dir(filepath.Dir(p)) != homes {
			continue
		}
		m := mountedHome{point: p}
		// "... - fstype source options" follows the optional fields.
		for i := 5; i+2 < len(f); i++ {
			if f[i] == "-" {
				m.source = unescapeMount(f[i+2])
				break
			}
		}
		out = append(out, m)
	}
	return out
}

// fenceSwitch is the node's side of the dead man's switch: the running
// fence process. One that dies while the node runs is started again. Safe
// for concurrent use.
type fenceSwitch struct {
	argv []string
	log  *slog.Logger

	mu       sync.Mutex
	proc     *fenceProc
	stopping bool
}

// fenceProc is one fence process and the write end of its stdin.
type fenceProc struct {
	cmd    *exec.Cmd
	pipe   *os.File
	exited chan struct{} // closed when cmd has exited
}

// fenceReadyWait is how long the node waits for its fence to say ready:
// long enough for the fence of a previous process to finish.
const fenceReadyWait = fenceBudget + 10*time.Second

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
	cfg := FenceConfig{Root: e.runsc.root, Homes: e.sessionsDir(), Lock: filepath.Join(e.cfg.DataDir, "fence.lock")}
	f := &fenceSwitch{argv: append(append([]string{}, argv...), cfg.Flags()...), log: e.log}
	p, err := f.launch()
	if err != nil {
		return err
	}
	f.proc = p
	go f.watch(p)
	e.fence = f
	return nil
}

// launch starts one fence process and waits until it is ready.
func (f *fenceSwitch) launch() (*fenceProc, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting fence: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("starting fence: %w", err)
	}
	cmd := exec.Command(f.argv[0], f.argv[1:]...)
	// stdin: the pipe only the node holds; stdout: its ready line, closed
	// after; stderr: the node's own (its log), held at most fenceBudget
	// past the node's death. Its own process group, so that a signal to
	// the node's group leaves it standing.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, readyW, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	inR.Close()
	readyW.Close()
	if err != nil {
		inW.Close()
		readyR.Close()
		return nil, fmt.Errorf("starting fence %s: %w", f.argv[0], err)
	}
	p := &fenceProc{cmd: cmd, pipe: inW, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	readyErr := make(chan error, 1)
	go func() {
		defer readyR.Close()
		sc := bufio.NewScanner(readyR)
		for sc.Scan() {
			if sc.Text() == "ready" {
				readyErr <- nil
				return
			}
		}
		readyErr <- errors.New("fence exited before it was ready")
	}()
	select {
	case err = <-readyErr:
	case <-time.After(fenceReadyWait):
		err = errors.New("fence not ready in time")
	}
	if err != nil {
		inW.Close()
		_ = cmd.Process.Kill()
		<-p.exited
		return nil, fmt.Errorf("starting fence %s: %w", f.argv[0], err)
	}
	return p, nil
}

// watch starts the fence again when p dies while the node runs: without
// one, a node that dies leaves its sandboxes and mounts behind.
func (f *fenceSwitch) watch(p *fenceProc) {
	<-p.exited
	f.mu.Lock()
	if f.stopping || f.proc != p {
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	p.pipe.Close()
	f.log.Error("fence process exited while the node runs: starting it again", "pid", p.cmd.Process.Pid, "state", p.cmd.ProcessState.String())
	for {
		np, err := f.launch()
		f.mu.Lock()
		stopping := f.stopping
		if err == nil && !stopping {
			f.proc = np
		}
		f.mu.Unlock()
		switch {
		case err == nil && stopping:
			_ = np.quit()
			return
		case err == nil:
			go f.watch(np)
			return
		case stopping:
			return
		}
		f.log.Error("restarting the fence", "err", err)
		time.Sleep(time.Second)
	}
}

// stop ends the fence quietly: the node stops normally and has let go of
// everything.
func (f *fenceSwitch) stop() error {
	f.mu.Lock()
	f.stopping = true
	p := f.proc
	f.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.quit()
}

// quit writes fenceQuit, closes the pipe and waits for the process,
// killing it after a while.
func (p *fenceProc) quit() error {
	_, werr := p.pipe.Write([]byte{fenceQuit})
	p.pipe.Close()
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return errors.New("fence process did not stop: killed")
	}
	if werr != nil && !errors.Is(werr, os.ErrClosed) {
		return fmt.Errorf("stopping fence: %w", werr)
	}
	return nil
}
