package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Transport holds the agent channels of a runsc root's sandboxes, by
// sandbox id, and runs guest requests in them: through the sandbox's
// channel when it has a working one, else with `runsc exec` (exec.go).
// Make it with NewTransport; it is safe for concurrent use.
type Transport struct {
	runsc *host.Runsc
	log   *slog.Logger
	// maxOutput caps each of a run's output streams; going over it kills
	// the run.
	maxOutput int64

	mu    sync.Mutex
	conns map[string]*Conn // sandbox id -> its guest agent channel
}

// NewTransport makes the transport of runsc's sandboxes, whose runs keep
// at most maxOutput bytes of each output stream.
func NewTransport(runsc *host.Runsc, log *slog.Logger, maxOutput int64) *Transport {
	return &Transport{runsc: runsc, log: log, maxOutput: maxOutput, conns: map[string]*Conn{}}
}

// For returns the sandbox's channel, if it has a working one.
func (t *Transport) For(id string) *Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.conns[id]
	if a == nil || a.Broken() {
		return nil
	}
	return a
}

// Has reports whether the sandbox has a channel, working or not.
func (t *Transport) Has(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conns[id] != nil
}

// Set makes a the sandbox's channel, closing the one it had.
func (t *Transport) Set(id string, a *Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.conns[id]; old != nil {
		old.Close()
	}
	t.conns[id] = a
}

// Drop closes and forgets a sandbox's channel.
func (t *Transport) Drop(id string) {
	t.mu.Lock()
	a := t.conns[id]
	delete(t.conns, id)
	t.mu.Unlock()
	if a != nil {
		a.Close()
	}
}

// CloseAll closes every channel and keeps them, as the death of the
// server's process does (tests).
func (t *Transport) CloseAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.conns {
		a.Close()
	}
}

// Destroy removes a sandbox and its channel.
func (t *Transport) Destroy(ctx context.Context, id string) error {
	t.Drop(id)
	return t.runsc.Destroy(ctx, id)
}

// Run runs one guest request in sandbox id: through the sandbox's
// agent when it has one, else with `runsc exec`. A run that ended without
// the guest's result returns a *NoResultError (the sandbox may be gone).
func (t *Transport) Run(ctx context.Context, id string, greq *guest.Request, stdin []byte, onOutput func(string, []byte)) (sandbox.Result, error) {
	if a := t.For(id); a != nil {
		return t.agentRun(ctx, id, a, greq, stdin, onOutput)
	}
	return t.Exec(ctx, id, greq, stdin, onOutput)
}

// agentRun runs one guest request through the sandbox's agent. The kill,
// deadline and output-cap rules are those of the exec path.
func (t *Transport) agentRun(ctx context.Context, id string, a *Conn, greq *guest.Request, stdin []byte, onOutput func(string, []byte)) (sandbox.Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.Ready(10 * time.Second); err != nil {
		t.Drop(id)
		t.log.WarnContext(ctx, "guest agent unavailable, using runsc exec", "sandbox", id, "err", err)
		return t.Exec(ctx, id, greq, stdin, onOutput)
	}
	a.seq++
	seq := a.seq
	payload, err := json.Marshal(guest.AgentRequest{Seq: seq, Request: *greq, Stdin: stdin})
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("encoding guest request: %w", err)
	}
	// A kill names its run: the guest ignores one that arrives after the
	// run has ended, so it cannot reach the next run's processes.
	k := &killer{}
	k.do = func(sandbox.KillReason) {
		if a.Send(guest.FrameKill, []byte(strconv.FormatUint(seq, 10))) != nil {
			t.execKill(ctx, id)
		}
	}
	stdout, stderr := t.captures(onOutput, k)

	done := make(chan outcome, 1)
	if !a.setSink(&runSink{stdout: stdout, stderr: stderr, done: done}) {
		t.Drop(id)
		return t.Exec(ctx, id, greq, stdin, onOutput)
	}
	start := time.Now()
	if err := a.Send(guest.FrameRun, payload); err != nil {
		// The channel is gone (the sandbox may be too): the exec path
		// runs it or finds the sandbox lost.
		t.Drop(id)
		t.log.WarnContext(ctx, "guest agent unusable, using runsc exec", "sandbox", id, "err", err)
		return t.Exec(ctx, id, greq, stdin, onOutput)
	}
	out := awaitRun(ctx, done, k, RunBudget(greq), func() {
		// The agent does not answer: the exec path's kill, then give up on
		// the channel (which ends the reader and fails the run).
		t.execKill(ctx, id)
		t.Drop(id)
	})
	k.seal()
	if out.err != nil {
		t.Drop(id)
	}
	return finishRun(ctx, out.raw, stdout, stderr, start, k.reason(), out.err)
}
