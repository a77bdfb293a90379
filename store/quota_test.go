package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// TestSessionSlotsExactAcrossHandles: 50 parallel creates of one PRO key
// (2 sessions), spread over 5 store handles as over 5 nodes, get exactly 2
// slots; a released slot can be taken again.
func TestSessionSlotsExactAcrossHandles(t *testing.T) {
	eachBackend(t, testSessionSlotsExactAcrossHandles)
}

func testSessionSlotsExactAcrossHandles(t *testing.T, open opener) {
	ctx := context.Background()
	const nodes, creates, max = 5, 50, 2
	handles := make([]*Store, nodes)
	for i := range handles {
		handles[i] = open(t)
	}
	var got atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, creates)
	start := make(chan struct{})
	for i := 0; i < creates; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			st := handles[i%nodes]
			ok, err := st.ReserveSessionSlot(ctx, "kpro", fmt.Sprintf("s%02d", i), fmt.Sprintf("node%d", i%nodes), max)
			if err != nil {
				errs <- err
				return
			}
			if ok {
				got.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("reserve: %v", err)
	}
	if got.Load() != max {
		t.Fatalf("%d of %d parallel creates got a slot, want exactly %d", got.Load(), creates, max)
	}
	if n, err := handles[0].SessionSlots(ctx, "kpro"); err != nil || n != max {
		t.Fatalf("slots held: %d, %v", n, err)
	}
	// Another key is not affected; a held slot is not taken twice.
	if ok, err := handles[1].ReserveSessionSlot(ctx, "kother", "x1", "node1", 1); err != nil || !ok {
		t.Fatalf("other key: %v %v", ok, err)
	}
	if ok, err := handles[1].ReserveSessionSlot(ctx, "kother", "x1", "node1", 1); err != nil || !ok {
		t.Fatalf("same session again: %v %v", ok, err)
	}
	rows, err := handles[0].DB().QueryContext(ctx, `SELECT session_id FROM session_slots WHERE key_id = ?`, "kpro")
	if err != nil {
		t.Fatal(err)
	}
	var holder string
	for rows.Next() {
		if err := rows.Scan(&holder); err != nil {
			t.Fatal(err)
		}
	}
	rows.Close()
	if err := handles[2].ReleaseSessionSlot(ctx, holder); err != nil {
		t.Fatal(err)
	}
	if ok, err := handles[3].ReserveSessionSlot(ctx, "kpro", "late", "node3", max); err != nil || !ok {
		t.Fatalf("after a release: %v %v", ok, err)
	}
	if ok, err := handles[4].ReserveSessionSlot(ctx, "kpro", "later", "node4", max); err != nil || ok {
		t.Fatalf("full again: %v %v", ok, err)
	}
}

// TestRateTokensExactAcrossHandles: a key allowed 10 requests a minute
// gets exactly 10 of 40 parallel requests through 4 handles at one
// instant, and one more after 6 s (a token refills every 6 s).
func TestRateTokensExactAcrossHandles(t *testing.T) { eachBackend(t, testRateTokensExactAcrossHandles) }

func testRateTokensExactAcrossHandles(t *testing.T, open opener) {
	ctx := context.Background()
	handles := []*Store{open(t), open(t), open(t), open(t)}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var got atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, wait, err := handles[i%4].TakeRateToken(ctx, "k", 10, now)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				got.Add(1)
			} else if wait <= 0 || wait > 6*time.Second+time.Millisecond {
				t.Errorf("refused with wait %v", wait)
			}
		}()
	}
	wg.Wait()
	if got.Load() != 10 {
		t.Fatalf("%d of 40 requests allowed, want 10", got.Load())
	}
	cases := []struct {
		at   time.Duration
		want bool
	}{
		{5 * time.Second, false},
		{6 * time.Second, true},
		{6 * time.Second, false},
		{10 * time.Minute, true}, // a long pause refills the bucket, not beyond it
	}
	for _, c := range cases {
		ok, _, err := handles[0].TakeRateToken(ctx, "k", 10, now.Add(c.at))
		if err != nil || ok != c.want {
			t.Fatalf("at +%v: %v, %v; want %v", c.at, ok, err, c.want)
		}
	}
	n := 0
	for i := 0; i < 20; i++ {
		if ok, _, _ := handles[1].TakeRateToken(ctx, "k", 10, now.Add(10*time.Minute)); ok {
			n++
		}
	}
	if n != 9 {
		t.Fatalf("after a long pause: %d more tokens, want 9 (bucket of 10, one taken)", n)
	}
}

