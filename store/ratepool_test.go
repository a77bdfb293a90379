package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// On PostgreSQL the rate bucket's takes commit asynchronously on a pool of
// their own, and nothing else does: session slots, leases and ownership
// stay synchronous. A take is still seen at once by every other node.
func TestRatePoolOnlyIsAsynchronous(t *testing.T) {
	ctx := context.Background()
	open := openerFor(testenv.PostgresURL(t), "")
	st, other := open(t), open(t)
	var main, rate string
	if err := st.db.QueryRowContext(ctx, "SHOW synchronous_commit").Scan(&main); err != nil {
		t.Fatal(err)
	}
	if err := st.rateDB.QueryRowContext(ctx, "SHOW synchronous_commit").Scan(&rate); err != nil {
		t.Fatal(err)
	}
	if main != "on" || rate != "off" {
		t.Fatalf("synchronous_commit: main pool %q, rate pool %q; want on, off", main, rate)
	}
	now := time.Now()
	if ok, _, err := st.TakeRateToken(ctx, "k", 1, now); !ok || err != nil {
		t.Fatalf("first take: %v %v", ok, err)
	}
	// Asynchronous commit delays the flush, never visibility.
	if ok, wait, err := other.TakeRateToken(ctx, "k", 1, now); ok || err != nil || wait <= 0 {
		t.Fatalf("second take of a one-a-minute bucket on another node: %v %v %v", ok, wait, err)
	}
	lite := openerFor("", filepath.Join(t.TempDir(), "sandboxapi.db"))(t)
	if lite.rateDB != lite.db {
		t.Fatal("the SQLite store opened a second pool")
	}
}

// BenchmarkRateTakeCommit is one rate take on PostgreSQL with the main
// pool's synchronous commit against the rate pool's asynchronous one, side
// by side on one server of the benchmark's own with fsync on (the test
// server runs with fsync off, where the two cost the same). Run:
//
//	SANDBOXAPI_REQUIRE_POSTGRES=1 go test -run '^$' -bench BenchmarkRateTakeCommit -benchtime 2s -count 3 ./store
func BenchmarkRateTakeCommit(b *testing.B) {
	ctx := context.Background()
	st, err := OpenURL(ctx, testenv.StartDurablePostgres(b).URL(), "")
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	syncTake, err := st.db.PrepareContext(ctx, rateTakeQuery(Postgres))
	if err != nil {
		b.Fatal(err)
	}
	defer syncTake.Close()
	const perMinute = 1_000_000_000
	for _, c := range []struct {
		name string
		take func() error
	}{
		{"synchronous", func() error {
			var tokens, granted int64
			return syncTake.QueryRowContext(ctx, "k-sync", int64(perMinute-1)*tokenUnits, ms(time.Now()), int64(perMinute)*tokenUnits, int64(perMinute)).Scan(&tokens, &granted)
		}},
		{"asynchronous", func() error {
			_, _, err := st.TakeRateToken(ctx, "k-async", perMinute, time.Now())
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.take(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
