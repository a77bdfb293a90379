// Package readiness runs named health checks (firewall/topology, mirror,
// OSV freshness) at start, periodically and on demand, and answers the
// install gate. It fails closed: a check that errors, panics, has not run
// yet or whose last result is older than Config.StaleAfter is a failure.
package readiness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"time"
)

// Config holds the checker's timing. It is data only.
type Config struct {
	// Interval is how often every check runs.
	Interval Duration `yaml:"interval"`
	// Timeout bounds one run of one check.
	Timeout Duration `yaml:"timeout"`
	// StaleAfter is how old a result may be before it counts as a failure.
	StaleAfter Duration `yaml:"stale_after"`
	// MinRefresh is the shortest time between two on-demand runs; requests
	// in between get the last results (so /readyz cannot be used to spin
	// canary sandboxes).
	MinRefresh Duration `yaml:"min_refresh"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Interval:   Duration(10 * time.Second),
		Timeout:    Duration(20 * time.Second),
		StaleAfter: Duration(45 * time.Second),
		MinRefresh: Duration(time.Second),
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, errors.New("readiness.interval: must be positive"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("readiness.timeout: must be positive"))
	}
	if c.StaleAfter < c.Interval {
		errs = append(errs, errors.New("readiness.stale_after: must be at least interval"))
	}
	if c.MinRefresh < 0 {
		errs = append(errs, errors.New("readiness.min_refresh: must not be negative"))
	}
	return errors.Join(errs...)
}

// Status of one check.
type Status string

const (
	StatusPass    Status = "pass"
	StatusFail    Status = "fail"
	StatusPending Status = "pending" // never ran: counts as failure
	StatusStale   Status = "stale"   // last result too old: counts as failure
)

// Func is one check: nil error means pass; detail describes what was seen
// either way.
type Func func(ctx context.Context) (detail string, err error)

// Result is the last outcome of one check.
type Result struct {
	Name       string    `json:"name"`
	Status     Status    `json:"status"`
	Detail     string    `json:"detail"`
	LastRun    time.Time `json:"last_run"`
	DurationMS int64     `json:"duration_ms"`
}

// OK reports whether r is a pass.
func (r Result) OK() bool { return r.Status == StatusPass }

// Report is every check's last result.
type Report struct {
	Ready  bool     `json:"ready"`
	Checks []Result `json:"checks"`
}

// Failing returns the results that are not a pass.
func (r Report) Failing() []Result {
	var out []Result
	for _, c := range r.Checks {
		if !c.OK() {
			out = append(out, c)
		}
	}
	return out
}

type check struct {
	name string
	fn   Func
	last Result
}

// Checker runs registered checks. Build it with New, Register checks, then
// Start. Its methods are safe for concurrent use.
type Checker struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	checks  []*check
	lastRun time.Time // last full run (for MinRefresh)

	runMu sync.Mutex // one full run at a time
	stop  chan struct{}
	wg    sync.WaitGroup
}

// New returns a Checker with no checks.
func New(cfg Config, log *slog.Logger) *Checker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Checker{cfg: cfg, log: log, now: time.Now}
}

// Register adds a named check; it is pending until it first runs. A name
// registered twice replaces the earlier check.
func (c *Checker) Register(name string, fn Func) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.checks {
		if ch.name == name {
			ch.fn = fn
			return
		}
	}
	c.checks = append(c.checks, &check{name: name, fn: fn, last: Result{Name: name, Status: StatusPending, Detail: "not run yet"}})
	sort.Slice(c.checks, func(i, j int) bool { return c.checks[i].name < c.checks[j].name })
}

// Start runs every check once, then periodically until Stop or ctx ends.
func (c *Checker) Start(ctx context.Context) {
	c.mu.Lock()
	if c.stop != nil {
		c.mu.Unlock()
		return
	}
	c.stop = make(chan struct{})
	stop := c.stop
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(c.cfg.Interval.D())
		defer t.Stop()
		for {
			c.RunAll(ctx)
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the periodic runs and waits for a running one.
func (c *Checker) Stop() {
	c.mu.Lock()
	stop := c.stop
	c.stop = nil
	c.mu.Unlock()
	if stop != nil {
		close(stop)
	}
	c.wg.Wait()
}

// RunAll runs every check now (concurrently, each with its own timeout)
// and returns the report.
func (c *Checker) RunAll(ctx context.Context) Report {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	c.mu.Lock()
	checks := append([]*check(nil), c.checks...)
	c.mu.Unlock()
	results := make([]Result, len(checks))
	var wg sync.WaitGroup
	for i, ch := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.runOne(ctx, ch.name, ch.fn)
		}()
	}
	wg.Wait()
	c.mu.Lock()
	for i, ch := range checks {
		ch.last = results[i]
	}
	c.lastRun = c.now()
	c.mu.Unlock()
	return c.Report()
}

// Refresh runs every check unless a run finished less than MinRefresh ago,
// then returns the report.
func (c *Checker) Refresh(ctx context.Context) Report {
	c.mu.Lock()
	recent := !c.lastRun.IsZero() && c.now().Sub(c.lastRun) < c.cfg.MinRefresh.D()
	c.mu.Unlock()
	if recent {
		return c.Report()
	}
	return c.RunAll(ctx)
}

// runOne runs fn with a timeout; an error, a panic or a timeout is a failure.
func (c *Checker) runOne(ctx context.Context, name string, fn Func) (res Result) {
	start := c.now()
	res = Result{Name: name, LastRun: start, Status: StatusFail}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout.D())
	defer cancel()
	type out struct {
		detail string
		err    error
	}
	ch := make(chan out, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				c.log.Error("readiness check panicked", "check", name, "panic", v, "stack", string(debug.Stack()))
				ch <- out{err: fmt.Errorf("check panicked: %v", v)}
			}
		}()
		d, err := fn(ctx)
		ch <- out{d, err}
	}()
	var o out
	select {
	case o = <-ch:
	case <-ctx.Done():
		o = out{err: fmt.Errorf("check did not finish: %w", ctx.Err())}
	}
	res.DurationMS = c.now().Sub(start).Milliseconds()
	res.Detail = o.detail
	if o.err != nil {
		res.Detail = o.err.Error()
		if o.detail != "" {
			res.Detail = o.detail + ": " + o.err.Error()
		}
		c.log.Warn("readiness check failed", "check", name, "detail", res.Detail)
		return res
	}
	res.Status = StatusPass
	return res
}

// Report returns the last results; a result older than StaleAfter is
// reported stale. With no checks registered the report is not ready.
func (c *Checker) Report() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	rep := Report{Ready: len(c.checks) > 0, Checks: make([]Result, 0, len(c.checks))}
	for _, ch := range c.checks {
		r := ch.last
		if r.Status == StatusPass && now.Sub(r.LastRun) > c.cfg.StaleAfter.D() {
			r.Status = StatusStale
			r.Detail = fmt.Sprintf("last result is %s old (limit %s): %s", now.Sub(r.LastRun).Round(time.Millisecond), c.cfg.StaleAfter.D(), r.Detail)
		}
		if !r.OK() {
			rep.Ready = false
		}
		rep.Checks = append(rep.Checks, r)
	}
	return rep
}

// Ready is the install gate: it reports whether every check passed recently
// and, if not, the failing ones.
func (c *Checker) Ready(ctx context.Context) (bool, []Result) {
	rep := c.Report()
	return rep.Ready, rep.Failing()
}
