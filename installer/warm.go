package installer

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"
)

// netSlot is one installer network: its id and endpoint. held: handed
// out while started, so Stop waits for its release.
type netSlot struct {
	id   string
	ep   Endpoint
	held bool
}

// warm keeps one installer network made ahead of the next install and
// tears used ones down after the reply, so neither sits on an install's
// path. Each network still serves exactly one job: a runsc sandbox takes
// its namespace's interface over, and nothing is shared between jobs.
// The zero value is stopped: every network is made and removed in line.
type warm struct {
	mu      sync.Mutex
	ctx     context.Context // set by Start; nil when stopped
	cancel  context.CancelFunc
	spare   *netSlot
	filling bool
	wg      sync.WaitGroup
}

// Start makes a spare installer network now and after each install takes
// one, and moves teardowns off the install's path, until Stop. Without
// Start every install sets up and tears down its network in line.
func (i *Installer) Start(ctx context.Context) {
	w := &i.warm
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx != nil {
		return
	}
	w.ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	i.refillLocked()
}

// Stop removes the spare network and waits, until ctx ends, for the
// networks handed out before it (a job, a readiness canary) to be
// released and for pending teardowns: a network still in use when the
// process exits would be left on the host.
func (i *Installer) Stop(ctx context.Context) error {
	w := &i.warm
	w.mu.Lock()
	if w.ctx == nil {
		w.mu.Unlock()
		return nil
	}
	w.cancel()
	w.ctx = nil
	spare := w.spare
	w.spare = nil
	w.mu.Unlock()
	if spare != nil {
		i.teardown(ctx, spare.id)
	}
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping installer: %w", ctx.Err())
	}
}

// refillLocked starts making a spare network unless one exists or is on
// its way. Callers hold w.mu.
func (i *Installer) refillLocked() {
	w := &i.warm
	if w.ctx == nil || w.spare != nil || w.filling {
		return
	}
	w.filling = true
	w.wg.Add(1)
	ctx := w.ctx
	go func() {
		defer w.wg.Done()
		id := "inst-" + randomID()
		ep, err := i.net.Setup(ctx, id)
		w.mu.Lock()
		w.filling = false
		switch {
		case err != nil:
			w.mu.Unlock()
			if ctx.Err() == nil {
				i.log.Warn("making a spare installer network", "err", err)
			}
			return
		case w.ctx != ctx: // stopped meanwhile
			w.mu.Unlock()
			i.teardown(ctx, id)
			return
		}
		w.spare = &netSlot{id: id, ep: ep}
		w.mu.Unlock()
	}()
}

// network returns a fresh installer network for one job: the spare if
// there is one (its namespace still there), else one made now.
func (i *Installer) network(ctx context.Context) (netSlot, error) {
	w := &i.warm
	w.mu.Lock()
	spare := w.spare
	w.spare = nil
	i.refillLocked()
	held := w.ctx != nil
	if held {
		w.wg.Add(1) // until release
	}
	w.mu.Unlock()
	if spare != nil {
		if _, err := os.Stat(spare.ep.NetnsPath); err == nil {
			return netSlot{id: spare.id, ep: spare.ep, held: held}, nil
		}
		i.teardown(ctx, spare.id)
	}
	id := "inst-" + randomID()
	ep, err := i.net.Setup(ctx, id)
	if err != nil {
		if held {
			w.wg.Done()
		}
		return netSlot{}, err
	}
	return netSlot{id: id, ep: ep, held: held}, nil
}

// release tears a used network down: after the reply when started, else
// now.
func (i *Installer) release(ctx context.Context, slot netSlot) {
	w := &i.warm
	w.mu.Lock()
	if w.ctx == nil {
		w.mu.Unlock()
		i.teardown(ctx, slot.id)
		if slot.held {
			w.wg.Done()
		}
		return
	}
	if !slot.held {
		w.wg.Add(1)
	}
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		i.teardown(ctx, slot.id)
	}()
}

func (i *Installer) teardown(ctx context.Context, id string) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := i.net.Teardown(tctx, id); err != nil {
		i.log.Error("tearing down installer network", "id", id, "err", err)
	}
}
