package executor

// Kernel sessions: a session made with Kernel runs every execute as a
// cell of one long-lived IPython kernel in its sandbox, so variables,
// imports and loaded data stay between calls. The guest runs the kernel
// (executor/guest/kernel.go); this side sends cells over the agent
// channel, caps what comes back (stream output like any run's, rich
// outputs by their total size) and tells the caller when the kernel it
// relied on was lost (KernelRestarted).

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// ErrKernelUnsupported and ErrNoKernel are sandbox's.
var (
	ErrKernelUnsupported = sandbox.ErrKernelUnsupported
	ErrNoKernel          = sandbox.ErrNoKernel
)

// kernelLanguage is the one runtime with a kernel.
const kernelLanguage = "python3"

// kernelSlack is the host's margin past a cell's deadline: a cell may
// first start its kernel (the guest's deadline counts from the cell's
// start, after it; the guest waits up to 120 s for a start), and the
// bridge replaces a kernel that ignores the interrupt at the deadline,
// another start.
const kernelSlack = 150 * time.Second

// kernelRestartBudget bounds a restart (a kernel start) on the host.
const kernelRestartBudget = 150 * time.Second

// Kernels is the session service's kernel role (api.Kernels): a kernel
// session's cells and its kernel's restart, over the sandbox's agent
// channel (executor/agent). It reaches sessions only through
// kernelSessions. Get it from Executor.Kernels; it is safe for
// concurrent use.
type Kernels struct {
	s      kernelSessions
	agents *agent.Transport
	cfg    Config
	log    *slog.Logger
}

// kernelSessions is what Kernels needs of the session service.
type kernelSessions interface {
	// acquireResumed takes owner's session's lock (resuming it when
	// hibernated); releaseSession lets it go.
	acquireResumed(ctx context.Context, owner, id string) (*session, time.Duration, error)
	releaseSession(s *session)
	memoryLimit(want int64) (int64, error)
	baseEnv(rt *Runtime, netEnv []string, extra map[string]string) []string
	// lost classifies a call that ended without a result: the sandbox may
	// be gone.
	lost(ctx context.Context, id string, res Result, waitErr error) (Result, error)
	// sessionsLocked runs f with the session table's lock held, which
	// guards a session's mutable fields.
	sessionsLocked(f func())
}

// Kernels returns the executor's kernel role.
func (e *Executor) Kernels() *Kernels { return e.kernels }

// sessionsLocked runs f with e.mu held (kernelSessions).
func (e *Executor) sessionsLocked(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f()
}

// markUsed records that the session's caller now relies on its
// kernel's state (a cell ran in it). live says the sandbox holds memory
// a plain restart would lose (hibernation checkpoints it).
func (k *Kernels) markUsed(s *session, used bool) {
	k.s.sessionsLocked(func() {
		s.kernelUsed = used
		s.live = true
	})
}

// cell runs one execute of a kernel session as a cell. The caller
// holds the session's lock.
func (k *Kernels) cell(ctx context.Context, s *session, req ExecRequest, timeout time.Duration) (Result, error) {
	if len(req.Stdin) > 0 {
		return Result{}, fmt.Errorf("%w: a kernel cell reads no stdin", ErrInvalid)
	}
	a := k.agents.For(s.id)
	if a == nil {
		return Result{}, fmt.Errorf("%w: the sandbox has no agent channel for its kernel; hibernate the session and call again (a fresh kernel starts)", ErrBadState)
	}
	mem, _ := k.s.memoryLimit(req.MemoryBytes)
	kreq := k.request(s, req.Env)
	kreq.Code, kreq.TimeoutMS, kreq.MemoryBytes = req.Code, timeoutMS(timeout), mem
	results := &cellResults{max: k.cfg.MaxOutputBytes, onDisplay: req.OnDisplay}
	start := time.Now()
	out, err := k.agents.KernelCall(ctx, s.id, a, guest.FrameKernelExec, kreq, time.Duration(kreq.TimeoutMS)*time.Millisecond+kernelSlack, req.OnOutput, results.add)
	if err != nil {
		return Result{}, err
	}
	res := Result{Stdout: out.Stdout, Stderr: out.Stderr, Truncated: out.Truncated,
		DurationMS: time.Since(start).Milliseconds()}
	var kres guest.KernelResult
	if out.Err != nil || json.Unmarshal(out.Raw, &kres) != nil {
		// The channel broke mid-cell: the sandbox may be gone with it.
		if out.Err == nil {
			out.Err = fmt.Errorf("%w: undecodable kernel result", agent.ErrChannel)
		}
		return k.s.lost(ctx, s.id, res, out.Err)
	}
	if kres.Status == sandbox.StatusStartError {
		k.log.WarnContext(ctx, "kernel did not start", "session", s.id, "err", kres.Message)
		return res, fmt.Errorf("starting the kernel: %s", kres.Message)
	}
	results.mu.Lock()
	res.Results, res.Truncated = results.list, res.Truncated || results.truncated || kres.Truncated
	results.mu.Unlock()
	if kres.DurationMS > 0 {
		res.DurationMS = kres.DurationMS
	}
	res.RunMS = res.DurationMS
	res.Status = kres.Status
	if kres.Error != nil {
		res.Error = &CellError{Name: kres.Error.Name, Value: stripANSI(kres.Error.Value), Traceback: stripAll(kres.Error.Traceback)}
	}
	var used bool
	k.s.sessionsLocked(func() { used = s.kernelUsed })
	// Lost since the last reply: the kernel died (now or between cells),
	// or this sandbox is not the one whose kernel the caller used (a
	// restart or a resume without its memory).
	res.KernelRestarted = kres.Restarted || (kres.Started && used)
	switch why := out.Why; {
	case out.Truncated || res.Status == StatusOutputLimit:
		// Over the cap here, or one message over it in the guest.
		res.Status, res.Truncated = StatusOutputLimit, true
	case why == sandbox.KillTimeout:
		res.Status = StatusTimeout
	case why == sandbox.KillCancelled:
		return res, ctx.Err()
	}
	switch res.Status {
	case StatusOK:
		res.ExitCode = 0
	case StatusTimeout, StatusOOM, StatusOutputLimit:
		res.ExitCode, res.Signal = 137, "SIGKILL"
		if res.Status != StatusOOM && !kres.Died {
			// An interrupted cell: the kernel and its state remain.
			res.ExitCode, res.Signal = 130, "SIGINT"
		}
	default:
		res.ExitCode = 1
	}
	// The caller now relies on the kernel's state, unless the kernel died
	// during this cell (the fresh one holds nothing of the caller's, and
	// this reply said so).
	k.markUsed(s, !kres.Died)
	return res, nil
}

