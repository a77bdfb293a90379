package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// NoResultError is a run that ended without the guest's result: the
// sandbox itself may be gone, which only the session service can tell
// (its Result is the output the run left).
type NoResultError struct {
	Err error // how the run's transport ended (runsc exec's exit, the channel's failure); may be nil
}

func (e *NoResultError) Error() string {
	return fmt.Sprintf("running code: no result from the sandbox: %v", e.Err)
}

func (e *NoResultError) Unwrap() error { return e.Err }

// capture collects one output stream up to max bytes.
type capture struct {
	mu        *sync.Mutex // shared by both streams: OnOutput calls are serialised
	name      string
	buf       bytes.Buffer
	max       int64
	truncated bool
	onOutput  func(string, []byte)
	overflow  func()
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if room := c.max - int64(c.buf.Len()); room < int64(len(p)) {
		if room > 0 {
			p = p[:room]
		} else {
			p = nil
		}
		if !c.truncated {
			c.truncated = true
			go c.overflow()
		}
	}
	if len(p) > 0 {
		c.buf.Write(p)
		if c.onOutput != nil {
			c.onOutput(c.name, p)
		}
	}
	return n, nil
}

// killer stops a run's user processes once, for the first reason given.
type killer struct {
	once sync.Once
	mu   sync.Mutex
	why  sandbox.KillReason
	do   func(why sandbox.KillReason)
}

func (k *killer) kill(why sandbox.KillReason) {
	k.once.Do(func() {
		k.mu.Lock()
		k.why = why
		k.mu.Unlock()
		k.do(why)
	})
}

// seal ends the run's kills: it waits for a kill in progress and makes
// later ones no-ops, so a late kill cannot reach the next call's processes.
func (k *killer) seal() { k.once.Do(func() {}) }

func (k *killer) reason() sandbox.KillReason {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.why
}

// captures makes the two output streams of a run; going over the cap on
// either kills the run.
func (t *Transport) captures(onOutput func(string, []byte), k *killer) (*capture, *capture) {
	mu := &sync.Mutex{}
	over := func() { k.kill(sandbox.KillOutputLimit) }
	return &capture{mu: mu, name: "stdout", max: t.maxOutput, onOutput: onOutput, overflow: over},
		&capture{mu: mu, name: "stderr", max: t.maxOutput, onOutput: onOutput, overflow: over}
}

// execKill kills every user process in the sandbox with `runsc exec`. It
// runs to the end even when ctx (the call's, for its log line) is done.
func (t *Transport) execKill(ctx context.Context, id string) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := t.runsc.Run(kctx, "", "exec", "--user", "0:0", "--cap", "CAP_KILL", id, host.GuestBin, "kill"); err != nil {
		t.log.WarnContext(ctx, "killing user processes", "session", id, "err", err)
	}
}

// Exec runs one guest request with `runsc exec` and reads its result
// from fd 3, whether or not the sandbox has a channel. The host backs the
// guest's own limits: output caps, a deadline past the guest's timeout,
// and the caller's cancellation all kill the user's processes from
// outside.
func (t *Transport) Exec(ctx context.Context, id string, greq *guest.Request, stdin []byte, onOutput func(string, []byte)) (sandbox.Result, error) {
	header, err := guest.Encode(greq)
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("encoding guest request: %w", err)
	}
	rr, rw, err := os.Pipe()
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("creating result pipe: %w", err)
	}
	defer rr.Close()

	k := &killer{do: func(sandbox.KillReason) { t.execKill(ctx, id) }}
	stdout, stderr := t.captures(onOutput, k)

	// runsc exec must outlive a kill from inside; it gets its own context
	// and is killed only as the last resort.
	cmdCtx, cmdCancel := context.WithCancel(context.Background())
	defer cmdCancel()
	cmd := t.runsc.Command(cmdCtx, "", "exec", "--user", "0:0",
		"--cap", "CAP_CHOWN", "--cap", "CAP_SETUID", "--cap", "CAP_SETGID", "--cap", "CAP_KILL",
		"--pass-fd", "3:3", id, host.GuestBin, "run")
	cmd.Stdin = io.MultiReader(bytes.NewReader(header), bytes.NewReader(stdin))
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = []*os.File{rw}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		rw.Close()
		return sandbox.Result{}, fmt.Errorf("starting runsc exec: %w", err)
	}
	rw.Close()
	resultCh := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(rr, 64<<10))
		resultCh <- b
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	waitErr := awaitRun(ctx, done, k, RunBudget(greq), cmdCancel) // last resort: the runsc client itself
	raw := <-resultCh
	k.seal()
	return finishRun(ctx, raw, stdout, stderr, start, k.reason(), waitErr)
}

