package executor

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// cleanup is an undo stack in the manner of gVisor's pkg/cleanup: Add
// pushes an undo step, Clean runs the steps in reverse order, Release
// forgets them once the work they guard has succeeded. Every step runs even
// when an earlier one panics: the panic is logged with its stack and the
// next step runs, so a fault in one undo (or in the work being undone)
// never keeps the later ones (the capacity slot is usually the last) from
// running. The zero value is an empty stack that logs nowhere; it is not
// safe for concurrent use.
type cleanup struct {
	steps []cleanupStep
	log   *slog.Logger
}

type cleanupStep struct {
	name string
	fn   func(ctx context.Context) error
}

// cleanupTimeout bounds the whole undo of a failed creation.
const cleanupTimeout = 2 * time.Minute

func newCleanup(log *slog.Logger) *cleanup { return &cleanup{log: log} }

// Add pushes an undo step; name says what it undoes in the log.
func (c *cleanup) Add(name string, fn func(ctx context.Context) error) {
	c.steps = append(c.steps, cleanupStep{name: name, fn: fn})
}

// Release forgets every step: the work succeeded and keeps what it made.
func (c *cleanup) Release() { c.steps = nil }

// Clean runs the steps in reverse order on a context of its own (the
// caller's may be what failed) and empties the stack. Errors and panics of
// steps are logged, not returned: the caller is already failing.
func (c *cleanup) Clean() {
	if len(c.steps) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for i := len(c.steps) - 1; i >= 0; i-- {
		if err := c.steps[i].run(ctx); err != nil && c.log != nil {
			c.log.Error("undoing a failed step", "step", c.steps[i].name, "err", err)
		}
	}
	c.steps = nil
}

// run calls the step, turning a panic into an error.
func (s cleanupStep) run(ctx context.Context) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return s.fn(ctx)
}

// PanicError is a panic caught in session creation or its undo, returned
// as an error so that the caller answers (and logs) a plain failure.
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string { return fmt.Sprintf("panic: %v", p.Value) }
