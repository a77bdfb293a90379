package readiness

import (
	"context"

	"github.com/sandboxapi/sandboxapi/internal/lifecycle"
)

// Service runs c as a lifecycle component. Start returns at once; in the
// background it waits for wait (when set: until the server the checks
// probe listens, or ctx ends), then starts the checks. Stop ends them and
// waits for checks under way.
func (c *Checker) Service(wait func(ctx context.Context)) lifecycle.Component {
	return &service{c: c, wait: wait}
}

type service struct {
	c       *Checker
	wait    func(ctx context.Context)
	cancel  context.CancelFunc
	started chan struct{} // closed once the checks run, or never will
}

func (s *service) Start(ctx context.Context) error {
	ctx, s.cancel = context.WithCancel(ctx)
	s.started = make(chan struct{})
	go func() {
		defer close(s.started)
		if s.wait != nil {
			s.wait(ctx)
		}
		if ctx.Err() == nil {
			s.c.Start(ctx)
		}
	}()
	return nil
}

func (s *service) Stop(context.Context) error {
	s.cancel()
	<-s.started
	s.c.Stop()
	return nil
}
