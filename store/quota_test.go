package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
