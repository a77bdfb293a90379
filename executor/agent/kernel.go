package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// KernelOutcome is what a kernel call left: the guest's FrameKernelDone
// payload or the channel's failure, the capped stream output and why the
// host interrupted the cell, if it did.
type KernelOutcome struct {
	Raw []byte // the guest's guest.KernelResult
	Err error  // the channel failed before the result (it is dropped)
	// Stdout and Stderr are the cell's stream output, each capped;
	// Truncated: either went over its cap (which interrupts the cell).
	Stdout, Stderr string
	Truncated      bool
	Why            sandbox.KillReason
}

// KernelCall sends one kernel frame (guest.FrameKernelExec or
// guest.FrameKernelRestart) on sandbox id's channel a and waits for its
// FrameKernelDone. Stream output goes to captures (whose cap interrupts
// the cell), rich outputs to display (nil: dropped), called in the order
// they came with the stream output. A call past budget, or whose ctx
// ends, is interrupted; one whose guest stops answering loses the
// channel. The error is the call's that never reached the guest (then
// the channel is dropped).
func (t *Transport) KernelCall(ctx context.Context, id string, a *Conn, typ byte, kreq *guest.KernelRequest, budget time.Duration,
	onOutput func(string, []byte), display func([]byte)) (KernelOutcome, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.Ready(10 * time.Second); err != nil {
		t.Drop(id)
		return KernelOutcome{}, fmt.Errorf("%w: the guest agent does not answer: %v", sandbox.ErrBadState, err)
	}
	a.seq++
	kreq.Seq = a.seq
	payload, err := json.Marshal(kreq)
	if err != nil {
		return KernelOutcome{}, fmt.Errorf("encoding kernel request: %w", err)
	}
	seq := strconv.FormatUint(kreq.Seq, 10)
	k := &killer{}
	k.do = func(sandbox.KillReason) { _ = a.Send(guest.FrameKernelInterrupt, []byte(seq)) }
	stdout, stderr := t.captures(onOutput, k)
	done := make(chan outcome, 1)
	sink := &runSink{stdout: stdout, stderr: stderr, done: done}
	if display != nil {
		sink.display = func(p []byte) {
			// Serialised with the stream output, in the order they came.
			stdout.mu.Lock()
			defer stdout.mu.Unlock()
			display(p)
		}
	}
	if !a.setSink(sink) {
		t.Drop(id)
		return KernelOutcome{}, fmt.Errorf("%w: the guest agent channel failed", sandbox.ErrBadState)
	}
	if err := a.Send(typ, payload); err != nil {
		t.Drop(id)
		return KernelOutcome{}, fmt.Errorf("%w: the guest agent channel failed: %v", sandbox.ErrBadState, err)
	}
	out := awaitRun(ctx, done, k, budget, func() { t.Drop(id) })
	k.seal()
	if out.err != nil {
		t.Drop(id)
	}
	stdout.mu.Lock()
	defer stdout.mu.Unlock()
	return KernelOutcome{Raw: out.raw, Err: out.err, Stdout: stdout.buf.String(), Stderr: stderr.buf.String(),
		Truncated: stdout.truncated || stderr.truncated, Why: k.reason()}, nil
}
