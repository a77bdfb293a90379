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

	"github.com/sandboxapi/sandboxapi/internal/redact"
)

// Config holds the checker's timing. It is data only.
type Config struct {
	// Interval is how often every check runs.
	Interval Duration `yaml:"interval"`
	// Timeout bounds one run of one check.
	Timeout Duration `yaml:"timeout"`
	// StaleAfter is how old a result may be, from the end of its run, before it counts as a failure.
	StaleAfter Duration `yaml:"stale_after"`
	// TopologyInterval is how often the topology canaries run (they start
	// sandboxes, so less often than the other checks).
	TopologyInterval Duration `yaml:"topology_interval"`
	// MinRefresh is the shortest time between two on-demand runs (by
	// /readyz?refresh=1, or by an install while a check fails, which runs
	// the failing checks); requests in between get the last results or
	// wait for a run in progress (so clients cannot spin canary sandboxes).
	MinRefresh Duration `yaml:"min_refresh"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Interval:   Duration(10 * time.Second),
		Timeout:    Duration(20 * time.Second),
		StaleAfter: Duration(45 * time.Second),
		MinRefresh: Duration(time.Second),

		TopologyInterval: Duration(time.Minute),
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
	if c.TopologyInterval < 0 {
		errs = append(errs, errors.New("readiness.topology_interval: must not be negative"))
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
	// StatusWarn passes: something the operator should act on that does
	// not stop the server's work (a runtime past its end of life).
	StatusWarn Status = "warn"
)

// Warning is an error a check returns to pass with a warning (StatusWarn,
// its text the detail) instead of failing.
type Warning struct{ Msg string }

func (w *Warning) Error() string { return w.Msg }

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

// OK reports whether r is a pass (with or without a warning).
func (r Result) OK() bool { return r.Status == StatusPass || r.Status == StatusWarn }

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
	name    string
	fn      Func
	every   time.Duration // 0: every run
	last    Result
	running bool
	done    chan struct{} // closed when the run in progress ends; nil when none runs
}

// Checker runs registered checks. Build it with New, Register checks, then
// Start. Its methods are safe for concurrent use.
type Checker struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	checks  []*check
	lastRun time.Time // start of the last on-demand run (for MinRefresh)

	stop chan struct{}
	wg   sync.WaitGroup
	// fns counts check functions still running, including one whose run
	// already ended on its timeout or a cancelled ctx (runOne does not
	// wait for it), so that Stop can.
	fns sync.WaitGroup
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
func (c *Checker) Register(name string, fn Func) { c.RegisterEvery(name, 0, fn) }

// RegisterEvery adds a check that runs at most once per every (expensive
// measurements such as canary sandboxes); its result may be every older
// than StaleAfter before it counts as stale.
func (c *Checker) RegisterEvery(name string, every time.Duration, fn Func) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.checks {
		if ch.name == name {
			ch.fn, ch.every = fn, every
			return
		}
	}
	c.checks = append(c.checks, &check{name: name, fn: fn, every: every, last: Result{Name: name, Status: StatusPending, Detail: "not run yet"}})
	sort.Slice(c.checks, func(i, j int) bool { return c.checks[i].name < c.checks[j].name })
}

// Start runs every check once, then each on its own schedule (a slow
// check never holds back the others) until Stop or ctx ends.
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
			c.launchDue(ctx)
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

// Stop ends the periodic runs and waits for running checks, and for the
// functions of runs that ended on a cancelled context but are still
// undoing what they made (a canary's sandbox network), for up to one
// check timeout: what a check leaves behind must not outlive the
// services stopped after it.
func (c *Checker) Stop() {
	c.mu.Lock()
	stop := c.stop
	c.stop = nil
	c.mu.Unlock()
	if stop != nil {
		close(stop)
	}
	c.wg.Wait()
	done := make(chan struct{})
	go func() { c.fns.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(c.cfg.Timeout.D()):
		c.log.Warn("readiness checks still running at stop", "waited", c.cfg.Timeout.D().String())
	}
}

// due picks the checks to run now and marks them running. A failed or
// pending check is always due; a passing one waits for its own interval.
// Callers hold c.mu.
func (c *Checker) due(now time.Time) []*check {
	var out []*check
	for _, ch := range c.checks {
		if ch.running {
			continue
		}
		if ch.every > 0 && ch.last.OK() && now.Sub(ch.last.LastRun) < ch.every {
			continue
		}
		ch.begin()
		out = append(out, ch)
	}
	return out
}

// begin marks the check running. Callers hold c.mu.
func (ch *check) begin() {
	ch.running = true
	ch.done = make(chan struct{})
}

// launchDue starts every due check in the background.
func (c *Checker) launchDue(ctx context.Context) {
	c.mu.Lock()
	checks := c.due(c.now())
	c.mu.Unlock()
	for _, ch := range checks {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.finish(ch, c.runOne(ctx, ch.name, ch.fn))
		}()
	}
}

func (c *Checker) finish(ch *check, r Result) {
	c.mu.Lock()
	ch.last, ch.running = r, false
	if ch.done != nil {
		close(ch.done)
		ch.done = nil
	}
	c.mu.Unlock()
}

// RunAll runs every due check now (concurrently, each with its own
// timeout), waits for the runs of checks that were already running rather
// than starting them twice, and returns the report.
func (c *Checker) RunAll(ctx context.Context) Report {
	return c.onDemand(ctx, false, true)
}

// Refresh is RunAll for clients (/readyz?refresh=1): unless an on-demand
// run started less than MinRefresh ago, in which case it only waits for
// the runs still in progress and returns the report.
func (c *Checker) Refresh(ctx context.Context) Report {
	return c.onDemand(ctx, false, false)
}

// onDemand runs the due checks (failingOnly: only those the report shows
// failing, pending or stale) now, joins the runs already in progress and
// waits for them all or for ctx. Unless force, no check is started when
// the last on-demand run began less than MinRefresh ago, so clients cannot
// make the checks (canary sandboxes among them) spin. The runs themselves
// do not end with ctx: a client that hangs up cannot fail a check.
func (c *Checker) onDemand(ctx context.Context, failingOnly, force bool) Report {
	c.mu.Lock()
	now := c.now()
	start := force || c.lastRun.IsZero() || now.Sub(c.lastRun) >= c.cfg.MinRefresh.D()
	var launch []*check
	var wait []chan struct{}
	for _, ch := range c.checks {
		if failingOnly && c.view(ch, now).OK() {
			continue
		}
		switch {
		case ch.running:
			wait = append(wait, ch.done)
		case !start:
		case failingOnly || !ch.last.OK() || ch.every == 0 || now.Sub(ch.last.LastRun) >= ch.every:
			ch.begin()
			launch = append(launch, ch)
			wait = append(wait, ch.done)
		}
	}
	if len(launch) > 0 {
		c.lastRun = now
	}
	c.wg.Add(len(launch))
	c.mu.Unlock()
	detached := context.WithoutCancel(ctx)
	for _, ch := range launch {
		go func() {
			defer c.wg.Done()
			c.finish(ch, c.runOne(detached, ch.name, ch.fn))
		}()
	}
	for _, done := range wait {
		select {
		case <-done:
		case <-ctx.Done():
			return c.Report()
		}
	}
	return c.Report()
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
	c.fns.Add(1)
	go func() {
		defer c.fns.Done()
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
	// Details reach /readyz (no key) and the logs: a URL in them (the
	// mirror's serve_url, a client error naming it) is shown without
	// userinfo or query values.
	res.Detail = redact.Text(o.detail)
	if w := (*Warning)(nil); errors.As(o.err, &w) {
		res.Status, res.Detail = StatusWarn, redact.Text(w.Msg)
		c.log.Warn("readiness check warns", "check", name, "detail", res.Detail)
		return res
	}
	if o.err != nil {
		res.Detail = redact.Text(o.err.Error())
		if o.detail != "" {
			res.Detail = redact.Text(o.detail + ": " + o.err.Error())
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
		r := c.view(ch, now)
		if !r.OK() {
			rep.Ready = false
		}
		rep.Checks = append(rep.Checks, r)
	}
	return rep
}

// view is the check's last result as reported at now: a pass older than
// allowed is stale. Callers hold c.mu.
func (c *Checker) view(ch *check, now time.Time) Result {
	r := ch.last
	// A result is as old as the time since its run ended (a run that took
	// longer than StaleAfter on a loaded machine is not stale the moment
	// it ends). It may be as old as the check's own interval plus
	// StaleAfter, plus the time its next run may take when that run is
	// due later (an interval) or under way now.
	age := now.Sub(r.LastRun.Add(time.Duration(r.DurationMS) * time.Millisecond))
	limit := c.cfg.StaleAfter.D() + ch.every
	if ch.every > 0 || ch.running {
		limit += c.cfg.Timeout.D()
	}
	if r.OK() && age > limit {
		r.Status = StatusStale
		r.Detail = fmt.Sprintf("last result is %s old (limit %s): %s", age.Round(time.Millisecond), limit, r.Detail)
	}
	return r
}

// Ready is the install gate: it reports whether every check passed recently
// and, if not, the failing ones. While any check fails, it runs the
// failing ones again first (at most once per MinRefresh, joining runs in
// progress), so an install right after the operator fixed the cause (an
// OSV import, a mirror add) need not wait for the next interval.
func (c *Checker) Ready(ctx context.Context) (bool, []Result) {
	rep := c.Report()
	if !rep.Ready && len(rep.Checks) > 0 {
		rep = c.onDemand(ctx, true, false)
	}
	return rep.Ready, rep.Failing()
}

// Fail records a failure of the named check now, as if it had just run
// and failed with detail (a component that noticed damage between runs,
// such as firewall rules rebuilt after they were deleted, closes the gate
// at once). The check runs again at the next tick or refresh, since a
// failed check is always due. An unknown name does nothing.
func (c *Checker) Fail(name, detail string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.checks {
		if ch.name == name {
			ch.last = Result{Name: name, Status: StatusFail, Detail: detail, LastRun: c.now()}
			c.log.Warn("readiness check failed", "check", name, "detail", detail)
			return
		}
	}
}