// RunBudget is how long the host lets a run go before it kills it: the
// guest's own deadline plus a margin. TimeoutMS bounds compile and run
// together (the guest counts the compile against it), so the compile adds
// nothing; a request without a timeout gets the guest's default.
func RunBudget(greq *guest.Request) time.Duration {
	ms := greq.TimeoutMS
	if ms <= 0 {
		ms = guest.DefaultTimeoutMS
	}
	return time.Duration(ms)*time.Millisecond + RunSlack
}

// RunSlack is the host's margin past the guest's deadline: the guest's
// own kill and report normally land well inside it.
const RunSlack = 5 * time.Second

// awaitRun waits for a run's end on ended. When ctx is done or budget has
// passed it kills the run and waits on; if the run still has not ended
// 10 s after the kill, giveUp must make ended fire (it cuts the run's
// transport). Whatever the kill's reason, it returns only once ended has
// fired, so nothing of the run is left reading or writing.
func awaitRun[T any](ctx context.Context, ended <-chan T, k *killer, budget time.Duration, giveUp func()) T {
	backstop := time.NewTimer(budget)
	defer backstop.Stop()
	select {
	case v := <-ended:
		return v
	case <-ctx.Done():
		k.kill(sandbox.KillCancelled)
	case <-backstop.C:
		k.kill(sandbox.KillTimeout)
	}
	select {
	case v := <-ended:
		return v
	case <-time.After(10 * time.Second):
		giveUp()
		return <-ended
	}
}

// finishRun turns what a run left (the guest's JSON result, if any, the
// output, the kill reason) into the caller's Result.
func finishRun(ctx context.Context, raw []byte, stdout, stderr *capture, start time.Time, why sandbox.KillReason, waitErr error) (sandbox.Result, error) {
	stdout.mu.Lock()
	res := sandbox.Result{
		Stdout: stdout.buf.String(), Stderr: stderr.buf.String(),
		Truncated:  stdout.truncated || stderr.truncated,
		DurationMS: time.Since(start).Milliseconds(),
	}
	stdout.mu.Unlock()
	var gres guest.Result
	if len(raw) > 0 && json.Unmarshal(raw, &gres) == nil {
		res.ExitCode, res.Signal, res.Status = gres.ExitCode, gres.Signal, gres.Status
		if gres.DurationMS > 0 {
			res.DurationMS, res.CompileMS, res.RunMS = gres.DurationMS, gres.CompileMS, gres.RunMS
		}
		if gres.Status == sandbox.StatusStartError {
			// The caller's own files that clash or do not fit are a bad
			// request, not a server failure.
			switch gres.Code {
			// The guest's own message names its folders: it stays here.
			case guest.CodeInvalid:
				return res, fmt.Errorf("%w: the files cannot be placed (a path repeats, is a folder of another, or is reserved)", sandbox.ErrInvalid)
			case guest.CodeTooLarge:
				return res, fmt.Errorf("%w: the files do not fit in the sandbox", sandbox.ErrTooLarge)
			}
			return res, fmt.Errorf("guest: %s", gres.Error)
		}
	}
	switch {
	case res.Truncated:
		res.Status, res.Truncated = sandbox.StatusOutputLimit, true
		if res.Signal == "" {
			res.ExitCode, res.Signal = 137, "SIGKILL"
		}
	case why == sandbox.KillTimeout:
		res.Status, res.ExitCode, res.Signal = sandbox.StatusTimeout, 137, "SIGKILL"
	case why == sandbox.KillCancelled:
		return res, ctx.Err()
	case res.Status == "":
		// No result from the guest: the sandbox itself may be gone.
		return res, &NoResultError{Err: waitErr}
	}
	return res, nil
}
