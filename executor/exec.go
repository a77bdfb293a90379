package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// CheckEnv validates caller environment variables (sandbox.CheckEnv: the
// limits are shared with the API).
func CheckEnv(env map[string]string) error { return sandbox.CheckEnv(env) }

// ClampTimeout applies the default and reports a timeout over the maximum.
func (e *Executor) ClampTimeout(t time.Duration) (time.Duration, error) {
	if t == 0 {
		return e.cfg.DefaultTimeout, nil
	}
	if t < 0 || t > e.cfg.MaxTimeout {
		return 0, fmt.Errorf("%w: timeout must be between 1 and %d seconds", ErrInvalid, int(e.cfg.MaxTimeout.Seconds()))
	}
	return t, nil
}

// Execute runs code in owner's session: a fresh process, so files persist
// and variables do not. Calls on one session run one at a time.
func (e *Executor) Execute(ctx context.Context, owner, id string, req ExecRequest) (Result, error) {
	if err := CheckEnv(req.Env); err != nil {
		return Result{}, err
	}
	timeout, err := e.ClampTimeout(req.Timeout)
	if err != nil {
		return Result{}, err
	}
	if _, err := e.memoryLimit(req.MemoryBytes); err != nil {
		return Result{}, err
	}
	s, resumed, err := e.acquireResumed(ctx, owner, id)
	if err != nil {
		return Result{}, err
	}
	defer e.releaseSession(s)

	execID := newID("exec_")
	finish := e.record(ctx, store.ExecutionRow{ID: execID, SessionID: id, KeyID: owner, Language: s.runtime.Name, StartedAt: time.Now()})
	res, err := e.runInSession(ctx, s, req, timeout)
	res.ExecutionID = execID
	if resumed > 0 {
		res.ResumedMS = max(resumed.Milliseconds(), 1)
		e.mu.Lock()
		res.Memory = copyOutcome(s.memory) // that resume's (the lock is held: no other since)
		e.mu.Unlock()
	}
	err = finish(&res, err)
	attrs := []any{"session", id, "execution", execID, "language", s.runtime.Name, "status", res.Status,
		"exit_code", res.ExitCode, "duration_ms", res.DurationMS, "compile_ms", res.CompileMS, "run_ms", res.RunMS, "stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr), "truncated", res.Truncated}
	if s.kernel {
		attrs = append(attrs, "kernel", true, "results", len(res.Results), "kernel_restarted", res.KernelRestarted)
	}
	e.log.InfoContext(ctx, "execution", attrs...)
	return res, err
}

// record writes the execution's start row alongside the run (off the hot
// path) and returns the func that records its end. A call that dies with
// the server stays "running" in the store and is marked failed at the next
// start, never succeeded.
func (e *Executor) record(ctx context.Context, row store.ExecutionRow) func(*Result, error) error {
	inserted := make(chan error, 1)
	go func() { inserted <- e.store.InsertExecution(context.WithoutCancel(ctx), row) }()
	return func(res *Result, err error) error {
		ierr := <-inserted
		state := sandbox.ExecDone
		if err != nil {
			// A failed call is "failed", except a run classified out of
			// memory (the host's OOM killer took the sandbox): the
			// client is answered status oom, so that status stays.
			state = sandbox.ExecFailed
			if res.Status != StatusOOM {
				res.Status = sandbox.StatusFailed
			}
		}
		if ierr == nil {
			ierr = e.store.FinishExecution(context.WithoutCancel(ctx), row.ID, string(state), string(res.Status), res.ExitCode, res.DurationMS)
		}
		if err == nil && ierr != nil {
			e.log.ErrorContext(ctx, "recording execution", "execution", row.ID, "err", ierr)
		}
		return err
	}
}

// acquire takes the session's lock (waiting for a running call) and marks
// it busy so the reaper leaves it alone. A hibernated session is resumed
// first (see acquireResumed).
func (e *Executor) acquire(ctx context.Context, owner, id string) (*session, error) {
	s, _, err := e.acquireResumed(ctx, owner, id)
	return s, err
}

// acquireResumed is acquire that also says how long resuming the session
// took (0: it was running, and no resume happened while the call waited).
// Every call that waited for a resume reports it, not only the one that
// did it: in the context's resume report (sandbox.WithResumeReport) as soon
// as the resume is done, and in the duration returned. A call that finds
// the session hibernated says so first (sandbox.NoteResumePending).
func (e *Executor) acquireResumed(ctx context.Context, owner, id string) (*session, time.Duration, error) {
	e.mu.Lock()
	s, ok := e.sessions[id]
	if !ok || s.owner != owner {
		e.mu.Unlock()
		return nil, 0, ErrNotFound
	}
	s.busy++
	seen, hibernated := s.resumes, s.state == StateHibernated
	w := &resumeWaiter{ctx: ctx}
	if s.waiters == nil {
		s.waiters = map[*resumeWaiter]struct{}{}
	}
	s.waiters[w] = struct{}{}
	e.mu.Unlock()
	if hibernated {
		sandbox.NoteResumePending(ctx)
	}
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		e.mu.Lock()
		s.busy--
		delete(s.waiters, w)
		e.mu.Unlock()
		return nil, 0, ctx.Err()
	}
	e.mu.Lock()
	delete(s.waiters, w)
	st, gone := s.state, s.gone
	var took time.Duration
	if s.resumes != seen {
		took = s.resumeTook // done while this call waited (and noted then)
	}
	e.mu.Unlock()
	if gone {
		e.releaseSession(s)
		return nil, 0, e.node.goneErr(ctx, s)
	}
	if st == StateHibernated {
		var err error
		if took, err = e.dur.resume(ctx, s); err != nil {
			e.releaseSession(s)
			return nil, 0, fmt.Errorf("resuming session %s: %w", id, err)
		}
		e.mu.Lock()
		st = s.state
		var waiting []*resumeWaiter
		if took > 0 {
			s.resumes++
			s.resumeTook = took
			for o := range s.waiters {
				waiting = append(waiting, o)
			}
		}
		e.mu.Unlock()
		sandbox.NoteResume(ctx, took)
		for _, o := range waiting {
			sandbox.NoteResume(o.ctx, took)
		}
	}
	if st != StateRunning {
		e.releaseSession(s)
		return nil, 0, fmt.Errorf("%w: %s", ErrBadState, st)
	}
	return s, took, nil
}

