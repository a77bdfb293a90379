package installer

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeNet makes "namespaces" as files in a folder and records calls.
type fakeNet struct {
	dir  string
	fail bool

	mu       sync.Mutex
	up       map[string]bool
	setups   int
	teardown chan string
}

func newFakeNet(t *testing.T) *fakeNet {
	return &fakeNet{dir: t.TempDir(), up: map[string]bool{}, teardown: make(chan string, 16)}
}

func (f *fakeNet) Setup(ctx context.Context, id string) (Endpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setups++
	if f.fail {
		return Endpoint{}, errors.New("no network")
	}
	p := filepath.Join(f.dir, id)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return Endpoint{}, err
	}
	f.up[id] = true
	return Endpoint{NetnsPath: p, HostAddr: netip.MustParseAddr("127.0.0.1")}, nil
}

func (f *fakeNet) Teardown(ctx context.Context, id string) error {
	f.mu.Lock()
	delete(f.up, id)
	f.mu.Unlock()
	os.Remove(filepath.Join(f.dir, id))
	f.teardown <- id
	return nil
}

func (f *fakeNet) live() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.up)
}

// waitSpare waits until the installer holds a spare network.
func waitSpare(t *testing.T, i *Installer) netSlot {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		i.warm.mu.Lock()
		s := i.warm.spare
		i.warm.mu.Unlock()
		if s != nil {
			return *s
		}
	}
	t.Fatal("no spare network")
	return netSlot{}
}

// TestWarmNetworks: after Start a spare network waits; an install takes it
// (never a used one) and a new spare is made; used networks are torn down
// after the install; a spare whose namespace vanished is dropped; Stop
// removes the spare; without Start everything happens in line.
func TestWarmNetworks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fn := newFakeNet(t)
	i := New(DefaultConfig(), nil, nil, fn, nil, nil)

	// Not started: made and torn down in line.
	s, err := i.network(ctx)
	if err != nil || fn.live() != 1 {
		t.Fatalf("in-line network: %v, %d live", err, fn.live())
	}
	i.release(ctx, s)
	if got := <-fn.teardown; got != s.id || fn.live() != 0 {
		t.Fatalf("in-line teardown: %s, %d live", got, fn.live())
	}

	i.Start(ctx)
	spare := waitSpare(t, i)
	got, err := i.network(ctx)
	if err != nil || got.id != spare.id {
		t.Fatalf("took %+v (%v), want the spare %s", got, err, spare.id)
	}
	next := waitSpare(t, i)
	if next.id == got.id {
		t.Fatal("a used network came back as the spare")
	}
	i.release(ctx, got)
	if id := <-fn.teardown; id != got.id {
		t.Fatalf("torn down %s, want %s", id, got.id)
	}

	// A spare whose namespace is gone is dropped for a fresh one.
	os.Remove(next.ep.NetnsPath)
	got, err = i.network(ctx)
	if err != nil || got.id == next.id {
		t.Fatalf("took %+v (%v) after its namespace vanished", got, err)
	}
	if id := <-fn.teardown; id != next.id {
		t.Fatalf("vanished spare not dropped: %s", id)
	}
	i.release(ctx, got)
	<-fn.teardown
	waitSpare(t, i)

	if err := i.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	<-fn.teardown
	if fn.live() != 0 {
		t.Fatalf("%d networks left after Stop", fn.live())
	}
	// Stopped again: in line.
	s, _ = i.network(ctx)
	i.release(ctx, s)
	if fn.live() != 0 {
		t.Fatal("release after Stop is not in line")
	}
}

// TestWarmNetworkFailureFailsClosed: when no network can be made, the
// install gets the error, not a network.
func TestWarmNetworkFailureFailsClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fn := newFakeNet(t)
	fn.fail = true
	i := New(DefaultConfig(), nil, nil, fn, nil, nil)
	i.Start(ctx)
	defer i.Stop(ctx)
	if _, err := i.network(ctx); err == nil {
		t.Fatal("got a network while none can be made")
	}
}

// TestStopWaitsForNetworksInUse: a network handed out before Stop (a job,
// a readiness canary still running) holds Stop until it is released and
// torn down, so no network outlives the installer; a release that never
// comes ends Stop with ctx's error.
func TestStopWaitsForNetworksInUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fn := newFakeNet(t)
	i := New(DefaultConfig(), nil, nil, fn, nil, nil)
	i.Start(ctx)
	spare := waitSpare(t, i)
	inUse, err := i.network(ctx)
	if err != nil || inUse.id != spare.id {
		t.Fatalf("took %+v (%v), want the spare", inUse, err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- i.Stop(ctx) }()
	// The new spare, if one was made, goes at Stop; the one in use stays.
	for deadline := time.Now().Add(5 * time.Second); fn.live() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d networks live after Stop began, want only the one in use", fn.live())
		}
	}
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while network %s was in use", err, inUse.id)
	case <-time.After(200 * time.Millisecond):
	}
	i.release(ctx, inUse)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if fn.live() != 0 {
		t.Fatalf("%d networks left after Stop", fn.live())
	}

	// A network that is never released: Stop gives up when ctx ends.
	j := New(DefaultConfig(), nil, nil, newFakeNet(t), nil, nil)
	j.Start(ctx)
	if _, err := j.network(ctx); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := j.Stop(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with a network never released: %v", err)
	}
}
