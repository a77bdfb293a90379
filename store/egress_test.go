package store

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openTestStore(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sandboxapi.db")
	st, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, path
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func hosts(rows []EgressRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Host
	}
	return out
}

func TestEgressDecisionsInsertAndList(t *testing.T) { eachBackend(t, testEgressDecisionsInsertAndList) }

func testEgressDecisionsInsertAndList(t *testing.T, open opener) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if err := st.InsertSession(ctx, SessionRow{ID: "s1", KeyID: "k1", Language: "bash", State: "running", CreatedAt: t0, LastUsedAt: t0}); err != nil {
		t.Fatal(err)
	}
	// Out of time order (a tunnel is recorded when it closes, with its
	// start time), with a tie broken by insertion order.
	batch := []EgressRow{
		{SessionID: "s1", Time: t0.Add(3 * time.Second), Mode: "connect", Host: "c.test", Port: 443, Outcome: "deny", Reason: "not_allowed"},
		{SessionID: "s1", Time: t0.Add(1 * time.Second), Mode: "transparent", Host: "a.test", Port: 443, Addr: "192.0.2.7", Outcome: "allow",
			Reason: "allowed", BytesUp: 10, BytesDown: 2000, DurationMS: 1500},
		{SessionID: "s1", Time: t0.Add(2 * time.Second), Mode: "connect", Host: "b1.test", Port: 443, Outcome: "deny"},
		{SessionID: "s1", Time: t0.Add(2 * time.Second), Mode: "connect", Host: "b2.test", Port: 443, Outcome: "deny"},
		{SessionID: "s2", Time: t0, Mode: "connect", Host: "other.test", Port: 443, Outcome: "deny"},
		{SessionID: "gone", KeyID: "k9", Time: t0, Mode: "http", Host: "kept.test", Outcome: "deny"},
		{SessionID: "agg", Time: t0, Mode: "connect", Host: "r.test", Port: 443, Outcome: "deny", Reason: "not_allowed",
			Count: 812, Last: t0.Add(59 * time.Second)},
		{SessionID: "agg", Time: t0.Add(time.Second), Mode: "connect", Outcome: "deny", Reason: "audit cap reached: ...",
			Count: 4000, Last: t0.Add(58 * time.Second), Summary: true},
	}
	if err := st.InsertEgressDecisions(ctx, batch); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		session string
		limit   int
		want    []string
	}{
		{name: "oldest first", session: "s1", limit: 100, want: []string{"a.test", "b1.test", "b2.test", "c.test"}},
		{name: "limit keeps the latest", session: "s1", limit: 2, want: []string{"b2.test", "c.test"}},
		{name: "limit one", session: "s1", limit: 1, want: []string{"c.test"}},
		{name: "other session", session: "s2", limit: 100, want: []string{"other.test"}},
		{name: "no decisions", session: "nothing", limit: 100, want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := st.EgressDecisions(ctx, tt.session, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got == nil {
				t.Fatal("nil list")
			}
			if fmt.Sprint(hosts(got)) != fmt.Sprint(tt.want) {
				t.Fatalf("hosts = %v, want %v", hosts(got), tt.want)
			}
		})
	}

	got, err := st.EgressDecisions(ctx, "s1", 100)
	if err != nil {
		t.Fatal(err)
	}
	want := batch[1]
	want.KeyID = "k1" // from the session's row
	want.Count = 1    // a single decision
	if got[0] != want {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got[0], want)
	}
	agg, err := st.EgressDecisions(ctx, "agg", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(agg) != 2 || agg[0] != batch[len(batch)-2] || agg[1] != batch[len(batch)-1] {
		t.Fatalf("aggregate and summary rows round trip:\n got %+v\nwant %+v", agg, batch[len(batch)-2:])
	}
	if other, _ := st.EgressDecisions(ctx, "s2", 1); other[0].KeyID != "" {
		t.Fatalf("decision of a session without a row has key %q", other[0].KeyID)
	}
	if kept, _ := st.EgressDecisions(ctx, "gone", 1); kept[0].KeyID != "k9" {
		t.Fatalf("given key id replaced: %q", kept[0].KeyID)
	}
}

func TestPruneEgressDecisions(t *testing.T) { eachBackend(t, testPruneEgressDecisions) }

func testPruneEgressDecisions(t *testing.T, open opener) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	now := time.Now()
	cutoff := now.Add(-720 * time.Hour)
	// More old rows than one DELETE removes, so the loop is exercised.
	old := make([]EgressRow, 2*pruneChunk+3)
	for i := range old {
		old[i] = EgressRow{SessionID: "s1", Time: cutoff.Add(-time.Duration(i+1) * time.Minute), Mode: "connect", Host: "old.test", Outcome: "deny"}
	}
	fresh := []EgressRow{
		{SessionID: "s1", Time: cutoff.Add(time.Minute), Mode: "connect", Host: "fresh1.test", Outcome: "allow"},
		{SessionID: "s1", Time: now, Mode: "connect", Host: "fresh2.test", Outcome: "allow"},
	}
	if err := st.InsertEgressDecisions(ctx, append(old, fresh...)); err != nil {
		t.Fatal(err)
	}
	n, err := st.PruneEgressDecisions(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(old)) {
		t.Fatalf("pruned %d, want %d", n, len(old))
	}
	got, err := st.EgressDecisions(ctx, "s1", 10000)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(hosts(got)) != "[fresh1.test fresh2.test]" {
		t.Fatalf("left %v", hosts(got))
	}
	if n, err := st.PruneEgressDecisions(ctx, cutoff); err != nil || n != 0 {
		t.Fatalf("second prune: %d, %v", n, err)
	}
}

