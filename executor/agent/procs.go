package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// procCalls is the host end of the process calls on one agent channel:
// the calls waiting for their reply, and the processes the guest reported
// running (which keep the session from being idle). Its zero value is
// ready; it is safe for concurrent use.
type procCalls struct {
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan procOutcome
	failed  error
	// running maps the pid of each process started through this channel
	// and not yet reported ended to its deadline.
	running map[int]time.Time
	// ended keeps the start times of processes whose end came before
	// their start's reply (the guest sends both at once), so the reply
	// does not count them running.
	ended map[int]time.Time
}

type procOutcome struct {
	reply *guest.ProcReply
	err   error
}

// deliver hands a reply to its call, or records a process's end; a frame
// that does not decode breaks the channel.
func (c *procCalls) deliver(typ byte, p []byte) error {
	switch typ {
	case guest.FrameProcReply:
		var r guest.ProcReply
		if err := json.Unmarshal(p, &r); err != nil {
			return fmt.Errorf("decoding process reply: %w", err)
		}
		c.mu.Lock()
		ch := c.waiting[r.ID]
		delete(c.waiting, r.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- procOutcome{reply: &r}
		}
	case guest.FrameProcExit:
		var i guest.ProcInfo
		if err := json.Unmarshal(p, &i); err != nil {
			return fmt.Errorf("decoding process end: %w", err)
		}
		c.mu.Lock()
		if _, ok := c.running[i.PID]; ok {
			delete(c.running, i.PID)
		} else {
			if c.ended == nil || len(c.ended) > 4*guest.MaxRunningProcs {
				c.ended = map[int]time.Time{}
			}
			c.ended[i.PID] = i.StartedAt
		}
		c.mu.Unlock()
	}
	return nil
}

// ProcStarted counts a process started through the channel running until
// its end or deadline.
func (a *Conn) ProcStarted(i *guest.ProcInfo, deadline time.Time) {
	c := &a.procs
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.ended[i.PID]; ok && at.Equal(i.StartedAt) {
		delete(c.ended, i.PID)
		return
	}
	if c.running == nil {
		c.running = map[int]time.Time{}
	}
	c.running[i.PID] = deadline
}

// ProcsActive reports whether a process started through the channel runs
// (and its deadline has not passed: the guest kills it then, and a lost
// end frame must not keep the session alive for ever).
func (a *Conn) ProcsActive(now time.Time) bool {
	c := &a.procs
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.running {
		if now.Before(d) {
			return true
		}
	}
	return false
}

// failAll ends every waiting call with the channel's failure.
func (c *procCalls) failAll(err error) {
	c.mu.Lock()
	if c.failed == nil {
		c.failed = err
	}
	w := c.waiting
	c.waiting = nil
	c.running = nil
	c.mu.Unlock()
	for _, ch := range w {
		ch <- procOutcome{err: err}
	}
}

// ProcCall sends one process call and waits for its reply. A failed
// reply is its code's sentinel of package sandbox; a broken channel is
// ErrChannel.
func (a *Conn) ProcCall(ctx context.Context, c guest.ProcCall) (*guest.ProcReply, error) {
	ch := make(chan procOutcome, 1)
	a.procs.mu.Lock()
	if a.procs.failed != nil {
		err := a.procs.failed
		a.procs.mu.Unlock()
		return nil, err
	}
	a.procs.next++
	c.ID = a.procs.next
	if a.procs.waiting == nil {
		a.procs.waiting = map[uint64]chan procOutcome{}
	}
	a.procs.waiting[c.ID] = ch
	a.procs.mu.Unlock()
	forget := func() {
		a.procs.mu.Lock()
		delete(a.procs.waiting, c.ID)
		a.procs.mu.Unlock()
	}
	b, err := json.Marshal(c)
	if err != nil {
		forget()
		return nil, fmt.Errorf("encoding process call: %w", err)
	}
	if err := a.Send(guest.FrameProcCall, b); err != nil {
		forget()
		return nil, fmt.Errorf("%w: %w", ErrChannel, err)
	}
	select {
	case out := <-ch:
		if out.err != nil {
			return nil, out.err
		}
		return out.reply, replyError(out.reply)
	case <-ctx.Done():
		forget() // a late reply is dropped
		return nil, ctx.Err()
	case <-a.closed:
		forget()
		return nil, ErrChannel
	}
}

// replyError is the sentinel of a failed reply's code, with its message.
func replyError(r *guest.ProcReply) error {
	if r.Error == "" && r.Code == "" {
		return nil
	}
	var s error
	switch r.Code {
	case guest.ProcCodeNotFound:
		s = sandbox.ErrProcessNotFound
	case guest.ProcCodeLimit:
		s = sandbox.ErrProcessLimit
	case guest.ProcCodeNotRunning:
		s = sandbox.ErrProcessNotRunning
	case guest.ProcCodeNoStdin:
		s = sandbox.ErrProcessNoStdin
	case guest.ProcCodeStdinFull:
		s = sandbox.ErrProcessStdinFull
	case guest.ProcCodeNotPTY:
		s = sandbox.ErrProcessNotPTY
	case guest.ProcCodeStart:
		s = sandbox.ErrProcessStart
	case guest.ProcCodeInvalid:
		s = sandbox.ErrInvalid
	default:
		// The guest's own failure: not the caller's to read.
		return fmt.Errorf("guest process call failed: %s", r.Error)
	}
	return fmt.Errorf("%w: %s", s, r.Error)
}
