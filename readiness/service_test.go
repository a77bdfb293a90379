package readiness

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The service starts the checks only once wait returns, and Stop ends
// them; a Stop while wait still blocks returns, and no check ever runs.
func TestService(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	newChecker := func() *Checker {
		c := New(testConfig(), nil)
		c.Register("x", func(context.Context) (string, error) { runs.Add(1); return "up", nil })
		return c
	}
	gate := make(chan struct{})
	svc := newChecker().Service(func(ctx context.Context) {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	})
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := runs.Load(); n != 0 {
		t.Fatalf("%d runs before wait returned", n)
	}
	close(gate)
	deadline := time.Now().Add(2 * time.Second)
	for runs.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if runs.Load() == 0 {
		t.Fatal("no run after wait returned")
	}
	if err := svc.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := runs.Load()
	time.Sleep(50 * time.Millisecond)
	if n := runs.Load(); n != after {
		t.Fatalf("runs went on after Stop: %d -> %d", after, n)
	}

	runs.Store(0)
	blocked := newChecker().Service(func(ctx context.Context) { <-ctx.Done() })
	if err := blocked.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = blocked.Stop(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Stop hung while wait blocked")
	}
	time.Sleep(50 * time.Millisecond)
	if n := runs.Load(); n != 0 {
		t.Fatalf("%d runs after a Stop during wait", n)
	}
}
