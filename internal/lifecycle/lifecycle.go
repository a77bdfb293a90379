// Package lifecycle runs the long-lived parts of a process as one System
// of units: each unit is named, declares the units it needs, and goes
// through provision, validate, start and stop in the order of those
// needs (Caddy's module lifecycle, with gVisor's cleanup stack for the
// unwinding). It does no I/O of its own.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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

// Unit is one part of a System. Every func is optional (nil does
// nothing). The System calls them in this order, each unit after every
// unit it Needs:
//
//   - Provision builds the unit from the config and from what the units
//     it needs have built (they are provisioned already). It may open
//     things (a store, a file); Cleanup releases them.
//   - Validate checks what Provision built, before anything starts.
//   - Start starts the unit's work (goroutines, listeners) and returns.
//   - Stop ends what Start began; it runs only after a Start that
//     returned nil.
//   - Cleanup releases what Provision took; it runs for every unit whose
//     Provision returned nil, after its Stop, whether or not it started
//     (Caddy's "cleanup works even after a failed provision" is the
//     unit's own job: a Provision that fails undoes its half-done work).
type Unit struct {
	Name      string
	Needs     []string
	Provision func(ctx context.Context) error
	Validate  func() error
	Start     func(ctx context.Context) error
	Stop      func(ctx context.Context) error
	Cleanup   func(ctx context.Context) error
}

// System provisions, validates, starts and stops units in the order of
// their needs. The zero value is an empty system that logs nothing; it is
// safe for concurrent use.
type System struct {
	// Log, when set, gets one Debug line per unit started ("started"),
	// stopped ("stopped") and, never started, cleaned up ("cleaned up"),
	// with the unit's name as "component"; a failure to stop is an Error.
	Log *slog.Logger

	run   sync.Mutex // held by Start and Stop: one runs at a time
	mu    sync.Mutex
	units []Unit
	// live is the cleanup stack: the units provisioned, in order, each
	// marked when it started.
	live []liveUnit
}

type liveUnit struct {
	u       Unit
	started bool
}

// Add adds units to the system; the next Start runs them. A unit's needs
// may be added later (Order is taken at Start).
func (s *System) Add(units ...Unit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.units = append(s.units, units...)
}

// Order returns the units' names in the order Start takes them: every
// unit after the units it needs and, among units free to go, in the
// order they were added. A unit that needs one not in the system, two
// units of one name or a cycle of needs is an error naming them.
func (s *System) Order() ([]string, error) {
	s.mu.Lock()
	units := slices.Clone(s.units)
	s.mu.Unlock()
	ordered, err := order(units)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ordered))
	for i, u := range ordered {
		names[i] = u.Name
	}
	return names, nil
}

// Graph returns each unit's needs by name (for documentation and
// diagnostics).
func (s *System) Graph() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := make(map[string][]string, len(s.units))
	for _, u := range s.units {
		g[u.Name] = slices.Clone(u.Needs)
	}
	return g
}

// ErrOrder is the class of the errors Order and Start return for units
// that cannot be ordered (a missing need, a duplicate name, a cycle).
var ErrOrder = errors.New("units cannot be ordered")

