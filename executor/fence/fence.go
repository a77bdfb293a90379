// Package fence is a cluster node's dead man's switch: the fence process
// (`sandboxapi fence`, Run) that kills the node's sandboxes and unmounts
// its homes when the node dies or stops renewing its hold, and the node's
// side of it (Switch), which starts that process, keeps it running and
// tells it the node's deadlines. It knows the host layer (executor/host)
// and nothing of sessions.
package fence

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxapi/sandboxapi/executor/host"
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
// A node that is alive but does not run (SIGSTOP, a frozen cgroup, a
// paused VM) closes nothing: for it the node also tells the fence a
// deadline after each renewal of its lease, as a line "hold <ns>\n" (how
// long from now, in nanoseconds, so that the fence counts it on its own
// monotonic clock, whatever the wall clocks do). When the deadline passes
// without a newer one, the fence kills and unmounts as on EOF, then goes
// on waiting (disarmed) for the next deadline, the node's quit or its
// death. "free\n" disarms it: the node has let go of its sessions itself.
// A node that never sends a deadline (a single node) is fenced on EOF only.
//
// The fence holds a lock file while it runs, and says "ready" on its
// stdout only once it has it: a node that restarts at once waits there
// until the fence of its previous process has finished, before it looks
// at what is left under its root.

// Config is what the fence process needs; data only.
type Config struct {
	// Root is the node's runsc root: every process that names it dies.
	Root string
	// Homes is the node's sessions folder: every mount at
	// <Homes>/<id>/home is unmounted (never lazily).
	Homes string
	// Lock is a file held locked while the fence runs.
	Lock string
}

// Flags renders cfg as the fence command's flags.
func (c Config) Flags() []string {
	return []string{"--root", c.Root, "--homes", c.Homes, "--lock", c.Lock}
}

// Signals are the signals a fence process ignores: it must outlive
// the node (whose terminal, process group or supervisor may signal it
// too) and a log reader that has gone (SIGPIPE).
var Signals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE}

// fenceQuit is the byte a node writes when it stops normally.
const fenceQuit = 'q'

// The lines of the fence protocol besides fenceQuit: fenceHold arms the
// deadline (followed by a space and nanoseconds from now), fenceFree
// disarms it.
const (
	fenceHold = "hold"
	fenceFree = "free"
)

// fenceEvent is what the node said on the pipe: quit, a deadline (hold >
// 0), a disarm (free), or nothing more (eof, with the read error).
type fenceEvent struct {
	quit, free, eof bool
	hold            time.Duration
	err             error
}

// readFence turns the node's pipe into events on out until quit or EOF.
// A line it does not understand is logged and skipped.
func readFence(in io.Reader, out chan<- fenceEvent, log *slog.Logger) {
	r := bufio.NewReader(in)
	for {
		b, err := r.ReadByte()
		if err != nil {
			out <- fenceEvent{eof: true, err: err}
			return
		}
		if b == fenceQuit {
			out <- fenceEvent{quit: true}
			return
		}
		if err := r.UnreadByte(); err != nil {
			out <- fenceEvent{eof: true, err: err}
			return
		}
		line, err := r.ReadString('\n')
		if err != nil {
			out <- fenceEvent{eof: true, err: err} // a line cut short: the node is gone
			return
		}
		line = strings.TrimSpace(line)
		if line == fenceFree {
			out <- fenceEvent{free: true}
			continue
		}
		if v, ok := strings.CutPrefix(line, fenceHold+" "); ok {
			if ns, perr := strconv.ParseInt(v, 10, 64); perr == nil {
				out <- fenceEvent{hold: max(time.Duration(ns), 1)}
				continue
			}
		}
		log.Error("fence: a line from the node not understood", "line", line)
	}
}

// fenceBudget bounds the fencing of a dead node; what has not worked by
// then is logged and left.
const fenceBudget = 10 * time.Second

// Run is the fence process: it takes cfg.Lock, writes "ready\n" to
// ready and closes it, then waits on in (the node's pipe). A fenceQuit
// byte ends it quietly; EOF or a read error without one means the node is
// dead: every process under cfg.Root is killed and every home under
// cfg.Homes unmounted, retried for up to fenceBudget. A deadline the node
// sent (fenceHold) that passes without a newer one does the same, and the
// fence goes on waiting. Its process should ignore the signals in
// Signals first.
func Run(ctx context.Context, cfg Config, in io.Reader, ready io.WriteCloser, log *slog.Logger) error {
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
	events := make(chan fenceEvent, 1)
	go readFence(in, events, log)
	var deadline <-chan time.Time // nil: not armed
	var timer *time.Timer
	disarm := func() {
		if timer != nil {
			timer.Stop()
		}
		timer, deadline = nil, nil
	}
	for {
		select {
		case ev := <-events:
			switch {
			case ev.quit:
				disarm()
				return nil
			case ev.free:
				disarm()
			case ev.hold > 0:
				disarm()
				timer = time.NewTimer(ev.hold)
				deadline = timer.C
			default: // EOF: the node is gone
				disarm()
				start := time.Now()
				killed, unmounted, ferr := fenceHost(cfg, time.Now().Add(fenceBudget))
				log.Warn("node process gone: fenced its sandboxes and homes", "root", cfg.Root, "killed", killed, "unmounted", unmounted,
					"ms", time.Since(start).Milliseconds(), "err", ferr)
				return ferr
			}
		case <-deadline:
			// The node did not renew its hold in time (it is stopped, or
			// too slow to fence itself): its sessions may be another
			// node's once its lease has run out.
			timer, deadline = nil, nil
			start := time.Now()
			killed, unmounted, ferr := fenceHost(cfg, time.Now().Add(fenceBudget))
			log.Warn("node's hold deadline passed: fenced its sandboxes and homes", "root", cfg.Root, "killed", killed, "unmounted", unmounted,
				"ms", time.Since(start).Milliseconds(), "err", ferr)
		}
	}
}

