package store

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// TestStoreOutageAndRecovery stops a real PostgreSQL (pg_ctl stop -m fast)
// under an open store and starts it again: a query running at the stop,
// the key lookup, the rate bucket and Ping fail with ErrUnavailable at
// once (no hang); the usage and egress writers keep what they are given
// meanwhile; after the restart the same handle answers again (no reopen)
// and every kept row is written, exactly once.
func TestStoreOutageAndRecovery(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	st, err := OpenURL(ctx, pg.URL(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	if err := st.InsertKey(ctx, KeyRow{ID: "k1", Name: "one", Plan: "FREE", Hash: "h1", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	usage := NewUsageWriter(st, 50*time.Millisecond, log)
	defer usage.Close()
	egress := NewEgressWriter(ctx, st, 50*time.Millisecond, log)
	defer egress.Close()
	record := func(n int) {
		for range n {
			usage.Record(UsageRow{KeyID: "k1", Route: "GET /v1/runtimes", Status: 200, At: now})
		}
		egress.Record(EgressRow{SessionID: "s1", Time: now, Mode: "connect", Host: "example.com", Port: 443, Outcome: "allow"})
	}
	record(10)
	usage.Flush(ctx)
	if got := totalRequests(t, st, "k1", now); got != 10 {
		t.Fatalf("before the outage: %d requests, want 10", got)
	}

	// A query running when the server stops ends with admin_shutdown.
	running := make(chan error, 1)
	go func() {
		_, err := st.DB().ExecContext(ctx, "SELECT pg_sleep(30)")
		running <- err
	}()
	time.Sleep(300 * time.Millisecond) // let it reach the server
	pg.Stop(t)
	select {
	case err := <-running:
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("query cut by the stop: %v, want ErrUnavailable", err)
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code != "57P01" {
			t.Errorf("query cut by the stop: SQLSTATE %s, want 57P01 admin_shutdown", pe.Code)
		}
		t.Logf("query cut by the stop: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the query running at the stop did not end")
	}

	for _, tc := range []struct {
		name string
		call func(context.Context) error
	}{
		{name: "key lookup", call: func(ctx context.Context) error { _, err := st.KeyByHash(ctx, "h1"); return err }},
		{name: "rate token", call: func(ctx context.Context) error {
			_, _, err := st.TakeRateToken(ctx, "k1", 60, time.Now())
			return err
		}},
		{name: "ping", call: st.Ping},
		{name: "usage totals", call: func(ctx context.Context) error { _, err := st.UsageTotals(ctx, "k1", now); return err }},
	} {
		start := time.Now()
		err := tc.call(ctx)
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s while down: %v, want ErrUnavailable", tc.name, err)
		}
		if d := time.Since(start); d > DefaultConnectTimeout {
			t.Errorf("%s while down took %v", tc.name, d)
		}
	}
	record(20)
	usage.Flush(ctx)                   // fails: the rows are kept
	time.Sleep(200 * time.Millisecond) // a few ticks of both writers fail too
	if s := logs.String(); !strings.Contains(s, "keeping usage") || !strings.Contains(s, "keeping egress decisions") {
		t.Errorf("no line says the writers keep their rows:\n%s", s)
	}

	pg.Start(t)
	if _, err := st.KeyByHash(ctx, "h1"); err != nil {
		t.Fatalf("key lookup after the restart: %v", err)
	}
	if err := st.Ping(ctx); err != nil {
		t.Fatalf("ping after the restart: %v", err)
	}
	usage.Flush(ctx)
	if got := totalRequests(t, st, "k1", now); got != 30 {
		t.Errorf("after the restart: %d requests recorded, want 30 (10 before, 20 during the outage)", got)
	}
	egress.Flush(ctx)
	rows, err := st.EgressDecisions(ctx, "s1", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Errorf("after the restart: %d egress decisions, want 2", len(rows))
	}
	if s := logs.String(); strings.Contains(s, "dropped") {
		t.Errorf("rows were dropped:\n%s", s)
	}
}

// TestWriterDropsCountedAtClose checks that rows a writer still holds for
// an unavailable store when it closes are counted in the log, not lost in
// silence.
func TestWriterDropsCountedAtClose(t *testing.T) {
	t.Parallel()
	var logs testenv.LogBuffer
	unavailable := func(context.Context, []int) error { return classify(context.DeadlineExceeded) }
	w := newBatchWriter(context.Background(), "things", unavailable, time.Hour, 4, 0, slog.New(slog.NewTextHandler(&logs, nil)))
	for i := range 10 {
		w.record(i) // the 4th write fails and no caller writes after it
	}
	w.close()
	s := logs.String()
	if !strings.Contains(s, "keeping things") || !strings.Contains(s, "things dropped: store unavailable when the writer closed") || !strings.Contains(s, "rows=10") {
		t.Fatalf("log:\n%s", s)
	}
}