// order sorts units topologically (Kahn's algorithm, ties in the order
// added).
func order(units []Unit) ([]Unit, error) {
	byName := make(map[string]int, len(units))
	var errs []error
	for i, u := range units {
		if _, dup := byName[u.Name]; dup {
			errs = append(errs, fmt.Errorf("%w: two units named %q", ErrOrder, u.Name))
			continue
		}
		byName[u.Name] = i
	}
	for _, u := range units {
		for _, n := range u.Needs {
			if _, ok := byName[n]; !ok {
				errs = append(errs, fmt.Errorf("%w: %s needs %s, which is not in the system", ErrOrder, u.Name, n))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	placed := make([]bool, len(units))
	out := make([]Unit, 0, len(units))
	for len(out) < len(units) {
		next := -1
		for i, u := range units {
			if !placed[i] && !slices.ContainsFunc(u.Needs, func(n string) bool { return !placed[byName[n]] }) {
				next = i
				break
			}
		}
		if next < 0 {
			return nil, fmt.Errorf("%w: a cycle of needs: %s", ErrOrder, strings.Join(cycle(units, byName, placed), " -> "))
		}
		placed[next] = true
		out = append(out, units[next])
	}
	return out, nil
}

// cycle returns one cycle among the units not placed (every one of them
// needs another unplaced unit), as names with the first repeated last.
func cycle(units []Unit, byName map[string]int, placed []bool) []string {
	start := slices.Index(placed, false)
	seen := map[int]int{} // unit -> its position in path
	var path []int
	for i := start; ; {
		if at, ok := seen[i]; ok {
			names := make([]string, 0, len(path)-at+1)
			for _, j := range path[at:] {
				names = append(names, units[j].Name)
			}
			return append(names, units[i].Name)
		}
		seen[i] = len(path)
		path = append(path, i)
		for _, n := range units[i].Needs {
			if j := byName[n]; !placed[j] {
				i = j
				break
			}
		}
	}
}

// Start orders the units (see Order), provisions every one, validates
// every one (all their errors joined) and then starts them in order. It
// starts nothing unless every unit provisioned and validated. When any
// step fails, the system is taken down as Stop does (Stop for the units
// that started, Cleanup for those provisioned, in reverse) and the error
// names the unit. Start takes the units added so far: units added later
// run at the next Start and cannot need those of an earlier one.
func (s *System) Start(ctx context.Context) error {
	s.run.Lock()
	defer s.run.Unlock()
	s.mu.Lock()
	units := s.units
	s.units = nil
	s.mu.Unlock()
	ordered, err := order(units)
	if err != nil {
		return err
	}
	s.mu.Lock()
	base := len(s.live)
	s.mu.Unlock()
	for _, u := range ordered {
		if u.Provision != nil {
			if err := u.Provision(ctx); err != nil {
				return errors.Join(fmt.Errorf("provisioning %s: %w", u.Name, err), s.stop(context.WithoutCancel(ctx)))
			}
		}
		s.mu.Lock()
		s.live = append(s.live, liveUnit{u: u})
		s.mu.Unlock()
	}
	var verrs []error
	for _, u := range ordered {
		if u.Validate != nil {
			if err := u.Validate(); err != nil {
				verrs = append(verrs, fmt.Errorf("validating %s: %w", u.Name, err))
			}
		}
	}
	if len(verrs) > 0 {
		return errors.Join(errors.Join(verrs...), s.stop(context.WithoutCancel(ctx)))
	}
	for i, u := range ordered {
		if u.Start != nil {
			if err := u.Start(ctx); err != nil {
				return errors.Join(fmt.Errorf("starting %s: %w", u.Name, err), s.stop(context.WithoutCancel(ctx)))
			}
		}
		s.mu.Lock()
		s.live[base+i].started = true
		s.mu.Unlock()
		s.log("started", u.Name)
	}
	return nil
}

// Stop takes every provisioned unit down in reverse order: its Stop when
// it started, then its Cleanup. A unit that fails to stop does not keep
// the others up; the errors are joined, each naming its unit. Stop may be
// called after a failed Start and more than once (a second call finds
// nothing to do). A Stop called while Start runs waits for it.
func (s *System) Stop(ctx context.Context) error {
	s.run.Lock()
	defer s.run.Unlock()
	return s.stop(ctx)
}

func (s *System) stop(ctx context.Context) error {
	s.mu.Lock()
	live := s.live
	s.live = nil
	s.mu.Unlock()
	var errs []error
	for i := len(live) - 1; i >= 0; i-- {
		u := live[i].u
		failed := false
		if live[i].started && u.Stop != nil {
			if err := u.Stop(ctx); err != nil {
				errs = append(errs, fmt.Errorf("stopping %s: %w", u.Name, err))
				failed = true
			}
		}
		if u.Cleanup != nil {
			if err := u.Cleanup(ctx); err != nil {
				errs = append(errs, fmt.Errorf("cleaning up %s: %w", u.Name, err))
				failed = true
			}
		}
		switch {
		case failed:
			if s.Log != nil {
				s.Log.Error("stopping", "component", u.Name, "err", errs[len(errs)-1])
			}
		case live[i].started:
			s.log("stopped", u.Name)
		case u.Cleanup != nil:
			s.log("cleaned up", u.Name)
		}
	}
	return errors.Join(errs...)
}

func (s *System) log(msg, name string) {
	if s.Log != nil {
		s.Log.Debug(msg, "component", name)
	}
}