func (e *Executor) releaseSession(s *session) {
	e.ckpts.persistLive(s)
	e.mu.Lock()
	s.busy--
	s.lastUsed = time.Now()
	e.mu.Unlock()
	<-s.lock
}

func (e *Executor) baseEnv(rt *Runtime, netEnv []string, extra map[string]string) []string {
	env := []string{
		"HOME=" + host.HomeDir,
		"USER=sandbox",
		"LANG=C.UTF-8",
		"TMPDIR=/tmp",
	}
	// Every language's environment, then the language's at its version
	// (PATH with the version's folders first), from the runtimes file.
	env = append(env, e.rt.Env()...)
	env = append(env, rt.Env...)
	env = append(env, netEnv...)
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// runInSession runs the code in the session's sandbox.
func (e *Executor) runInSession(ctx context.Context, s *session, req ExecRequest, timeout time.Duration) (Result, error) {
	if s.kernel {
		return e.kernels.cell(ctx, s, req, timeout)
	}
	return e.guestRun(ctx, s.id, e.sessionRequest(s.runtime, s.netEnv, req, timeout), req.Stdin, req.OnOutput)
}

// sessionRequest is the guest request of one execute in a session.
func (e *Executor) sessionRequest(rt *Runtime, netEnv []string, req ExecRequest, timeout time.Duration) *guest.Request {
	mem, _ := e.memoryLimit(req.MemoryBytes) // checked by Execute
	return &guest.Request{
		Files:            []guest.File{{Path: rt.File, Content: []byte(req.Code)}},
		Links:            rt.Links,
		Argv:             rt.Run,
		Compile:          rt.Compile,
		InlineCompile:    rt.InlineCompile,
		CompileTimeoutMS: e.compileTimeoutMS(timeout),
		Env:              e.baseEnv(rt, netEnv, req.Env),
		Cwd:              host.HomeDir,
		UID:              host.SandboxUID,
		GID:              host.SandboxUID,
		TimeoutMS:        timeoutMS(timeout),
		MemoryBytes:      mem,
		MaxProcs:         uint64(e.cfg.Pids),
	}
}

// timeoutMS is a call's timeout for the guest: whole milliseconds rounded
// up and never below 1, because the guest reads 0 as "its default". A
// sub-millisecond timeout must not lose its deadline by rounding.
func timeoutMS(d time.Duration) int64 {
	return max(1, guest.CeilMS(d))
}

// compileTimeoutMS caps the compile step of a call with this timeout. The
// guest counts compile time against the call's timeout (TimeoutMS is the
// budget of compile and run together; the run gets what the compile left)
// and also stops the compile at this cap, so no call outlives its timeout
// whatever compile_timeout says. duration_ms is compile_ms plus run_ms.
func (e *Executor) compileTimeoutMS(timeout time.Duration) int64 {
	return min(timeoutMS(e.cfg.CompileTimeout), timeoutMS(timeout))
}

// memoryLimit is the memory limit of a call asking for want bytes: 0 is
// the executor's configured limit, and nothing goes above it.
func (e *Executor) memoryLimit(want int64) (int64, error) {
	switch {
	case want < 0:
		return 0, fmt.Errorf("%w: memory limit must not be negative", ErrInvalid)
	case want == 0 || want > e.cfg.MemoryBytes:
		return e.cfg.MemoryBytes, nil
	}
	return want, nil
}

// guestRun runs one guest request in sandbox id over the transport (its
// agent channel, else runsc exec); a run that ended without the guest's
// result is classified by lost.
func (e *Executor) guestRun(ctx context.Context, id string, greq *guest.Request, stdin []byte, onOutput func(string, []byte)) (Result, error) {
	res, err := e.agents.Run(ctx, id, greq, stdin, onOutput)
	if nr, ok := errors.AsType[*agent.NoResultError](err); ok {
		return e.lost(ctx, id, res, nr.Err)
	}
	return res, err
}

// lost handles an exec that returned no result: when the sandbox has died
// (the host's OOM killer takes the whole sandbox), the session is failed.
func (e *Executor) lost(ctx context.Context, id string, res Result, waitErr error) (Result, error) {
	if err := e.fault(stepRunLost, id); err != nil {
		return res, err
	}
	// The session object the call ran in: a call holds it (busy), so an
	// Adopt of its id waits for this call (waitLetGo), and the table
	// holds that object, or none when it was let go of.
	e.mu.Lock()
	s, ok := e.sessions[id]
	moved := !ok && e.node.wasMoved(id)
	if ok && s.gone {
		moved = true
	}
	e.mu.Unlock()
	if moved || e.node.holdPassed() {
		// Let go of meanwhile (Fence, or another node took it), or the
		// node's hold ran out while it was stopped (its fence process
		// killed the sandbox; the node fences as it wakes): its sandbox
		// was killed on purpose, and its row is not ours to write.
		return res, fmt.Errorf("session %s: %w", id, ErrSessionMoved)
	}
	st, err := e.runsc.State(context.WithoutCancel(ctx), id)
	// A sandbox killed from outside takes a moment to die (many threads):
	// look again briefly before deciding that it lives.
	for i := 0; err == nil && st.Status == host.ContainerRunning && i < 10; i++ {
		time.Sleep(100 * time.Millisecond)
		st, err = e.runsc.State(context.WithoutCancel(ctx), id)
	}
	if err == nil && st.Status == host.ContainerRunning {
		return res, fmt.Errorf("running code: no result from the sandbox: %v", waitErr)
	}
	e.mu.Lock()
	if ok && !s.gone && canMove(s.state, StateFailed) {
		e.move(s, StateFailed)
	}
	e.mu.Unlock()
	if err := e.store.SetSessionState(context.WithoutCancel(ctx), id, StateFailed, "sandbox lost", false); ok && errors.Is(err, store.ErrNotOwner) {
		return res, e.node.notOwner(ctx, s, err)
	}
	oom := host.HostOOM(e.boxes.cgroupName(id))
	// Stop waits for this teardown (e.bg) before it looks for sandboxes
	// left.
	if ok {
		e.bg.Add(1)
		go func() {
			defer e.bg.Done()
			_ = e.endSessionOf(context.Background(), s, "sandbox lost")
		}()
	}
	if oom {
		res.Status, res.ExitCode, res.Signal = StatusOOM, 137, "SIGKILL"
		return res, fmt.Errorf("%w: out of memory", ErrLost)
	}
	return res, ErrLost
}
