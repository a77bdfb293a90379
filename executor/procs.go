package executor

// Background processes, host side: the calls of the API on a session's
// processes go over the sandbox's agent channel to pid 1's process table
// (executor/guest/procs.go). They do not take the session's lock, so a
// process call neither waits for a run nor holds one up; they mark the
// session busy for their length, as a file transfer does.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"
	"unicode"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Processes is the session service's background processes role
// (api.Processes): processes and terminals started in a session's sandbox
// over its agent channel. It reaches sessions only through procSessions.
// Get it from Executor.Processes; it is safe for concurrent use.
type Processes struct {
	s   procSessions
	cfg Config
	log *slog.Logger
}

// procSessions is what Processes needs of the session service.
type procSessions interface {
	// fileChannel marks the running session busy and returns its agent
	// channel (nil: the sandbox has none); unuse lets it go.
	fileChannel(ctx context.Context, owner, id string) (*session, *agent.Conn, error)
	unuse(s *session)
	// channelError says why a call's channel broke.
	channelError(ctx context.Context, s *session, err error) error
	memoryLimit(want int64) (int64, error)
	baseEnv(rt *Runtime, netEnv []string, extra map[string]string) []string
	// idleTTLOf is owner's session id's idle TTL (ErrNotFound: none).
	idleTTLOf(owner, id string) (time.Duration, error)
	// markLive records that the session holds a process: its sandbox is
	// kept (checkpointed) rather than thrown away.
	markLive(s *session)
}

// Processes returns the executor's processes role.
func (e *Executor) Processes() *Processes { return e.procs }

// procChannel checks owner's session (resuming it when hibernated, as a
// file call does) and returns its agent channel, the session marked busy
// (release it with unuse).
func (p *Processes) procChannel(ctx context.Context, owner, id string) (*session, *agent.Conn, error) {
	s, a, err := p.s.fileChannel(ctx, owner, id)
	if err != nil {
		return nil, nil, err
	}
	if a == nil {
		return nil, nil, sandbox.ErrNoProcessChannel
	}
	return s, a, nil
}

// channelError says why a call's channel broke: the session ended (404)
// or stopped running (hibernated, ending: 409) meanwhile, or its sandbox's
// channel failed while it runs.
func (e *Executor) channelError(ctx context.Context, s *session, err error) error {
	if !errors.Is(err, agent.ErrChannel) {
		return err
	}
	// A hibernation or an end closes the channel while it holds life and
	// before it records the new state: wait for it to finish.
	s.life.Lock()
	s.life.Unlock() //nolint:staticcheck // only waiting for the holder
	e.mu.Lock()
	gone, st := s.gone, s.state
	e.mu.Unlock()
	switch {
	case gone:
		return e.node.goneErr(ctx, s)
	case st != StateRunning:
		return fmt.Errorf("%w: %s", ErrBadState, st)
	}
	e.log.WarnContext(ctx, "process call on a broken agent channel", "session", s.id, "err", err)
	return fmt.Errorf("%w: the sandbox's agent channel failed", sandbox.ErrNoProcessChannel)
}

// checkProcessSpec validates a start request and returns the timeout the
// process gets.
func (p *Processes) checkProcessSpec(spec *sandbox.ProcessSpec, idleTTL time.Duration) (time.Duration, error) {
	bad := func(format string, args ...any) (time.Duration, error) {
		return 0, fmt.Errorf("%w: "+format, append([]any{sandbox.ErrInvalid}, args...)...)
	}
	if strings.TrimSpace(spec.Cmd) == "" || strings.ContainsRune(spec.Cmd, 0) {
		return bad("cmd is required")
	}
	if len(spec.Args) > sandbox.MaxProcessArgs {
		return bad("at most %d args", sandbox.MaxProcessArgs)
	}
	for _, a := range spec.Args {
		if strings.ContainsRune(a, 0) {
			return bad("an arg holds a NUL byte")
		}
	}
	if err := CheckEnv(spec.Env); err != nil {
		return 0, err
	}
	if spec.Cwd != "" && (!path.IsAbs(spec.Cwd) || strings.ContainsRune(spec.Cwd, 0)) {
		return bad("cwd must be an absolute path")
	}
	if len(spec.Tag) > sandbox.MaxProcessTagLen || strings.IndexFunc(spec.Tag, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return bad("tag must be at most %d printable characters", sandbox.MaxProcessTagLen)
	}
	if t := spec.PTY; t != nil && (t.Cols < 1 || t.Rows < 1 || t.Cols > sandbox.MaxTermSize || t.Rows > sandbox.MaxTermSize) {
		return bad("pty cols and rows must be between 1 and %d", sandbox.MaxTermSize)
	}
	timeout := spec.Timeout
	if timeout == 0 {
		timeout = idleTTL
	}
	if timeout < 0 || timeout > p.cfg.MaxIdleTTL {
		return bad("timeout must be between 1 and %d seconds", int(p.cfg.MaxIdleTTL.Seconds()))
	}
	return timeout, nil
}

