package store

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestNodeLeases(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		st := open(t)
		now := time.Now()
		a, err := st.RegisterNode(ctx, NodeRow{Name: "a", URL: "http://127.0.0.1:1", Capacity: 4, Free: 4, StartedAt: now, RenewedAt: now, LeaseUntil: now.Add(10 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if a.Epoch != 1 {
			t.Fatalf("first epoch %d, want 1", a.Epoch)
		}
		if err := st.RenewNode(ctx, "a", 1, now.Add(time.Second), now.Add(11*time.Second), 3, false); err != nil {
			t.Fatal(err)
		}
		got, err := st.GetNode(ctx, "a")
		if err != nil || got.Free != 3 || !got.Alive(now.Add(10*time.Second)) || got.Alive(now.Add(12*time.Second)) {
			t.Fatalf("node after renewal: %+v, %v", got, err)
		}
		// A renewal after the lease ran out fails: others may have claimed.
		if err := st.RenewNode(ctx, "a", 1, now.Add(12*time.Second), now.Add(22*time.Second), 3, false); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("late renewal: %v, want ErrLeaseLost", err)
		}
		// A restart is a new incarnation; the old one can no longer renew.
		a2, err := st.RegisterNode(ctx, NodeRow{Name: "a", URL: "http://127.0.0.1:2", Capacity: 4, Free: 4, StartedAt: now, RenewedAt: now, LeaseUntil: now.Add(10 * time.Second)})
		if err != nil || a2.Epoch != 2 {
			t.Fatalf("re-register: %+v, %v", a2, err)
		}
		if err := st.RenewNode(ctx, "a", 1, now, now.Add(10*time.Second), 4, false); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("renewal by the old epoch: %v, want ErrLeaseLost", err)
		}
		if err := st.ExpireNode(ctx, "a", 2); err != nil {
			t.Fatal(err)
		}
		if got, _ := st.GetNode(ctx, "a"); got.Alive(now) || !got.Draining {
			t.Fatalf("expired node still alive: %+v", got)
		}
		if ns, err := st.Nodes(ctx); err != nil || len(ns) != 1 || ns[0].URL != "http://127.0.0.1:2" {
			t.Fatalf("nodes: %+v, %v", ns, err)
		}
	})
}

func TestSessionOwnership(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		db := open(t)
		a, b, c := db.ForNode("a"), db.ForNode("b"), db.ForNode("c")
		now := time.Now()
		for _, n := range []string{"a", "b", "c"} {
			if _, err := db.RegisterNode(ctx, NodeRow{Name: n, URL: "http://" + n, Capacity: 2, Free: 2, StartedAt: now, RenewedAt: now, LeaseUntil: now.Add(10 * time.Second)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.InsertSession(ctx, SessionRow{ID: "s1", KeyID: "k", Language: "python3", State: "running", Network: "{}", IdleTTL: time.Minute, CreatedAt: now, LastUsedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := a.InsertExecution(ctx, ExecutionRow{ID: "x1", SessionID: "s1", KeyID: "k", Language: "python3", StartedAt: now}); err != nil {
			t.Fatal(err)
		}
		o, err := b.OwnerOf(ctx, "s1")
		if err != nil || o.Session.Node != "a" || o.Owner.Name != "a" || o.Owner.URL != "http://a" || !o.Owner.Alive(now) {
			t.Fatalf("owner of s1: %+v, %v", o, err)
		}
		if rows, _ := b.SessionsInStates(ctx, "running"); len(rows) != 0 {
			t.Fatalf("b lists a's session: %+v", rows)
		}
		if rows, _ := a.SessionsInStates(ctx, "running"); len(rows) != 1 {
			t.Fatalf("a lists %d of its sessions, want 1", len(rows))
		}
		// While a's lease runs, nobody claims its session, and another
		// node's state change does not touch it.
		if prev, ok, err := b.ClaimSession(ctx, "s1", now.Add(5*time.Second)); err != nil || ok || prev != "a" {
			t.Fatalf("claim of a live owner's session: %q %v %v", prev, ok, err)
		}
		if err := b.SetSessionState(ctx, "s1", "ended", "x", true); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("b ending a's session: %v, want ErrNotOwner", err)
		}
		// Once a's lease has run out, b and c (renewed) race: exactly one wins.
		later := now.Add(11 * time.Second)
		for _, n := range []string{"b", "c"} {
			if err := db.RenewNode(ctx, n, 1, now, now.Add(time.Hour), 2, false); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		wins := make(chan string, 2)
		for _, st := range []*Store{b, c} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				prev, ok, err := st.ClaimSession(ctx, "s1", later)
				if err != nil {
					t.Error(err)
				}
				if ok {
					if prev != "a" {
						t.Errorf("claim took from %q, want a", prev)
					}
					wins <- st.Node()
				}
			}()
		}
		wg.Wait()
		close(wins)
		var winner []string
		for w := range wins {
			winner = append(winner, w)
		}
		if len(winner) != 1 {
			t.Fatalf("claim winners %v, want exactly one", winner)
		}
		if st, _, _ := db.ExecutionState(ctx, "x1"); st != "failed" {
			t.Fatalf("execution left running by the dead owner is %q, want failed", st)
		}
		// The old owner can no longer change the session.
		if err := a.SetSessionHibernated(ctx, "s1", later, later); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("old owner hibernating: %v, want ErrNotOwner", err)
		}
		w := db.ForNode(winner[0])
		if err := w.SetSessionHibernated(ctx, "s1", later, later); err != nil {
			t.Fatal(err)
		}
		// A drain hands sessions over: unowned, claimable at once.
		ids, err := w.ReleaseSessions(ctx)
		if err != nil || len(ids) != 1 || ids[0] != "s1" {
			t.Fatalf("release: %v, %v", ids, err)
		}
		if prev, ok, err := a.ClaimSession(ctx, "s1", now); err != nil || !ok || prev != "" {
			t.Fatalf("claim of a handed-over session: %q %v %v", prev, ok, err)
		}
		if rows, err := b.LiveSessionsOfKey(ctx, "k"); err != nil || len(rows) != 1 || rows[0].Node != "a" {
			t.Fatalf("live sessions of k: %+v, %v", rows, err)
		}
		if err := a.SetSessionState(ctx, "s1", "ended", "deleted", true); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := b.ClaimSession(ctx, "s1", later.Add(2*time.Hour)); ok || err != nil {
			t.Fatalf("claim of an ended session: %v %v", ok, err)
		}
		if _, _, err := b.ClaimSession(ctx, "nope", later); !errors.Is(err, ErrNotFound) {
			t.Fatalf("claim of a missing session: %v", err)
		}
	})
}

