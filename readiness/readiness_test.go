package readiness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func testConfig() Config {
	return Config{Interval: Duration(20 * time.Millisecond), Timeout: Duration(200 * time.Millisecond),
		StaleAfter: Duration(time.Second), MinRefresh: 0}
}

func TestFailClosed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		fn     Func
		status Status
		detail string
	}{
		{"pass", func(context.Context) (string, error) { return "fine", nil }, StatusPass, "fine"},
		{"error", func(context.Context) (string, error) { return "saw x", errors.New("boom") }, StatusFail, "saw x: boom"},
		{"panic", func(context.Context) (string, error) { panic("oops") }, StatusFail, "check panicked: oops"},
		{"timeout", func(ctx context.Context) (string, error) { time.Sleep(time.Second); return "late", nil }, StatusFail, "did not finish"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := New(testConfig(), nil)
			c.Register("x", tc.fn)
			rep := c.RunAll(context.Background())
			r := rep.Checks[0]
			if r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) || r.LastRun.IsZero() {
				t.Fatalf("got %+v", r)
			}
			if rep.Ready != (tc.status == StatusPass) {
				t.Fatalf("ready = %v", rep.Ready)
			}
			ok, failing := c.Ready(context.Background())
			if ok != rep.Ready || (len(failing) == 0) != ok {
				t.Fatalf("gate %v %v", ok, failing)
			}
		})
	}
}

func TestPendingAndEmptyAreNotReady(t *testing.T) {
	t.Parallel()
	c := New(testConfig(), nil)
	if ok, _ := c.Ready(context.Background()); ok {
		t.Fatal("no checks is ready")
	}
	c.Register("x", func(context.Context) (string, error) { return "", nil })
	if rep := c.Report(); rep.Ready || rep.Checks[0].Status != StatusPending {
		t.Fatalf("pending: %+v", rep)
	}
	// The gate runs a pending check on demand rather than refusing.
	if ok, failing := c.Ready(context.Background()); !ok {
		t.Fatalf("gate after an on-demand run: %v", failing)
	}
}

func TestStaleResultFails(t *testing.T) {
	t.Parallel()
	c := New(testConfig(), nil)
	now := time.Now()
	c.now = func() time.Time { return now }
	c.Register("x", func(context.Context) (string, error) { return "", nil })
	if !c.RunAll(context.Background()).Ready {
		t.Fatal("not ready after a pass")
	}
	now = now.Add(2 * time.Second)
	rep := c.Report()
	if rep.Ready || rep.Checks[0].Status != StatusStale {
		t.Fatalf("stale result still passes: %+v", rep)
	}
}

