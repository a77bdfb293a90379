package store

import (
	"context"
	"testing"
	"time"
)

// Usage is never dropped: the request that fills a batch writes it at
// once, the rest is written on Close, and the rows add up exactly.
func TestUsageWriterNeverDrops(t *testing.T) { eachBackend(t, testUsageWriterNeverDrops) }

func testUsageWriterNeverDrops(t *testing.T, open opener) {
	t.Parallel()
	st := open(t)
	w := NewUsageWriter(st, time.Hour, discardLog())
	now := time.Now()
	for range usageBatch {
		w.Record(UsageRow{KeyID: "k1", Route: "POST /v1/execute", Status: 200, BytesIn: 1, At: now})
	}
	// The last Record wrote the full batch itself, before returning.
	if got := totalRequests(t, st, "k1", now); got != usageBatch {
		t.Fatalf("after a full batch: %d requests recorded, want %d", got, usageBatch)
	}
	for range 10 {
		w.Record(UsageRow{KeyID: "k1", Route: "POST /v1/execute", Status: 200, BytesIn: 1, At: now})
	}
	w.Close()
	w.Close() // again: nothing
	if got := totalRequests(t, st, "k1", now); got != usageBatch+10 {
		t.Fatalf("after Close: %d requests recorded, want %d", got, usageBatch+10)
	}
}

func totalRequests(t *testing.T, st *Store, key string, at time.Time) int64 {
	t.Helper()
	tots, err := st.UsageTotals(context.Background(), key, at.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, u := range tots {
		n += u.Requests
	}
	return n
}
