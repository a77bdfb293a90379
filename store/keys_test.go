package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRevokedKeyIsNotFound checks the key lifecycle on real SQLite: a
// revoked key no longer resolves, stays listed with its revocation time,
// and cannot be revoked twice.
func TestRevokedKeyIsNotFound(t *testing.T) { eachBackend(t, testRevokedKeyIsNotFound) }

func testRevokedKeyIsNotFound(t *testing.T, open opener) {
	t.Parallel()
	st := open(t)
	ctx := context.Background()
	created := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	for _, k := range []KeyRow{
		{ID: "k1", Name: "one", Plan: "PRO", Hash: "h1", CreatedAt: created},
		{ID: "k2", Name: "two", Plan: "BASIC", Hash: "h2", CreatedAt: created.Add(time.Second)},
	} {
		if err := st.InsertKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if k, err := st.KeyByHash(ctx, "h1"); err != nil || k.ID != "k1" || k.Plan != "PRO" || !k.CreatedAt.Equal(created) {
		t.Fatalf("before revoke: %+v, %v", k, err)
	}
	if err := st.RevokeKey(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.KeyByHash(ctx, "h1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoked key resolves: err = %v", err)
	}
	if _, err := st.KeyByHash(ctx, "h2"); err != nil {
		t.Fatalf("the other key: %v", err)
	}
	cases := []struct {
		name string
		id   string
	}{
		{name: "again", id: "k1"},
		{name: "unknown", id: "k9"},
		{name: "empty", id: ""},
		{name: "by hash instead of id", id: "h2"},
	}
	for _, tc := range cases {
		if err := st.RevokeKey(ctx, tc.id); !errors.Is(err, ErrNotFound) {
			t.Errorf("revoke %s (%q): err = %v, want ErrNotFound", tc.name, tc.id, err)
		}
	}
	keys, err := st.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].ID != "k2" || keys[1].ID != "k1" {
		t.Fatalf("list (newest first): %+v", keys)
	}
	if keys[1].RevokedAt.IsZero() || !keys[0].RevokedAt.IsZero() {
		t.Fatalf("revocation times: k1 %v, k2 %v", keys[1].RevokedAt, keys[0].RevokedAt)
	}
}

// TestUsageTotalsSumPerKeyDayRoute checks what metering adds up on real
// SQLite: per key, UTC day and route, the request and error counts, bytes,
// execution and wall time; one key's totals hold none of another's rows;
// and the rows survive reopening the store.
func TestUsageTotalsSumPerKeyDayRoute(t *testing.T) { eachBackend(t, testUsageTotalsSumPerKeyDayRoute) }

func testUsageTotalsSumPerKeyDayRoute(t *testing.T, open opener) {
	t.Parallel()
	st := open(t)
	ctx := context.Background()
	day1 := time.Date(2026, 3, 1, 23, 59, 0, 0, time.UTC)
	day2 := day1.Add(2 * time.Minute) // the next UTC day
	rows := []UsageRow{
		{KeyID: "a", Route: "POST /v1/execute", Status: 200, DurationMS: 40, BytesIn: 100, BytesOut: 300, ExecMS: 25, At: day1},
		{KeyID: "a", Route: "POST /v1/execute", Status: 429, DurationMS: 1, BytesIn: 90, BytesOut: 120, At: day1},
		{KeyID: "a", Route: "POST /v1/execute", Status: 200, DurationMS: 60, BytesIn: 10, BytesOut: 30, ExecMS: 50, At: day2},
		{KeyID: "a", Route: "GET /v1/sessions", Status: 500, DurationMS: 2, BytesOut: 80, At: day2},
		{KeyID: "b", Route: "POST /v1/execute", Status: 200, DurationMS: 7000, BytesIn: 5, BytesOut: 5, ExecMS: 6000, At: day1},
	}
	if err := st.InsertUsage(ctx, rows); err != nil {
		t.Fatal(err)
	}
	want := []UsageTotal{
		{KeyID: "a", Day: "2026-03-01", Route: "POST /v1/execute", Requests: 2, Errors: 1, BytesIn: 190, BytesOut: 420, ExecMS: 25, DurationMS: 41},
		{KeyID: "a", Day: "2026-03-02", Route: "GET /v1/sessions", Requests: 1, Errors: 1, BytesOut: 80, DurationMS: 2},
		{KeyID: "a", Day: "2026-03-02", Route: "POST /v1/execute", Requests: 1, BytesIn: 10, BytesOut: 30, ExecMS: 50, DurationMS: 60},
	}
	check := func(st *Store, key string, want []UsageTotal) {
		t.Helper()
		got, err := st.UsageTotals(ctx, key, day1.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("key %q: %d rows, want %d: %+v", key, len(got), len(want), got)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("key %q row %d:\n got %+v\nwant %+v", key, i, got[i], want[i])
			}
		}
	}
	check(st, "a", want)
	check(st, "b", []UsageTotal{{KeyID: "b", Day: "2026-03-01", Route: "POST /v1/execute", Requests: 1, BytesIn: 5, BytesOut: 5, ExecMS: 6000, DurationMS: 7000}})
	check(st, "nobody", nil)
	if got, _ := st.UsageTotals(ctx, "", day1.Add(-time.Hour)); len(got) != 4 {
		t.Fatalf("all keys: %d rows, want 4: %+v", len(got), got)
	}
	// since cuts by time: only day 2 remains.
	if got, _ := st.UsageTotals(ctx, "a", day2); len(got) != 2 || got[0].Day != "2026-03-02" {
		t.Fatalf("since day 2: %+v", got)
	}
	// A restart keeps the records.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	again := open(t)
	check(again, "a", want)
}
