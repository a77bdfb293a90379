package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// registerNode records node name directly in the store, its lease
// ending at until (no process behind it).
func registerNode(t *testing.T, st *store.Store, name string, until time.Time) {
	t.Helper()
	now := time.Now()
	if _, err := st.RegisterNode(t.Context(), store.NodeRow{Name: name, URL: "http://127.0.0.1:1", StartedAt: now, RenewedAt: now, LeaseUntil: until}); err != nil {
		t.Fatal(err)
	}
}

// sessionRow reads session id.
func sessionRow(t *testing.T, st *store.Store, id string) store.SessionRow {
	t.Helper()
	r, err := st.GetSession(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSweepEndsIdleOrphans: a serving node, on its own (its sweep loop),
// claims and ends the sessions of a gone node, and those handed over,
// that are idle past their TTL; it leaves an orphan within its TTL (for
// a call to take over) and a live node's session idle past its TTL (its
// own reaper's).
func TestSweepEndsIdleOrphans(t *testing.T) {
	st := openStore(t, testPostgres(t))
	registerNode(t, st, "gone", time.Now().Add(-time.Minute))
	registerNode(t, st, "live", time.Now().Add(time.Hour))
	idle := time.Now().Add(-2 * time.Hour)
	insertIdleSession(t, st, "gone", "s-idle", idle, time.Hour)
	insertIdleSession(t, st, "", "s-handed", idle, time.Hour)
	insertIdleSession(t, st, "gone", "s-fresh", time.Now(), time.Hour)
	insertIdleSession(t, st, "live", "s-live", idle, time.Hour)
	a := startNode(t, st, "a", 4)
	if !waitFor(3*testLease, func() bool {
		return sessionRow(t, st, "s-idle").State == "ended" && sessionRow(t, st, "s-handed").State == "ended"
	}) {
		t.Fatalf("orphans idle past their TTL not swept: %+v, %+v", sessionRow(t, st, "s-idle"), sessionRow(t, st, "s-handed"))
	}
	for _, id := range []string{"s-idle", "s-handed"} {
		r := sessionRow(t, st, id)
		if r.Node != "a" || r.EndReason != orphanReason || a.ex.endedOrphans(id) != 1 {
			t.Fatalf("%s: %+v, EndOrphan called %d times", id, r, a.ex.endedOrphans(id))
		}
	}
	if got := a.obs.swept.Load(); got != 2 {
		t.Fatalf("swept takeovers %d, want 2", got)
	}
	// Another sweep or two: the others stay where they are.
	time.Sleep(2 * testLease)
	if n := a.node.sweep(t.Context()); n != 0 {
		t.Fatalf("a sweep with nothing to end ended %d", n)
	}
	for id, owner := range map[string]string{"s-fresh": "gone", "s-live": "live"} {
		if r := sessionRow(t, st, id); r.State != "running" || r.Node != owner || a.ex.endedOrphans(id) != 0 || a.ex.adopted(id) != 0 {
			t.Fatalf("%s: %+v, EndOrphan %d, Adopt %d", id, r, a.ex.endedOrphans(id), a.ex.adopted(id))
		}
	}
	if a.obs.takeovers.Load() != 0 {
		t.Fatalf("takeovers for calls %d, want 0", a.obs.takeovers.Load())
	}
}

// TestSweepTwoNodesOnce: two nodes sweeping at once end each orphan
// exactly once between them.
func TestSweepTwoNodesOnce(t *testing.T) {
	st := openStore(t, testPostgres(t))
	registerNode(t, st, "gone", time.Now().Add(-time.Minute))
	idle := time.Now().Add(-2 * time.Hour)
	const count = 40 // more than one batch
	for i := range count {
		owner := "gone"
		if i%4 == 0 {
			owner = "" // handed over
		}
		insertIdleSession(t, st, owner, fmt.Sprintf("s%02d", i), idle.Add(time.Duration(i)*time.Second), time.Hour)
	}
	a, b := startNode(t, st, "a", 4), startNode(t, st, "b", 4)
	var wg sync.WaitGroup
	for _, n := range []*testNode{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				n.node.sweep(t.Context())
			}
		}()
	}
	wg.Wait()
	for i := range count {
		id := fmt.Sprintf("s%02d", i)
		r := sessionRow(t, st, id)
		ea, eb := a.ex.endedOrphans(id), b.ex.endedOrphans(id)
		if r.State != "ended" || ea+eb != 1 || (ea == 1) != (r.Node == "a") {
			t.Fatalf("%s: %+v; EndOrphan on a %d, on b %d", id, r, ea, eb)
		}
	}
	if got := a.obs.swept.Load() + b.obs.swept.Load(); got != count {
		t.Fatalf("swept takeovers %d, want %d", got, count)
	}
}

// TestSweepNotServing: a node that holds no lease it can prove, or that
// drains, sweeps nothing.
func TestSweepNotServing(t *testing.T) {
	st := openStore(t, testPostgres(t))
	registerNode(t, st, "gone", time.Now().Add(-time.Minute))
	insertIdleSession(t, st, "gone", "s1", time.Now().Add(-2*time.Hour), time.Hour)
	a, b := startNode(t, st, "a", 4), startNode(t, st, "b", 4)
	a.kill()                                     // no lease loop, no sweep loop
	a.skew.Store(int64(testLease - testLease/8)) // past lease - lease/4 by its clock
	if a.node.serving() {
		t.Fatal("still serving past lease - lease/4")
	}
	if n := a.node.sweep(t.Context()); n != 0 {
		t.Fatalf("a node not serving ended %d", n)
	}
	b.node.Drain()
	if n := b.node.sweep(t.Context()); n != 0 {
		t.Fatalf("a draining node ended %d", n)
	}
	time.Sleep(2 * testLease) // b's sweep loop runs, and does nothing
	if r := sessionRow(t, st, "s1"); r.State != "running" || r.Node != "gone" || a.ex.endedOrphans("s1")+b.ex.endedOrphans("s1") != 0 {
		t.Fatalf("s1: %+v", r)
	}
}