func TestEgressWriterFlushesOnClose(t *testing.T) { eachBackend(t, testEgressWriterFlushesOnClose) }

func testEgressWriterFlushesOnClose(t *testing.T, open opener) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	w := NewEgressWriter(ctx, st, time.Hour, discardLog()) // no tick during the test
	const n = egressBatch - 1                              // below the early-write threshold
	for i := range n {
		w.Record(EgressRow{SessionID: "s1", Time: time.Now(), Mode: "connect", Host: fmt.Sprintf("h%d.test", i), Outcome: "deny"})
	}
	if got, _ := st.EgressDecisions(ctx, "s1", 10000); len(got) != 0 {
		t.Fatalf("%d rows written before the tick or Close", len(got))
	}
	w.Close()
	got, err := st.EgressDecisions(ctx, "s1", 10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n || got[0].Host != "h0.test" || got[n-1].Host != fmt.Sprintf("h%d.test", n-1) {
		t.Fatalf("after Close: %d rows", len(got))
	}
	w.Record(EgressRow{SessionID: "s1", Time: time.Now(), Mode: "connect", Host: "late.test", Outcome: "deny"}) // dropped, no panic
	w.Close()
}

func TestEgressWriterWritesFullBatchBeforeTick(t *testing.T) {
	eachBackend(t, testEgressWriterWritesFullBatchBeforeTick)
}

func testEgressWriterWritesFullBatchBeforeTick(t *testing.T, open opener) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	w := NewEgressWriter(ctx, st, time.Hour, discardLog())
	defer w.Close()
	for i := range egressBatch {
		w.Record(EgressRow{SessionID: "s1", Time: time.Now(), Mode: "connect", Host: fmt.Sprintf("h%d.test", i), Outcome: "deny"})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := st.EgressDecisions(ctx, "s1", 10000)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == egressBatch {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows written", len(got), egressBatch)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEgressWriterFlush(t *testing.T) { eachBackend(t, testEgressWriterFlush) }

func testEgressWriterFlush(t *testing.T, open opener) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	w := NewEgressWriter(ctx, st, time.Hour, discardLog())
	defer w.Close()
	w.Record(EgressRow{SessionID: "s1", Time: time.Now(), Mode: "connect", Host: "a.test", Outcome: "allow"})
	w.Flush(ctx)
	if got, _ := st.EgressDecisions(ctx, "s1", 10); len(got) != 1 {
		t.Fatalf("after Flush: %d rows", len(got))
	}
}

// TestEgressMigrationUpgrades opens a store whose schema predates the
// egress table, as an existing installation's does.
func TestEgressMigrationUpgrades(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, path := openTestStore(t)
	if _, err := st.DB().ExecContext(ctx, `DROP TABLE egress_decisions;
		ALTER TABLE sessions DROP COLUMN hibernated_at; ALTER TABLE sessions DROP COLUMN disk_bytes; ALTER TABLE sessions DROP COLUMN parent_id;
		DROP TABLE session_installs; ALTER TABLE api_keys DROP COLUMN kind;
		DROP TABLE nodes; DROP INDEX sessions_node_state; ALTER TABLE sessions DROP COLUMN node; ALTER TABLE executions DROP COLUMN node;
		DELETE FROM schema_version WHERE v > 2`); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	var v int
	if err := st2.DB().QueryRowContext(ctx, `SELECT MAX(v) FROM schema_version`).Scan(&v); err != nil || v != len(migrations) {
		t.Fatalf("schema version %d (%v), want %d", v, err, len(migrations))
	}
	if err := st2.InsertEgressDecisions(ctx, []EgressRow{{SessionID: "s", Time: time.Now(), Mode: "connect", Host: "a.test", Outcome: "deny"}}); err != nil {
		t.Fatal(err)
	}
	rows, err := st2.DB().QueryContext(ctx, `EXPLAIN QUERY PLAN SELECT id FROM egress_decisions WHERE session_id = ? ORDER BY time DESC, id DESC LIMIT 5`, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if p := strings.Join(plan, "; "); !strings.Contains(p, "egress_decisions_session_time") || strings.Contains(p, "TEMP B-TREE") {
		t.Fatalf("listing a session's decisions: query plan %q, want the (session_id, time) index and no sort", p)
	}
}

// Rows written before the aggregation columns existed read as single
// decisions.
func TestEgressCountMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, path := openTestStore(t)
	if _, err := st.DB().ExecContext(ctx, `ALTER TABLE egress_decisions DROP COLUMN count;
		ALTER TABLE egress_decisions DROP COLUMN last_time; ALTER TABLE egress_decisions DROP COLUMN summary; ALTER TABLE egress_decisions DROP COLUMN credential;
		ALTER TABLE sessions DROP COLUMN hibernated_at; ALTER TABLE sessions DROP COLUMN disk_bytes; ALTER TABLE sessions DROP COLUMN parent_id;
		DROP TABLE session_installs; ALTER TABLE api_keys DROP COLUMN kind;
		DROP TABLE nodes; DROP INDEX sessions_node_state; ALTER TABLE sessions DROP COLUMN node; ALTER TABLE executions DROP COLUMN node;
		DELETE FROM schema_version WHERE v > 3;
		INSERT INTO egress_decisions(session_id, time, mode, host, port, outcome) VALUES ('old', 1000, 'connect', 'a.test', 443, 'deny')`); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	rows, err := st2.EgressDecisions(ctx, "old", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Count != 1 || !rows[0].Last.IsZero() || rows[0].Summary {
		t.Fatalf("old row after migration: %+v", rows)
	}
}