// StartProcess starts a background process in owner's session.
func (p *Processes) StartProcess(ctx context.Context, owner, id string, spec sandbox.ProcessSpec) (sandbox.Process, error) {
	ttl, err := p.s.idleTTLOf(owner, id)
	if err != nil {
		return sandbox.Process{}, err
	}
	timeout, err := p.checkProcessSpec(&spec, ttl)
	if err != nil {
		return sandbox.Process{}, err
	}
	mem, err := p.s.memoryLimit(spec.MemoryBytes)
	if err != nil {
		return sandbox.Process{}, err
	}
	s, a, err := p.procChannel(ctx, owner, id)
	if err != nil {
		return sandbox.Process{}, err
	}
	defer p.s.unuse(s)
	env := p.s.baseEnv(s.runtime, s.netEnv, spec.Env)
	start := &guest.ProcStart{Argv: append([]string{spec.Cmd}, spec.Args...), Cwd: spec.Cwd, UID: host.SandboxUID, GID: host.SandboxUID,
		MaxProcs: uint64(p.cfg.Pids), Stdin: spec.Stdin, Tag: spec.Tag, TimeoutMS: timeoutMS(timeout), MemoryBytes: mem}
	if start.Cwd == "" {
		start.Cwd = host.HomeDir
	}
	if spec.PTY != nil {
		start.PTY = &guest.WinSize{Cols: uint16(spec.PTY.Cols), Rows: uint16(spec.PTY.Rows)}
		if _, set := spec.Env["TERM"]; !set {
			env = append(env, "TERM=xterm-256color")
		}
	}
	start.Env = env
	r, err := a.ProcCall(ctx, guest.ProcCall{Op: "start", Start: start})
	if err != nil {
		return sandbox.Process{}, p.s.channelError(ctx, s, err)
	}
	if r.Proc == nil {
		return sandbox.Process{}, errors.New("guest started a process without describing it")
	}
	a.ProcStarted(r.Proc, time.Now().Add(timeout))
	// Recorded now, not at the end of the next execute: a server killed
	// before that must still find the process's sandbox live and keep it.
	p.s.markLive(s)
	p.log.InfoContext(ctx, "process started", "session", id, "pid", r.Proc.PID, "tag", spec.Tag, "pty", spec.PTY != nil)
	return processOf(r.Proc), nil
}