func TestPeriodicRunsFlipBothWays(t *testing.T) {
	t.Parallel()
	var bad atomic.Bool
	c := New(testConfig(), nil)
	c.Register("x", func(context.Context) (string, error) {
		if bad.Load() {
			return "", errors.New("down")
		}
		return "up", nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.Start(ctx)
	defer c.Stop()
	wait := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if ok, _ := c.Ready(ctx); ok == want {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("ready never became %v", want)
	}
	wait(true)
	bad.Store(true)
	wait(false)
	bad.Store(false)
	wait(true)
}

func TestSlowCheckDoesNotHoldOthers(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Timeout = Duration(2 * time.Second)
	c := New(cfg, nil)
	var fast atomic.Int32
	c.Register("fast", func(context.Context) (string, error) { fast.Add(1); return "", nil })
	c.RegisterEvery("slow", time.Hour, func(ctx context.Context) (string, error) { time.Sleep(500 * time.Millisecond); return "", nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.Start(ctx)
	time.Sleep(300 * time.Millisecond)
	if n := fast.Load(); n < 5 {
		t.Fatalf("fast check ran %d times while the slow one ran", n)
	}
	c.Stop()
}

type fakeIndex []MirrorFile

func (f fakeIndex) Admitted(context.Context) ([]MirrorFile, error) { return f, nil }

// fakeMirror serves a root index, project pages, packuments and files
// for index, counting file downloads.
type fakeMirror struct {
	mu      sync.Mutex
	down    bool
	files   map[string]string // url path -> body
	pages   map[string]string // url path -> body
	fetched map[string]int
}

func (f *fakeMirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		http.Error(w, "down", 503)
		return
	}
	if b, ok := f.pages[r.URL.EscapedPath()]; ok {
		w.Write([]byte(b))
		return
	}
	if b, ok := f.files[r.URL.Path]; ok {
		f.fetched[r.URL.Path]++
		w.Write([]byte(b))
		return
	}
	http.NotFound(w, r)
}

func TestMirrorCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type fixture struct {
		idx fakeIndex
		fm  *fakeMirror
		srv *httptest.Server
	}
	// Two pip projects (one with two files) and two npm packages (one scoped).
	build := func(t *testing.T) fixture {
		fm := &fakeMirror{files: map[string]string{}, fetched: map[string]int{}}
		var idx fakeIndex
		add := func(mgr, name, version, fn, path string) {
			body := "bytes of " + fn
			fm.files[path] = body
			idx = append(idx, MirrorFile{Manager: mgr, Name: name, Version: version, Filename: fn, SHA256: sha256hex(body), URLPath: path})
		}
		add("pip", "Alpha_Pkg", "1.0", "alpha_pkg-1.0-py3-none-any.whl", "/mirror/pypi/files/a/alpha_pkg-1.0-py3-none-any.whl")
		add("pip", "Alpha_Pkg", "1.2", "alpha_pkg-1.2-py3-none-any.whl", "/mirror/pypi/files/b/alpha_pkg-1.2-py3-none-any.whl")
		add("pip", "beta", "0.1", "beta-0.1-py3-none-any.whl", "/mirror/pypi/files/c/beta-0.1-py3-none-any.whl")
		add("npm", "left-pad", "1.3.0", "left-pad-1.3.0.tgz", "/mirror/npm/left-pad/-/left-pad-1.3.0.tgz")
		add("npm", "@s/p", "2.0.0", "p-2.0.0.tgz", "/mirror/npm/@s/p/-/p-2.0.0.tgz")
		page := func(fs ...MirrorFile) string {
			var parts []string
			for _, f := range fs {
				parts = append(parts, `{"filename":"`+f.Filename+`","hashes":{"sha256":"`+f.SHA256+`"}}`)
			}
			return `{"files":[` + strings.Join(parts, ",") + `]}`
		}
		fm.pages = map[string]string{
			"/mirror/pypi/simple/":           `{"projects":[{"name":"Alpha_Pkg"},{"name":"beta"}]}`,
			"/mirror/pypi/simple/alpha-pkg/": page(idx[0], idx[1]),
			"/mirror/pypi/simple/beta/":      page(idx[2]),
			"/mirror/npm/left-pad":           `{"versions":{"1.3.0":{}}}`,
			"/mirror/npm/@s%2Fp":             `{"versions":{"2.0.0":{},"1.0.0":{}}}`,
		}
		srv := httptest.NewServer(fm)
		t.Cleanup(srv.Close)
		return fixture{idx, fm, srv}
	}

	t.Run("healthy", func(t *testing.T) {
		f := build(t)
		if d, err := Mirror(f.idx, f.srv.URL, 3)(ctx); err != nil {
			t.Fatalf("healthy mirror: %v", err)
		} else if !strings.Contains(d, "4 of 4 project pages") || !strings.Contains(d, "3 of 5 files") {
			t.Fatalf("detail: %s", d)
		}
	})

	broken := []struct {
		name  string
		spoil func(f *fixture)
		want  string
	}{
		{"stopped", func(f *fixture) { f.fm.down = true }, "not serving"},
		{"project missing from the root", func(f *fixture) {
			f.fm.pages["/mirror/pypi/simple/"] = `{"projects":[{"name":"beta"}]}`
		}, "missing from the simple index"},
		{"file missing from its project page", func(f *fixture) {
			f.fm.pages["/mirror/pypi/simple/alpha-pkg/"] = `{"files":[{"filename":"alpha_pkg-1.0-py3-none-any.whl","hashes":{"sha256":"` + f.idx[0].SHA256 + `"}}]}`
		}, "missing from the index page of alpha-pkg"},
		{"project page with another hash", func(f *fixture) {
			f.fm.pages["/mirror/pypi/simple/beta/"] = `{"files":[{"filename":"beta-0.1-py3-none-any.whl","hashes":{"sha256":"` + strings.Repeat("0", 64) + `"}}]}`
		}, "with another sha256"},
		{"project page gone", func(f *fixture) { delete(f.fm.pages, "/mirror/pypi/simple/beta/") }, "index page of beta"},
		{"npm version missing from its packument", func(f *fixture) {
			f.fm.pages["/mirror/npm/@s%2Fp"] = `{"versions":{"1.0.0":{}}}`
		}, "@s/p@2.0.0 missing from its packument"},
		{"packument gone", func(f *fixture) { delete(f.fm.pages, "/mirror/npm/left-pad") }, "packument of left-pad"},
		{"packument unreadable", func(f *fixture) { f.fm.pages["/mirror/npm/left-pad"] = `<html>` }, "unreadable"},
	}
	for _, tc := range broken {
		t.Run(tc.name, func(t *testing.T) {
			f := build(t)
			tc.spoil(&f)
			if _, err := Mirror(f.idx, f.srv.URL, 3)(ctx); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}

	t.Run("re-hash rotation covers every file", func(t *testing.T) {
		f := build(t)
		check := Mirror(f.idx, f.srv.URL, 2)
		for run := range 3 { // ceil(5/2) runs
			before := total(f.fm)
			if _, err := check(ctx); err != nil {
				t.Fatalf("run %d: %v", run, err)
			}
			if n := total(f.fm) - before; n != 2 {
				t.Fatalf("run %d downloaded %d files, want 2 (bounded)", run, n)
			}
		}
		for _, mf := range f.idx {
			if f.fm.fetched[mf.URLPath] == 0 {
				t.Errorf("%s never re-hashed in 3 runs", mf.Filename)
			}
		}
		// A file altered on disk is found within those runs too.
		f.fm.mu.Lock()
		f.fm.files[f.idx[4].URLPath] = "tampered"
		f.fm.mu.Unlock()
		var failed bool
		for range 3 {
			if _, err := check(ctx); err != nil && strings.Contains(err.Error(), "does not match its recorded sha256") {
				failed = true
				break
			}
		}
		if !failed {
			t.Fatal("a tampered file was not found within ceil(files/sample) runs")
		}
	})
}

func total(f *fakeMirror) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.fetched {
		n += c
	}
	return n
}

func TestTurn(t *testing.T) {
	t.Parallel()
	items := []int{0, 1, 2, 3, 4}
	at := 0
	var got []int
	for range 4 {
		got = append(got, turn(items, &at, 2)...)
	}
	if want := []int{0, 1, 2, 3, 4, 0, 1, 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("turns %v, want %v", got, want)
	}
	if r := turn(items, &at, 9); len(r) != 5 {
		t.Fatalf("n over len: %v", r)
	}
	if r := turn([]int(nil), &at, 2); r != nil {
		t.Fatalf("empty: %v", r)
	}
}

type fakeOSV struct {
	info OSVInfo
	err  error
}

func (f fakeOSV) OSVInfo(context.Context) (OSVInfo, error) { return f.info, f.err }
func (f fakeOSV) Judge(context.Context) (int, int, error)  { return 3, 0, nil }

func TestOSVCheck(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	fresh := OSVInfo{SnapshotID: "s1", Records: 4, ImportedAt: now.Add(-time.Hour), NewestModified: now.Add(-3 * time.Hour), Age: time.Hour, MaxAge: 72 * time.Hour}
	with := func(f func(*OSVInfo)) OSVInfo { i := fresh; f(&i); return i }
	for _, tc := range []struct {
		name string
		src  fakeOSV
		want error // nil: pass
	}{
		{"fresh", fakeOSV{info: fresh}, nil},
		{"newest record a day older than import", fakeOSV{info: with(func(i *OSVInfo) { i.NewestModified = now.Add(-50 * time.Hour) })}, nil},
		{"imported too long ago", fakeOSV{info: with(func(i *OSVInfo) { i.Age, i.Stale = 73*time.Hour, true })}, ErrOSVTooOld},
		{"age over max, source said fresh", fakeOSV{info: with(func(i *OSVInfo) { i.Age = 73 * time.Hour })}, ErrOSVTooOld},
		{"old dump imported today, record age not gated", fakeOSV{info: with(func(i *OSVInfo) { i.NewestModified = time.Date(2019, 5, 1, 0, 0, 0, 0, time.UTC) })}, nil},
		{"old dump imported today", fakeOSV{info: with(func(i *OSVInfo) {
			i.NewestModified, i.MaxRecordAge = time.Date(2019, 5, 1, 0, 0, 0, 0, time.UTC), 720*time.Hour
		})}, ErrOSVTooOld},
		{"newest just within max record age", fakeOSV{info: with(func(i *OSVInfo) { i.NewestModified, i.MaxRecordAge = now.Add(-72*time.Hour+time.Second), 72*time.Hour })}, nil},
		{"newest just past max record age", fakeOSV{info: with(func(i *OSVInfo) { i.NewestModified, i.MaxRecordAge = now.Add(-72*time.Hour-time.Second), 72*time.Hour })}, ErrOSVTooOld},
		{"newest modified unknown, gated", fakeOSV{info: with(func(i *OSVInfo) { i.NewestModified, i.MaxRecordAge = time.Time{}, 72*time.Hour })}, ErrOSVTooOld},
		{"newest modified unknown, not gated", fakeOSV{info: with(func(i *OSVInfo) { i.NewestModified = time.Time{} })}, nil},
		{"no max age", fakeOSV{info: with(func(i *OSVInfo) { i.MaxAge = 0 })}, ErrOSVTooOld},
		{"missing", fakeOSV{err: errors.New("none imported")}, errors.New("any")},
		{"not loaded", fakeOSV{info: OSVInfo{}}, ErrOSVNotLoaded},
	} {
		d, err := osvCheck(tc.src, func() time.Time { return now })(context.Background())
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != nil && err == nil:
			t.Errorf("%s: passed: %s", tc.name, d)
		case tc.want == ErrOSVTooOld || tc.want == ErrOSVNotLoaded:
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
			}
		}
		// Both times are shown whenever the database is loaded.
		if tc.src.info.SnapshotID != "" && tc.src.err == nil && (!strings.Contains(d, "imported 2026-") || !strings.Contains(d, "newest record modified ")) {
			t.Errorf("%s: detail lacks the times: %s", tc.name, d)
		}
	}
}

type fakeFW struct{ err error }

func (f fakeFW) FirewallIntact(context.Context) error { return f.err }

func TestFirewallCheck(t *testing.T) {
	t.Parallel()
	if _, err := Firewall(nil)(context.Background()); err == nil {
		t.Fatal("no firewall passed")
	}
	if _, err := Firewall(map[string]FirewallChecker{"a": fakeFW{}, "b": fakeFW{errors.New("rule gone")}})(context.Background()); err == nil {
		t.Fatal("broken firewall passed")
	}
	if _, err := Firewall(map[string]FirewallChecker{"a": fakeFW{}})(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func sha256hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// Fail closes the gate at once: the report fails until the check runs
// again, and the gate opens only through such a run (a failed check is
// always due, even one with its own interval; the gate runs it on demand).
func TestFailClosesUntilNextRun(t *testing.T) {
	t.Parallel()
	c := New(testConfig(), nil)
	var runs atomic.Int32
	var broken atomic.Bool
	c.RegisterEvery("firewall", time.Hour, func(context.Context) (string, error) {
		runs.Add(1)
		if broken.Load() {
			return "", errors.New("rule missing")
		}
		return "intact", nil
	})
	ctx := context.Background()
	if rep := c.RunAll(ctx); !rep.Ready {
		t.Fatalf("first run: %+v", rep)
	}
	c.Fail("firewall", "rules rebuilt; verifying")
	c.Fail("unknown", "ignored")
	rep := c.Report()
	if rep.Ready || len(rep.Failing()) != 1 || rep.Failing()[0].Detail != "rules rebuilt; verifying" {
		t.Fatalf("report after Fail: %+v", rep)
	}
	// While the rules do not verify, the gate's on-demand run keeps it shut.
	broken.Store(true)
	if ok, failing := c.Ready(ctx); ok || len(failing) != 1 || runs.Load() != 2 {
		t.Fatalf("gate while unverified: %v %+v (runs %d)", ok, failing, runs.Load())
	}
	broken.Store(false)
	if ok, _ := c.Ready(ctx); !ok || runs.Load() != 3 {
		t.Fatalf("gate after verification: %v (runs %d)", ok, runs.Load())
	}
}

// A check that returns a Warning passes as warn, with its text: the
// server stays ready and installs stay open.
func TestWarningPasses(t *testing.T) {
	t.Parallel()
	c := New(testConfig(), nil)
	c.Register("runtimes", func(context.Context) (string, error) {
		return "ignored", fmt.Errorf("checking: %w", &Warning{Msg: "node 22 past end of life"})
	})
	c.Register("other", func(context.Context) (string, error) { return "", nil })
	rep := c.RunAll(context.Background())
	if !rep.Ready || rep.Checks[1].Status != StatusWarn || rep.Checks[1].Detail != "node 22 past end of life" {
		t.Fatalf("%+v", rep)
	}
	if ok, failing := c.Ready(context.Background()); !ok || len(failing) != 0 {
		t.Fatalf("gate: %v %+v", ok, failing)
	}
}

// TestStopWaitsForCheckCleanup: a check whose run ended on a cancelled
// context is still undoing what it made (a canary's network): Stop
// returns only after it has, so the services stopped next find nothing
// of it. A check that ignores its context holds Stop one timeout at most.
func TestStopWaitsForCheckCleanup(t *testing.T) {
	t.Parallel()
	c := New(testConfig(), nil)
	started := make(chan struct{})
	var cleaned atomic.Bool
	c.RegisterEvery("canary", time.Hour, func(ctx context.Context) (string, error) {
		close(started)
		<-ctx.Done()
		time.Sleep(100 * time.Millisecond) // tearing its network down
		cleaned.Store(true)
		return "", ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	c.Start(ctx)
	<-started
	cancel()
	c.Stop()
	if !cleaned.Load() {
		t.Fatal("Stop returned while a cancelled check was still cleaning up")
	}

	stuck := New(testConfig(), nil)
	release := make(chan struct{})
	defer close(release)
	running := make(chan struct{})
	stuck.RegisterEvery("stuck", time.Hour, func(context.Context) (string, error) {
		close(running)
		<-release
		return "", nil
	})
	sctx, scancel := context.WithCancel(context.Background())
	stuck.Start(sctx)
	<-running
	scancel()
	begin := time.Now()
	stuck.Stop()
	if d := time.Since(begin); d > 10*time.Duration(testConfig().Timeout) {
		t.Fatalf("Stop held %v by a check that ignores its context (timeout %v)", d, time.Duration(testConfig().Timeout))
	}
}

// TestSlowRunIsNotStale: on a loaded machine a check's run may take longer
// than StaleAfter. Its last result does not go stale while the next run
// is under way, nor the moment that run ends: a result's age counts from
// when its run ended. A check that stops running still goes stale.
func TestSlowRunIsNotStale(t *testing.T) {
	t.Parallel()
	cfg := Config{Interval: Duration(50 * time.Millisecond), Timeout: Duration(2 * time.Second),
		StaleAfter: Duration(300 * time.Millisecond)}
	c := New(cfg, nil)
	var runs atomic.Int32
	c.Register("slow", func(context.Context) (string, error) {
		if runs.Add(1) > 1 {
			time.Sleep(500 * time.Millisecond) // longer than StaleAfter
		}
		return "", nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.Start(ctx)
	for runs.Load() < 1 || c.Report().Checks[0].Status == StatusPending {
		time.Sleep(5 * time.Millisecond)
	}
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if r := c.Report().Checks[0]; r.Status != StatusPass {
			t.Fatalf("after %d runs: %s %s", runs.Load(), r.Status, r.Detail)
		}
	}
	if runs.Load() < 3 {
		t.Fatalf("only %d runs", runs.Load())
	}
	c.Stop()
	time.Sleep(400 * time.Millisecond)
	if r := c.Report().Checks[0]; r.Status != StatusStale {
		t.Fatalf("a check that stopped running: %s %s", r.Status, r.Detail)
	}
}