func TestOrphanedIdleSessions(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		db := open(t)
		now := time.Now()
		// live holds a lease; dead's ran out a minute ago.
		if _, err := db.RegisterNode(ctx, NodeRow{Name: "live", URL: "http://live", StartedAt: now, RenewedAt: now, LeaseUntil: now.Add(24 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.RegisterNode(ctx, NodeRow{Name: "dead", URL: "http://dead", StartedAt: now, RenewedAt: now, LeaseUntil: now.Add(-time.Minute)}); err != nil {
			t.Fatal(err)
		}
		idle := now.Add(-2 * time.Hour) // past an hour's TTL
		for _, r := range []SessionRow{
			{ID: "expired-idle", Node: "dead", State: "hibernated", LastUsedAt: idle},
			{ID: "expired-idle-older", Node: "dead", State: "running", LastUsedAt: idle.Add(-time.Minute)},
			{ID: "handover-idle", Node: "", State: "hibernated", LastUsedAt: idle.Add(time.Minute)},
			{ID: "expired-fresh", Node: "dead", State: "running", LastUsedAt: now.Add(-time.Minute)},
			{ID: "handover-fresh", Node: "", State: "hibernated", LastUsedAt: now.Add(-time.Minute)},
			{ID: "live-idle", Node: "live", State: "running", LastUsedAt: idle},
			{ID: "expired-ended", Node: "dead", State: "running", LastUsedAt: idle},
		} {
			r.KeyID, r.Language, r.Network, r.IdleTTL, r.CreatedAt = "k", "python3", "{}", time.Hour, idle.Add(-time.Hour)
			if err := db.ForNode(r.Node).InsertSession(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.ForNode("dead").SetSessionState(ctx, "expired-ended", "ended", "deleted", true); err != nil {
			t.Fatal(err)
		}
		ids := func(limit int) []string {
			t.Helper()
			rows, err := db.ForNode("live").OrphanedIdleSessions(ctx, now, limit)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, r := range rows {
				out = append(out, r.ID)
			}
			return out
		}
		want := []string{"expired-idle-older", "expired-idle", "handover-idle"} // longest idle first
		if got := ids(32); !slices.Equal(got, want) {
			t.Fatalf("orphaned idle sessions %v, want %v", got, want)
		}
		if got := ids(2); !slices.Equal(got, want[:2]) {
			t.Fatalf("limit 2: %v, want %v", got, want[:2])
		}
		// Once claimed by a node holding a lease, a session is no orphan.
		if _, ok, err := db.ForNode("live").ClaimSession(ctx, "expired-idle-older", now); err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		if got := ids(32); !slices.Equal(got, want[1:]) {
			t.Fatalf("after a claim: %v, want %v", got, want[1:])
		}
		// Past their TTL later, the fresh ones are listed too.
		later, err := db.OrphanedIdleSessions(ctx, now.Add(2*time.Hour), 32)
		if err != nil || len(later) != 4 {
			t.Fatalf("two hours later: %+v, %v", later, err)
		}
	})
}