// fenceHost kills every process under cfg.Root and unmounts every home
// under cfg.Homes, again and again (a dying sandbox holds its mounts, a
// runsc command in flight may still start one) until none is left or
// deadline passes.
func fenceHost(cfg Config, deadline time.Time) (killed, unmounted int, err error) {
	images := map[string]string{} // behind the homes' loop devices: their mount points
	for {
		procs := host.RootProcesses(cfg.Root)
		for _, p := range procs {
			if syscall.Kill(p.PID, syscall.SIGKILL) == nil {
				killed++
			}
		}
		var left []error
		for _, m := range host.HomeMounts(cfg.Homes) {
			if img := host.LoopBacking(m.Source); img != "" {
				images[img] = m.Point
			}
			if err := unix.Unmount(m.Point, 0); err == nil {
				unmounted++
			} else if !errors.Is(err, unix.EINVAL) {
				left = append(left, fmt.Errorf("unmounting %s: %w", m.Point, err))
			}
		}
		if len(procs) == 0 && len(left) == 0 {
			// The images are whole once their loop devices let go.
			for img, mnt := range images {
				if err := host.SettleImage(img, mnt, deadline); err != nil {
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

// Switch is the node's side of the dead man's switch: the running
// fence process. One that dies while the node runs is started again. Safe
// for concurrent use.
type Switch struct {
	argv []string
	log  *slog.Logger

	mu       sync.Mutex
	proc     *process
	stopping bool
	// hold is the deadline the fence is armed with (zero: none): the node
	// must have let go of its sessions by then.
	hold time.Time
}

// process is one fence process and the write end of its stdin.
type process struct {
	cmd    *exec.Cmd
	pipe   *os.File
	exited chan struct{} // closed when cmd has exited
}

// fenceReadyWait is how long the node waits for its fence to say ready:
// long enough for the fence of a previous process to finish.
const fenceReadyWait = fenceBudget + 10*time.Second

// Start launches the fence process argv (with cfg's flags appended) and
// waits until it is ready; the Switch then starts it again whenever it
// dies while the node runs, until Stop.
func Start(argv []string, cfg Config, log *slog.Logger) (*Switch, error) {
	f := &Switch{argv: append(append([]string{}, argv...), cfg.Flags()...), log: log}
	p, err := f.launch()
	if err != nil {
		return nil, err
	}
	f.proc = p
	go f.watch(p)
	return f, nil
}

// Process is the running fence process's command (nil before Start):
// for tests and diagnostics, which must not wait on it.
func (f *Switch) Process() *exec.Cmd {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.proc == nil {
		return nil
	}
	return f.proc.cmd
}

// Hold is the deadline the fence is armed with (zero: none).
func (f *Switch) Hold() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hold
}

// launch starts one fence process and waits until it is ready.
func (f *Switch) launch() (*process, error) {
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
	p := &process{cmd: cmd, pipe: inW, exited: make(chan struct{})}
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
func (f *Switch) watch(p *process) {
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
			f.mu.Lock()
			if !f.hold.IsZero() {
				f.send(np, holdLine(f.hold)) // the new fence is armed as the old one was
			}
			f.mu.Unlock()
			go f.watch(np)
			return
		case stopping:
			return
		}
		f.log.Error("restarting the fence", "err", err)
		time.Sleep(time.Second)
	}
}

// HoldUntil arms the fence with deadline t (see Run); a zero t
// disarms it.
func (f *Switch) HoldUntil(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping {
		return
	}
	f.hold = t
	line := fenceFree + "\n"
	if !t.IsZero() {
		line = holdLine(t)
	}
	if f.proc != nil {
		f.send(f.proc, line)
	}
}

// HoldPassed reports whether the fence is armed with a deadline that has
// passed: it may have killed this node's sandboxes and unmounted its
// homes.
func (f *Switch) HoldPassed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.hold.IsZero() && !time.Now().Before(f.hold)
}

// holdLine is the fence's deadline t as a line of its protocol: the time
// left until t (at least 1 ns: a deadline already passed fires at once).
func holdLine(t time.Time) string {
	return fmt.Sprintf("%s %d\n", fenceHold, max(time.Until(t), 1).Nanoseconds())
}

// send writes line to p's pipe; f.mu is held. A fence that does not read
// (stopped with the node, or wedged) does not hold the node up: the
// write gives up after a second.
func (f *Switch) send(p *process, line string) {
	_ = p.pipe.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(p.pipe, line); err != nil {
		f.log.Error("telling the fence process", "line", strings.TrimSpace(line), "err", err)
	}
}

// Stop ends the fence quietly: the node stops normally and has let go of
// everything.
func (f *Switch) Stop() error {
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
func (p *process) quit() error {
	_ = p.pipe.SetWriteDeadline(time.Now().Add(time.Second))
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
