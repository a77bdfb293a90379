package readiness

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// switchable is a check that fails until fixed, counting its runs.
type switchable struct {
	fixed atomic.Bool
	runs  atomic.Int32
	delay time.Duration
}

func (s *switchable) check(ctx context.Context) (string, error) {
	s.runs.Add(1)
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if !s.fixed.Load() {
		return "", errors.New("none imported")
	}
	return "imported", nil
}

// startedChecker returns a checker whose periodic runs are an hour apart,
// after its first run.
func startedChecker(t *testing.T, minRefresh time.Duration, checks map[string]Func) *Checker {
	t.Helper()
	cfg := Config{Interval: Duration(time.Hour), Timeout: Duration(5 * time.Second), StaleAfter: Duration(2 * time.Hour), MinRefresh: Duration(minRefresh)}
	c := New(cfg, nil)
	for name, fn := range checks {
		c.Register(name, fn)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); c.Stop() })
	c.Start(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for {
		pending := false
		for _, r := range c.Report().Checks {
			pending = pending || r.Status == StatusPending
		}
		if !pending {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatal("first run never finished")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGateRerunsFailingChecks: once the cause of a failure is fixed, the
// install gate passes at once (not after the interval, an hour here),
// running only the checks that failed.
func TestGateRerunsFailingChecks(t *testing.T) {
	t.Parallel()
	osv := &switchable{}
	var others atomic.Int32
	c := startedChecker(t, 0, map[string]Func{
		"osv":    osv.check,
		"mirror": func(context.Context) (string, error) { others.Add(1); return "serving", nil },
	})
	if ok, failing := c.Ready(context.Background()); ok || len(failing) != 1 || failing[0].Name != "osv" || failing[0].Detail != "none imported" {
		t.Fatalf("before the fix: %v %+v", ok, failing)
	}
	osv.fixed.Store(true) // the operator imports the OSV database
	if ok, failing := c.Ready(context.Background()); !ok {
		t.Fatalf("gate still closed after the fix: %+v", failing)
	}
	if n := others.Load(); n != 1 {
		t.Errorf("the passing check ran %d times, want only its scheduled first run", n)
	}
	runs := osv.runs.Load()
	for range 5 {
		if ok, _ := c.Ready(context.Background()); !ok {
			t.Fatal("gate closed again")
		}
	}
	if osv.runs.Load() != runs {
		t.Errorf("a passing gate ran checks: %d runs, then %d", runs, osv.runs.Load())
	}
	if rep := c.Report(); !rep.Ready {
		t.Errorf("report after the on-demand run: %+v", rep)
	}
}

// TestOnDemandRunsBounded: requests cannot make a failing check spin:
// within min_refresh they get the last result, whatever their number.
func TestOnDemandRunsBounded(t *testing.T) {
	t.Parallel()
	osv := &switchable{}
	c := startedChecker(t, time.Hour, map[string]Func{"osv": osv.check})
	now := time.Now()
	var mu sync.Mutex
	c.mu.Lock()
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c.mu.Unlock()
	for range 50 {
		if ok, _ := c.Ready(context.Background()); ok {
			t.Fatal("a failing check passed")
		}
		c.Refresh(context.Background())
	}
	if n := osv.runs.Load(); n != 2 {
		t.Fatalf("100 requests ran the failing check %d times, want 2 (the first run and one on demand)", n)
	}
	osv.fixed.Store(true)
	if ok, _ := c.Ready(context.Background()); ok {
		t.Fatal("ran again within min_refresh")
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	if ok, failing := c.Ready(context.Background()); !ok {
		t.Fatalf("not run again after min_refresh: %+v", failing)
	}
	if n := osv.runs.Load(); n != 3 {
		t.Fatalf("runs = %d, want 3", n)
	}
}

// TestOnDemandJoinsRunInProgress: concurrent requests share one run of a
// slow failing check, each gets its outcome, and a client that hangs up
// neither waits for it nor fails it.
func TestOnDemandJoinsRunInProgress(t *testing.T) {
	t.Parallel()
	osv := &switchable{}
	c := startedChecker(t, 0, map[string]Func{"osv": osv.check})
	osv.delay = 300 * time.Millisecond
	osv.fixed.Store(true)
	runs := osv.runs.Load()

	gone, hangUp := context.WithCancel(context.Background())
	hungUp := make(chan bool, 1)
	go func() {
		ok, _ := c.Ready(gone)
		hungUp <- ok
	}()
	time.Sleep(50 * time.Millisecond)
	hangUp()
	select {
	case ok := <-hungUp:
		if ok {
			t.Error("a caller that hung up got a pass before the run ended")
		}
	case <-time.After(200 * time.Millisecond):
		t.Error("a caller that hung up still waits")
	}

	var wg sync.WaitGroup
	var passed atomic.Int32
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, _ := c.Ready(context.Background()); ok {
				passed.Add(1)
			}
		}()
	}
	wg.Wait()
	if passed.Load() != 20 {
		t.Errorf("%d of 20 concurrent requests passed", passed.Load())
	}
	if n := osv.runs.Load() - runs; n != 1 {
		t.Errorf("21 requests made %d runs, want 1 shared run", n)
	}
	if rep := c.Refresh(context.Background()); !rep.Ready || rep.Checks[0].Detail != "imported" {
		t.Errorf("refresh: %+v", rep)
	}
}

// TestRefreshWaitsForScheduledRun: /readyz?refresh=1 during a scheduled
// run of a failing check returns that run's outcome, not the old failure.
func TestRefreshWaitsForScheduledRun(t *testing.T) {
	t.Parallel()
	osv := &switchable{}
	c := startedChecker(t, 0, map[string]Func{"osv": osv.check})
	osv.delay = 200 * time.Millisecond
	osv.fixed.Store(true)
	c.launchDue(context.Background()) // the interval's tick
	if rep := c.Refresh(context.Background()); !rep.Ready {
		t.Fatalf("refresh during the scheduled run: %+v", rep)
	}
	if n := osv.runs.Load(); n != 2 {
		t.Errorf("runs = %d, want 2 (the first and the scheduled one, which the refresh joined)", n)
	}
}