// request is the start part of a kernel request of session s.
func (k *Kernels) request(s *session, env map[string]string) *guest.KernelRequest {
	return &guest.KernelRequest{
		Env: k.s.baseEnv(s.runtime, s.netEnv, env), Cwd: host.HomeDir, UID: host.SandboxUID, GID: host.SandboxUID,
		MaxProcs: uint64(k.cfg.Pids), MaxMessageBytes: k.cfg.MaxOutputBytes,
	}
}

// RestartKernel ends the kernel of owner's kernel session and starts a
// fresh one: every variable is gone.
func (k *Kernels) RestartKernel(ctx context.Context, owner, id string) (Session, error) {
	s, _, err := k.s.acquireResumed(ctx, owner, id)
	if err != nil {
		return Session{}, err
	}
	defer k.s.releaseSession(s)
	if !s.kernel {
		return Session{}, ErrNoKernel
	}
	a := k.agents.For(s.id)
	if a == nil {
		return Session{}, fmt.Errorf("%w: the sandbox has no agent channel for its kernel; hibernate the session and call again", ErrBadState)
	}
	out, err := k.agents.KernelCall(ctx, s.id, a, guest.FrameKernelRestart, k.request(s, nil), kernelRestartBudget, nil, nil)
	if err != nil {
		return Session{}, err
	}
	var kres guest.KernelResult
	if out.Err != nil || json.Unmarshal(out.Raw, &kres) != nil {
		if out.Err == nil {
			out.Err = fmt.Errorf("%w: undecodable kernel result", agent.ErrChannel)
		}
		_, err := k.s.lost(ctx, s.id, Result{}, out.Err)
		return Session{}, err
	}
	if kres.Status != StatusOK {
		return Session{}, fmt.Errorf("restarting the kernel: %s", kres.Message)
	}
	// Asked for: the caller knows its state is gone.
	k.markUsed(s, false)
	k.log.InfoContext(ctx, "kernel restarted", "session", id, "ms", kres.DurationMS)
	var snap Session
	k.s.sessionsLocked(func() { snap = s.snapshot() })
	return snap, nil
}

// cellResults collects a cell's rich outputs up to max bytes (their JSON
// size, together); an output past the cap is left out and marks the
// result truncated. add is called under the stream captures' lock
// (agent.Transport.KernelCall).
type cellResults struct {
	mu        sync.Mutex
	max       int64
	size      int64
	list      []CellResult
	truncated bool
	onDisplay func(CellResult)
}

// CellResult and CellError are sandbox's.
type (
	CellResult = sandbox.CellResult
	CellError  = sandbox.CellError
)

func (c *cellResults) add(p []byte) {
	var d guest.KernelDisplay
	if json.Unmarshal(p, &d) != nil || d.Data == nil {
		return
	}
	r := CellResult{Type: d.Type, IsMainResult: d.Type == "execute_result", Data: d.Data}
	if r.Type != "execute_result" {
		r.Type = "display_data"
	}
	c.mu.Lock()
	if c.truncated || c.size+int64(len(p)) > c.max {
		c.truncated = true
		c.mu.Unlock()
		return
	}
	c.size += int64(len(p))
	c.list = append(c.list, r)
	c.mu.Unlock()
	if c.onDisplay != nil {
		c.onDisplay(r)
	}
}

// ansi matches the terminal colour and cursor sequences IPython puts in
// tracebacks.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

func stripANSI(s string) string { return ansi.ReplaceAllString(s, "") }

func stripAll(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = stripANSI(l)
	}
	return out
}
