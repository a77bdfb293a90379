// Package lifecycle runs the long-lived parts of a process in one group:
// started in the order they were added, stopped in reverse, a failed start
// unwinding what had started (Caddy's app lifecycle with gVisor's cleanup
// stack). It does no I/O of its own.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// Component is a long-lived part of the process. Start returns once the
// component is running (it keeps no goroutine of the caller's); Stop
// releases what Start took and waits for the component's goroutines. Stop
// is called at most once, and only after a Start that returned nil.
type Component interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Funcs adapts a pair of functions to Component; a nil func does nothing.
type Funcs struct {
	StartFunc func(ctx context.Context) error
	StopFunc  func(ctx context.Context) error
}

func (f Funcs) Start(ctx context.Context) error {
	if f.StartFunc == nil {
		return nil
	}
	return f.StartFunc(ctx)
}

func (f Funcs) Stop(ctx context.Context) error {
	if f.StopFunc == nil {
		return nil
	}
	return f.StopFunc(ctx)
}

// Group starts and stops components. The zero value is an empty group
// that logs nothing; it is safe for concurrent use.
type Group struct {
	// Log, when set, gets one line per start and stop.
	Log *slog.Logger

	mu      sync.Mutex
	pending []entry // added, not started yet, in order
	started []entry // the cleanup stack: what runs, in the order it began
}

type entry struct {
	name string
	c    Component
}

// Cleanup pushes the undo of something already done (a store opened, a
// writer started while wiring) onto the stack: Stop calls it, after
// stopping whatever was started later and before whatever began earlier.
// A failed Start leaves it for Stop.
func (g *Group) Cleanup(name string, stop func(ctx context.Context) error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.started = append(g.started, entry{name, Funcs{StopFunc: stop}})
}

// Add appends c to the components the next Start starts.
func (g *Group) Add(name string, c Component) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending = append(g.pending, entry{name, c})
}

// Start starts the components added since the last Start, in order. When
// one fails, those this call started are stopped in reverse and the error
// names the component; those of earlier calls stay running until Stop.
// Components not reached are dropped.
func (g *Group) Start(ctx context.Context) error {
	g.mu.Lock()
	todo := g.pending
	g.pending = nil
	base := len(g.started)
	g.mu.Unlock()
	for _, e := range todo {
		if err := e.c.Start(ctx); err != nil {
			serr := fmt.Errorf("starting %s: %w", e.name, err)
			g.mu.Lock()
			unwind := g.started[base:]
			g.started = g.started[:base]
			g.mu.Unlock()
			return errors.Join(serr, g.stopAll(context.WithoutCancel(ctx), unwind))
		}
		g.log("started", e.name)
		g.mu.Lock()
		g.started = append(g.started, e)
		g.mu.Unlock()
	}
	return nil
}

// Stop stops every running component in reverse start order, each once,
// and returns their errors joined. Components added but never started are
// dropped. Stop may be called after a failed Start and more than once.
func (g *Group) Stop(ctx context.Context) error {
	g.mu.Lock()
	all := g.started
	g.started, g.pending = nil, nil
	g.mu.Unlock()
	return g.stopAll(ctx, all)
}

func (g *Group) stopAll(ctx context.Context, es []entry) error {
	var errs []error
	for i := len(es) - 1; i >= 0; i-- {
		if err := es[i].c.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", es[i].name, err))
			if g.Log != nil {
				g.Log.Error("stopping", "component", es[i].name, "err", err)
			}
			continue
		}
		g.log("stopped", es[i].name)
	}
	return errors.Join(errs...)
}

func (g *Group) log(msg, name string) {
	if g.Log != nil {
		g.Log.Debug(msg, "component", name)
	}
}
