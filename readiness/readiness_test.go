package readiness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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
	ok, failing := c.Ready(context.Background())
	if ok || len(failing) != 1 || failing[0].Status != StatusPending {
		t.Fatalf("pending: %v %v", ok, failing)
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

func TestMirrorCheck(t *testing.T) {
	t.Parallel()
	body := "wheel-bytes"
	sum := "6d9ee2c0a1fb3f2a4d0e0e6e5a8c6b9c1f9b0a7ee4a3b7b4c1d2e3f4a5b6c7d8" // wrong on purpose below
	var serving atomic.Bool
	serving.Store(true)
	mux := http.NewServeMux()
	mux.HandleFunc("/mirror/pypi/simple/", func(w http.ResponseWriter, r *http.Request) {
		if !serving.Load() {
			http.Error(w, "down", 503)
			return
		}
		w.Write([]byte(`{"projects":[{"name":"Alpha_Pkg"}]}`))
	})
	mux.HandleFunc("/mirror/pypi/files/x/alpha.whl", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(body)) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	real := sha256hex(body)
	ctx := context.Background()
	ok := Mirror(fakeIndex{{Manager: "pip", Name: "alpha-pkg", SHA256: real, URLPath: "/mirror/pypi/files/x/alpha.whl", Filename: "alpha.whl"}}, srv.URL, 3)
	if _, err := ok(ctx); err != nil {
		t.Fatalf("healthy mirror: %v", err)
	}
	if _, err := Mirror(fakeIndex{{Manager: "pip", Name: "alpha-pkg", SHA256: sum, URLPath: "/mirror/pypi/files/x/alpha.whl", Filename: "alpha.whl"}}, srv.URL, 3)(ctx); err == nil {
		t.Fatal("hash mismatch passed")
	}
	if _, err := Mirror(fakeIndex{{Manager: "pip", Name: "other", SHA256: real, URLPath: "/mirror/pypi/files/x/alpha.whl"}}, srv.URL, 3)(ctx); err == nil {
		t.Fatal("index inconsistency passed")
	}
	serving.Store(false)
	if _, err := ok(ctx); err == nil {
		t.Fatal("stopped mirror passed")
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
		{"old dump imported today", fakeOSV{info: with(func(i *OSVInfo) { i.NewestModified = time.Date(2019, 5, 1, 0, 0, 0, 0, time.UTC) })}, ErrOSVTooOld},
		{"newest just past max age", fakeOSV{info: with(func(i *OSVInfo) { i.NewestModified = now.Add(-72*time.Hour - time.Second) })}, ErrOSVTooOld},
		{"newest modified unknown", fakeOSV{info: with(func(i *OSVInfo) { i.NewestModified = time.Time{} })}, ErrOSVTooOld},
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
