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
	// listener closes; then connections are closed.
	ShutdownGrace time.Duration
	Log           *slog.Logger

	ctx    context.Context // Start's: when it ends, the drain delay is cut short
	addr   net.Addr
	errc   chan error
	failed bool
}

// Start opens the listener and serves in the background.
func (s *Service) Start(ctx context.Context) error {
	ln, err := s.Listen(ctx)
	if err != nil {
		return err
	}
	s.ctx, s.addr = ctx, ln.Addr()
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
	if err := s.Server.Shutdown(grace); err != nil {
		s.Log.Warn("grace period over, closing connections", "err", err)
		if cerr := s.Server.Close(); cerr != nil {
			return fmt.Errorf("closing connections: %w", cerr)
		}
	}
	return nil
}