// TestSessionSlotsFollowSessions: a bound slot counts exactly while its
// session's row is live (hibernated included), and goes in the statement
// that moves the row out of the live states, by whichever path.
func TestSessionSlotsFollowSessions(t *testing.T) { eachBackend(t, testSessionSlotsFollowSessions) }

func testSessionSlotsFollowSessions(t *testing.T, open opener) {
	ctx := context.Background()
	st, other := open(t), open(t) // the session's node, and another
	now := time.Now()
	n := 0
	// live makes a session the way the API and the executor do: reserve
	// under a provisional id, insert the row, bind.
	live := func(t *testing.T, key string) string {
		t.Helper()
		n++
		slot, id := fmt.Sprintf("pending_%d", n), fmt.Sprintf("sess_%d", n)
		if ok, err := other.ReserveSessionSlot(ctx, key, slot, "node2", 1); err != nil || !ok {
			t.Fatalf("reserve: %v %v", ok, err)
		}
		if err := st.InsertSession(ctx, SessionRow{ID: id, KeyID: key, Language: "python3", State: "creating", Network: "{}",
			IdleTTL: time.Minute, CreatedAt: now, LastUsedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := other.BindSessionSlot(ctx, key, slot, id); err != nil {
			t.Fatal(err)
		}
		if err := st.SetSessionState(ctx, id, "running", "", false); err != nil {
			t.Fatal(err)
		}
		return id
	}
	rows := func(t *testing.T, id string) int {
		t.Helper()
		var c int
		if err := st.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM session_slots WHERE session_id = ?`, id).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	cases := []struct {
		name string
		move func(id string) error
		held bool
	}{
		{"hibernated", func(id string) error { return st.SetSessionHibernated(ctx, id, now, now) }, true},
		{"hibernating then resuming", func(id string) error {
			if err := st.SetSessionState(ctx, id, "hibernating", "", false); err != nil {
				return err
			}
			return st.SetSessionState(ctx, id, "resuming", "", false)
		}, true},
		{"deleted", func(id string) error { return st.SetSessionState(ctx, id, "ended", "deleted", true) }, false},
		{"idle ttl", func(id string) error {
			if err := st.SetSessionState(ctx, id, "ending", "idle", false); err != nil {
				return err
			}
			return st.SetSessionState(ctx, id, "ended", "idle", true)
		}, false},
		{"sandbox lost", func(id string) error { return st.SetSessionState(ctx, id, "failed", "sandbox lost", false) }, false},
		{"create failed", func(id string) error { return st.SetSessionState(ctx, id, "failed", "create failed", true) }, false},
		{"lost on restart", func(id string) error { return st.SetSessionState(ctx, id, "ended", "lost on restart", true) }, false},
		{"row deleted", func(id string) error {
			_, err := st.DB().ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, id)
			return err
		}, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := fmt.Sprintf("k%d", i)
			id := live(t, key)
			if got, err := other.SessionSlots(ctx, key); err != nil || got != 1 {
				t.Fatalf("live session: %d slots, %v", got, err)
			}
			if err := c.move(id); err != nil {
				t.Fatal(err)
			}
			want := 0
			if c.held {
				want = 1
			}
			if got, err := other.SessionSlots(ctx, key); err != nil || got != want || rows(t, id) != want {
				t.Fatalf("after the move: %d slots (%d rows), %v; want %d", got, rows(t, id), err, want)
			}
			ok, err := other.ReserveSessionSlot(ctx, key, "next", "node2", 1)
			if err != nil || ok != !c.held {
				t.Fatalf("next reservation: %v %v, want %v", ok, err, !c.held)
			}
		})
	}
}

// TestSessionSlotsReconcile: rows that no longer count (a pending
// reservation of a node that died, a slot bound to a session that ended
// before the bind) are not counted and are deleted by the next
// reservation; a bind whose reservation expired takes a slot again.
func TestSessionSlotsReconcile(t *testing.T) { eachBackend(t, testSessionSlotsReconcile) }

func testSessionSlotsReconcile(t *testing.T, open opener) {
	ctx := context.Background()
	st := open(t)
	now := time.Now()
	count := func(t *testing.T, key string, want int) {
		t.Helper()
		if got, err := st.SessionSlots(ctx, key); err != nil || got != want {
			t.Fatalf("%s: %d slots, %v; want %d", key, got, err, want)
		}
	}
	t.Run("pending of a dead node expires", func(t *testing.T) {
		if ok, err := st.ReserveSessionSlot(ctx, "ka", "pending_dead", "node9", 1); err != nil || !ok {
			t.Fatalf("reserve: %v %v", ok, err)
		}
		if ok, err := st.ReserveSessionSlot(ctx, "ka", "pending_2", "node1", 1); err != nil || ok {
			t.Fatalf("full: %v %v", ok, err)
		}
		old := now.Add(-PendingSlotTTL - time.Second)
		if _, err := st.DB().ExecContext(ctx, `UPDATE session_slots SET reserved_at = ? WHERE session_id = 'pending_dead'`, ms(old)); err != nil {
			t.Fatal(err)
		}
		count(t, "ka", 0)
		if ok, err := st.ReserveSessionSlot(ctx, "ka", "pending_2", "node1", 1); err != nil || !ok {
			t.Fatalf("after expiry: %v %v", ok, err)
		}
		var left int
		if err := st.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM session_slots WHERE session_id = 'pending_dead'`).Scan(&left); err != nil || left != 0 {
			t.Fatalf("expired reservation still there: %d, %v", left, err)
		}
	})
	t.Run("bind after the session ended", func(t *testing.T) {
		if ok, err := st.ReserveSessionSlot(ctx, "kb", "pending_b", "", 1); err != nil || !ok {
			t.Fatalf("reserve: %v %v", ok, err)
		}
		if err := st.InsertSession(ctx, SessionRow{ID: "sess_b", KeyID: "kb", Language: "bash", State: "creating", Network: "{}", CreatedAt: now, LastUsedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := st.SetSessionState(ctx, "sess_b", "ended", "idle", true); err != nil {
			t.Fatal(err)
		}
		if err := st.BindSessionSlot(ctx, "kb", "pending_b", "sess_b"); err != nil {
			t.Fatal(err)
		}
		count(t, "kb", 0)
	})
	t.Run("bind after the reservation expired", func(t *testing.T) {
		if err := st.InsertSession(ctx, SessionRow{ID: "sess_c", KeyID: "kc", Language: "bash", State: "running", Network: "{}", CreatedAt: now, LastUsedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := st.BindSessionSlot(ctx, "kc", "pending_gone", "sess_c"); err != nil {
			t.Fatal(err)
		}
		count(t, "kc", 1)
		if err := st.BindSessionSlot(ctx, "kc", "pending_gone", "sess_c"); err != nil { // twice: still one
			t.Fatal(err)
		}
		count(t, "kc", 1)
		if ok, err := st.ReserveSessionSlot(ctx, "kc", "pending_c2", "", 1); err != nil || ok {
			t.Fatalf("the late-bound session is counted: %v %v", ok, err)
		}
	})
	t.Run("release of a pending reservation", func(t *testing.T) {
		if ok, err := st.ReserveSessionSlot(ctx, "kd", "pending_d", "", 1); err != nil || !ok {
			t.Fatalf("reserve: %v %v", ok, err)
		}
		if err := st.ReleaseSessionSlot(ctx, "pending_d"); err != nil {
			t.Fatal(err)
		}
		count(t, "kd", 0)
	})
	t.Run("backfill of live sessions", func(t *testing.T) {
		for _, r := range []struct {
			id    string
			state sandbox.State
		}{{"sess_e1", "running"}, {"sess_e2", "hibernated"}, {"sess_e3", "ended"}, {"sess_e4", "failed"}} {
			if err := st.InsertSession(ctx, SessionRow{ID: r.id, KeyID: "ke", Language: "bash", State: r.state, Network: "{}", CreatedAt: now, LastUsedAt: now}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.DB().ExecContext(ctx, slotsBackfill); err != nil {
			t.Fatal(err)
		}
		count(t, "ke", 2)
	})
}

// TestSessionSlotsMigration: a store from before slots followed sessions
// gains the rule on open, and its live sessions hold their slots.
func TestSessionSlotsMigration(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		st := open(t)
		now := time.Now()
		for _, r := range []struct{ id, state string }{{"sess_live", "running"}, {"sess_hib", "hibernated"}, {"sess_gone", "ended"}} {
			if err := st.InsertSession(ctx, SessionRow{ID: r.id, KeyID: "k", Language: "bash", State: sandbox.State(r.state), Network: "{}", CreatedAt: now, LastUsedAt: now}); err != nil {
				t.Fatal(err)
			}
		}
		undo := `DROP TRIGGER session_slots_follow; DROP TRIGGER session_slots_follow_delete;`
		if st.Dialect() == Postgres {
			undo = `DROP TRIGGER session_slots_follow ON sessions;`
		}
		if _, err := st.DB().ExecContext(ctx, undo+` DELETE FROM session_slots; ALTER TABLE session_slots DROP COLUMN bound; ALTER TABLE rate_buckets DROP COLUMN granted;
			DELETE FROM schema_version WHERE v > 9`); err != nil {
			t.Fatal(err)
		}
		st2 := open(t) // migrates
		if n, err := st2.SessionSlots(ctx, "k"); err != nil || n != 2 {
			t.Fatalf("after the migration: %d slots, %v; want 2", n, err)
		}
		if err := st2.SetSessionState(ctx, "sess_live", "ended", "deleted", true); err != nil {
			t.Fatal(err)
		}
		var rows int
		if err := st2.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM session_slots WHERE key_id = 'k'`).Scan(&rows); err != nil || rows != 1 {
			t.Fatalf("after an end: %d slot rows, %v; want 1", rows, err)
		}
		if ok, _, err := st2.TakeRateToken(ctx, "k", 1, now); err != nil || !ok {
			t.Fatalf("rate token after the migration: %v %v", ok, err)
		}
	})
}

// TestRateTokenWaits: a refused take says exactly how long until the
// next token, and a node whose clock is behind the bucket's last take
// refills nothing and does not move the bucket back.
func TestRateTokenWaits(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		st := open(t)
		t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		for i := range 10 {
			if ok, _, err := st.TakeRateToken(ctx, "k", 10, t0); err != nil || !ok {
				t.Fatalf("take %d: %v %v", i, ok, err)
			}
		}
		cases := []struct {
			at   time.Duration
			ok   bool
			wait time.Duration
		}{
			{0, false, 6 * time.Second},
			{time.Second, false, 5 * time.Second},
			{-30 * time.Second, false, 5 * time.Second}, // a clock behind: no refill
			{5999 * time.Millisecond, false, time.Millisecond},
			{6 * time.Second, true, 0},
			{6 * time.Second, false, 6 * time.Second},
		}
		for _, c := range cases {
			ok, wait, err := st.TakeRateToken(ctx, "k", 10, t0.Add(c.at))
			if err != nil || ok != c.ok || wait != c.wait {
				t.Fatalf("at %+v: %v, wait %v, %v; want %v, wait %v", c.at, ok, wait, err, c.ok, c.wait)
			}
		}
		if ok, wait, err := st.TakeRateToken(ctx, "k", 0, t0); err != nil || ok || wait != time.Minute {
			t.Fatalf("no rate: %v %v %v", ok, wait, err)
		}
	})
}

// TestSessionSlotsFollowTakeOver: a session that moves to another node
// (hand-over, then a claim) keeps its one slot; the old owner, which may
// no longer change its state, cannot free it, and the new owner's end
// does.
func TestSessionSlotsFollowTakeOver(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		base := open(t)
		a, b := base.ForNode("a"), base.ForNode("b")
		now := time.Now()
		if ok, err := a.ReserveSessionSlot(ctx, "k", "pending_1", "", 1); err != nil || !ok {
			t.Fatalf("reserve: %v %v", ok, err)
		}
		var node string
		if err := base.DB().QueryRowContext(ctx, `SELECT node FROM session_slots WHERE session_id = 'pending_1'`).Scan(&node); err != nil || node != "a" {
			t.Fatalf("the reservation names node %q (%v), want the handle's, a", node, err)
		}
		if err := a.InsertSession(ctx, SessionRow{ID: "sess_1", KeyID: "k", Language: "bash", State: "running", Network: "{}", CreatedAt: now, LastUsedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := a.BindSessionSlot(ctx, "k", "pending_1", "sess_1"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.ReleaseSessions(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := b.ClaimSession(ctx, "sess_1", now); err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		if n, err := b.SessionSlots(ctx, "k"); err != nil || n != 1 {
			t.Fatalf("after the take-over: %d slots, %v; want 1", n, err)
		}
		if err := a.SetSessionState(ctx, "sess_1", "ended", "idle", true); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("old owner ends the session: %v, want ErrNotOwner", err)
		}
		if n, err := b.SessionSlots(ctx, "k"); err != nil || n != 1 {
			t.Fatalf("after the old owner's refused end: %d slots, %v; want 1", n, err)
		}
		if err := b.SetSessionState(ctx, "sess_1", "ended", "deleted", true); err != nil {
			t.Fatal(err)
		}
		if n, err := a.SessionSlots(ctx, "k"); err != nil || n != 0 {
			t.Fatalf("after the new owner's end: %d slots, %v; want 0", n, err)
		}
	})
}

// TestReleasePendingSlots: a node starting again drops the reservations
// its previous process left pending, and no one else's; a PostgreSQL
// handle of no node name drops none.
func TestReleasePendingSlots(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		base := open(t)
		a, b := base.ForNode("a"), base.ForNode("b")
		now := time.Now()
		for _, r := range []struct {
			st   *Store
			slot string
		}{{a, "pending_a"}, {b, "pending_b"}, {base, "pending_single"}, {a, "pending_a_bound"}} {
			if ok, err := r.st.ReserveSessionSlot(ctx, "k", r.slot, "", 9); err != nil || !ok {
				t.Fatalf("reserve %s: %v %v", r.slot, ok, err)
			}
		}
		if err := a.InsertSession(ctx, SessionRow{ID: "sess_a", KeyID: "k", Language: "bash", State: "running", Network: "{}", CreatedAt: now, LastUsedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := a.BindSessionSlot(ctx, "k", "pending_a_bound", "sess_a"); err != nil {
			t.Fatal(err)
		}
		if n, err := a.ReleasePendingSlots(ctx); err != nil || n != 1 {
			t.Fatalf("node a: released %d, %v; want its one pending", n, err)
		}
		want := int64(1) // the single node's
		if base.Dialect() == Postgres {
			want = 0
		}
		if n, err := base.ReleasePendingSlots(ctx); err != nil || n != want {
			t.Fatalf("no node name: released %d, %v; want %d", n, err, want)
		}
		if got, err := base.SessionSlots(ctx, "k"); err != nil || got != 2+int(1-want) {
			t.Fatalf("left: %d slots, %v; want b's pending, a's bound slot (and the unnamed one on PostgreSQL)", got, err)
		}
	})
}
