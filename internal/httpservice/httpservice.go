// Package httpservice runs an http.Server as a lifecycle component: Start
// listens and serves, Stop drains (a hook, then a delay while the listener
// stays open), shuts down within a grace period and closes what is left.
package httpservice

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/httperr"
)

// Service serves Server on the listener Listen opens. Set the fields
// before Start; Start and Stop are each called once, Stop after a Start
// that returned nil (internal/lifecycle's contract).
type Service struct {
	Server *http.Server
	// Listen opens the listener (plain TCP, TLS, ...).
	Listen func(ctx context.Context) (net.Listener, error)
	// Drain, if set, runs first in Stop: a load balancer is told to go
	// (readiness red) and new work is refused while the listener stays
	// open for DrainDelay.
	Drain      func()
	DrainDelay time.Duration
	// ShutdownGrace bounds how long running requests may finish once the
	// listener closes; then the requests left have their contexts
	// cancelled with cause httperr.ErrShutdown and get ReplyWait to send
	// their reply (an error status) before connections are closed.
	ShutdownGrace time.Duration
	// ReplyWait: see ShutdownGrace; zero means DefaultReplyWait.
	ReplyWait time.Duration
	Log       *slog.Logger

	ctx    context.Context // Start's: when it ends, the drain delay is cut short
	addr   net.Addr
	errc   chan error
	failed bool
	// interrupt cancels every request's context (Server.BaseContext's).
	interrupt context.CancelCauseFunc
}

// DefaultReplyWait is how long requests cut short by the end of the
// grace period get to reply when Service.ReplyWait is zero.
const DefaultReplyWait = 5 * time.Second

// Start opens the listener and serves in the background.
func (s *Service) Start(ctx context.Context) error {
	ln, err := s.Listen(ctx)
	if err != nil {
		return err
	}
	s.ctx, s.addr = ctx, ln.Addr()
	base, interrupt := context.WithCancelCause(context.WithoutCancel(ctx))
	s.interrupt = interrupt
	if s.Server.BaseContext == nil {
		s.Server.BaseContext = func(net.Listener) context.Context { return base }
	}
	s.errc = make(chan error, 1)
	go func() { s.errc <- s.Server.Serve(ln) }()
	return nil
}

// Addr is the listener's address (after Start).
func (s *Service) Addr() net.Addr { return s.addr }

// Done yields the error Serve returned when it stops serving on its own
// (never http.ErrServerClosed before Stop). Wait on it beside signals; a
// value taken from it makes Stop skip the drain delay.
func (s *Service) Done() <-chan error { return s.errc }

// Failed tells Stop that serving ended with err (taken from Done): no
// drain delay, as nobody is being served.
func (s *Service) Failed(err error) { s.failed = err != nil }

// Stop drains, shuts the server down within ShutdownGrace and closes the
// connections left.
func (s *Service) Stop(ctx context.Context) error {
	if s.Drain != nil {
		s.Drain()
	}
	if s.DrainDelay > 0 && !s.failed {
		s.Log.Info("draining", "delay", s.DrainDelay.String())
		select {
		case <-time.After(s.DrainDelay):
		case <-s.ctx.Done():
		}
	}
	grace, cancel := context.WithTimeout(ctx, s.ShutdownGrace)
	defer cancel()
	err := s.Server.Shutdown(grace)
	if err == nil {
		return nil
	}
	// The calls still running are told to stop and answer (a client cut
	// off without a reply cannot tell a lost call from a network fault).
	s.Log.Warn("grace period over, interrupting the calls left", "err", err)
	if s.interrupt != nil {
		s.interrupt(httperr.ErrShutdown)
	}
	wait := s.ReplyWait
	if wait <= 0 {
		wait = DefaultReplyWait
	}
	replied, cancelWait := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancelWait()
	if err := s.Server.Shutdown(replied); err != nil {
		s.Log.Warn("interrupted calls did not reply in time, closing connections", "err", err)
		if cerr := s.Server.Close(); cerr != nil {
			return fmt.Errorf("closing connections: %w", cerr)
		}
	}
	return nil
}