// ListProcesses lists the session's background processes, oldest first.
func (p *Processes) ListProcesses(ctx context.Context, owner, id string) ([]sandbox.Process, error) {
	s, a, err := p.procChannel(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer p.s.unuse(s)
	r, err := a.ProcCall(ctx, guest.ProcCall{Op: "list"})
	if err != nil {
		return nil, p.s.channelError(ctx, s, err)
	}
	out := make([]sandbox.Process, 0, len(r.Procs))
	for i := range r.Procs {
		out = append(out, processOf(&r.Procs[i]))
	}
	return out, nil
}

// GetProcess describes one background process.
func (p *Processes) GetProcess(ctx context.Context, owner, id string, pid int) (sandbox.Process, error) {
	r, err := p.procOp(ctx, owner, id, guest.ProcCall{Op: "get", PID: pid})
	if err != nil {
		return sandbox.Process{}, err
	}
	if r.Proc == nil {
		return sandbox.Process{}, errors.New("guest answered without the process")
	}
	return processOf(r.Proc), nil
}

// WriteProcessStdin queues data for the process's stdin and, with eof,
// closes it after them (a terminal gets ^D instead).
func (p *Processes) WriteProcessStdin(ctx context.Context, owner, id string, pid int, data []byte, eof bool) (int, error) {
	if len(data) > guest.ProcStdinBytes {
		return 0, fmt.Errorf("%w: at most %d bytes of stdin per call", sandbox.ErrTooLarge, guest.ProcStdinBytes)
	}
	r, err := p.procOp(ctx, owner, id, guest.ProcCall{Op: "stdin", PID: pid, Data: data, EOF: eof})
	if err != nil {
		return 0, err
	}
	return r.Written, nil
}

// SignalProcess sends signal sig (a name such as "SIGTERM") to the process.
func (p *Processes) SignalProcess(ctx context.Context, owner, id string, pid int, sig string) error {
	n, ok := signalNumber(sig)
	if !ok {
		return fmt.Errorf("%w: unknown signal %q", sandbox.ErrInvalid, sig)
	}
	_, err := p.procOp(ctx, owner, id, guest.ProcCall{Op: "signal", PID: pid, Signal: n})
	return err
}

// ResizeProcess sets the size of the process's terminal.
func (p *Processes) ResizeProcess(ctx context.Context, owner, id string, pid int, size sandbox.TermSize) error {
	if size.Cols < 1 || size.Rows < 1 || size.Cols > sandbox.MaxTermSize || size.Rows > sandbox.MaxTermSize {
		return fmt.Errorf("%w: cols and rows must be between 1 and %d", sandbox.ErrInvalid, sandbox.MaxTermSize)
	}
	_, err := p.procOp(ctx, owner, id, guest.ProcCall{Op: "resize", PID: pid, Size: &guest.WinSize{Cols: uint16(size.Cols), Rows: uint16(size.Rows)}})
	return err
}

// procOp runs one call on the session's process table.
func (p *Processes) procOp(ctx context.Context, owner, id string, c guest.ProcCall) (*guest.ProcReply, error) {
	s, a, err := p.procChannel(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer p.s.unuse(s)
	r, err := a.ProcCall(ctx, c)
	if err != nil {
		return nil, p.s.channelError(ctx, s, err)
	}
	return r, nil
}

// procReadWait is how long one read waits in the guest for output while
// following; each read's call allows this plus procCallMargin.
const (
	procReadWait   = 15 * time.Second
	procCallMargin = 10 * time.Second
)

// ProcessOutput streams the process's output from offset from to emit:
// what is kept now and, with follow, what comes until the process ends or
// ctx is done. The stream ends with an Exit event once the process has
// ended and everything is out; without follow, a running process's stream
// ends after what is kept now. An error from emit ends the stream.
func (p *Processes) ProcessOutput(ctx context.Context, owner, id string, pid int, from int64, follow bool, emit func(sandbox.ProcessEvent) error) error {
	s, a, err := p.procChannel(ctx, owner, id)
	if err != nil {
		return err
	}
	defer p.s.unuse(s)
	if from < 0 {
		from = 0
	}
	for {
		wait := time.Duration(0)
		if follow {
			wait = procReadWait
		}
		cctx, cancel := context.WithTimeout(ctx, wait+procCallMargin)
		r, err := a.ProcCall(cctx, guest.ProcCall{Op: "read", PID: pid, From: from, WaitMS: wait.Milliseconds()})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return p.s.channelError(ctx, s, err)
		}
		o := r.Output
		if o == nil {
			return errors.New("guest answered a read without output")
		}
		if o.Dropped > 0 {
			if err := emit(sandbox.ProcessEvent{Dropped: o.Dropped, Offset: from + o.Dropped}); err != nil {
				return err
			}
		}
		for _, c := range o.Chunks {
			if err := emit(sandbox.ProcessEvent{Stream: c.Stream, Offset: c.Offset, Data: c.Data}); err != nil {
				return err
			}
		}
		from = o.Next
		if o.Done {
			p := processOf(o.Proc)
			return emit(sandbox.ProcessEvent{Offset: from, Exit: &p})
		}
		if !follow && len(o.Chunks) == 0 && o.Dropped == 0 {
			return nil
		}
		// While following an exited process's remaining output, or after
		// a wait that brought nothing, read again.
	}
}

// processOf is the shared shape of a guest's process description.
func processOf(i *guest.ProcInfo) sandbox.Process {
	if i == nil {
		return sandbox.Process{}
	}
	p := sandbox.Process{PID: i.PID, Tag: i.Tag, PTY: i.PTY, Stdin: i.Stdin, State: i.State, ExitCode: i.ExitCode,
		Signal: i.Signal, TimedOut: i.TimedOut, OOMKilled: i.OOMKilled, StartedAt: i.StartedAt, EndedAt: i.EndedAt, OutputBytes: i.OutputBytes}
	if len(i.Argv) > 0 {
		p.Cmd, p.Args = i.Argv[0], i.Argv[1:]
	}
	return p
}

// signalNumbers are the signals a caller may send a process by name.
var signalNumbers = map[string]int{
	"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGKILL": 9, "SIGUSR1": 10, "SIGUSR2": 12,
	"SIGTERM": 15, "SIGCONT": 18, "SIGSTOP": 19, "SIGTSTP": 20, "SIGWINCH": 28,
}

func signalNumber(name string) (int, bool) {
	n, ok := signalNumbers[name]
	return n, ok
}

// processesActive reports whether session id's sandbox runs a background
// process whose deadline has not passed: such a session is not idle.
// idleTTLOf is owner's session id's idle TTL.
func (e *Executor) idleTTLOf(owner, id string) (time.Duration, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sessions[id]
	if !ok || s.owner != owner {
		return 0, ErrNotFound
	}
	return s.idleTTL, nil
}

// markLive marks s live and records it in the store.
func (e *Executor) markLive(s *session) {
	e.mu.Lock()
	s.live = true
	e.mu.Unlock()
	e.ckpts.persistLive(s)
}

func (e *Executor) processesActive(id string, now time.Time) bool {
	a := e.agents.For(id)
	return a != nil && a.ProcsActive(now)
}
