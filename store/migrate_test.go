package store

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestNodesStartingTogetherMigrateOnce: handles opened at once on a fresh
// database (nodes starting together) all succeed and every migration is
// recorded once.
func TestNodesStartingTogetherMigrateOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		var wg sync.WaitGroup
		stores := make([]*Store, 6)
		for i := range stores {
			wg.Add(1)
			go func() { defer wg.Done(); stores[i] = open(t) }()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		var n, distinct, top int
		err := stores[0].DB().QueryRowContext(context.Background(), `SELECT COUNT(*), COUNT(DISTINCT v), MAX(v) FROM schema_version`).Scan(&n, &distinct, &top)
		if err != nil || n != len(migrations) || distinct != n || top != len(migrations) {
			t.Fatalf("schema_version: %d rows, %d distinct, max %d (%v); want %d once each", n, distinct, top, err, len(migrations))
		}
	})
}

// TestMirrorTablesMoveIntoMigrations: a SQLite file whose mirror tables
// the mirror made itself, before its latest columns, at schema version 6,
// opens with its rows kept, the missing columns added and the generation
// trigger working.
func TestMirrorTablesMoveIntoMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sandboxapi.db")
	st, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `ALTER TABLE mirror_artifacts DROP COLUMN stripped;
		ALTER TABLE mirror_artifacts DROP COLUMN dependencies; ALTER TABLE mirror_artifacts DROP COLUMN published_at;
		DROP TRIGGER session_slots_follow; DROP TRIGGER session_slots_follow_delete;
		DROP TABLE session_slots; DROP TABLE quota_keys; DROP TABLE rate_buckets;
		DROP TABLE nodes; DROP INDEX sessions_node_state; ALTER TABLE sessions DROP COLUMN node; ALTER TABLE executions DROP COLUMN node;
		DELETE FROM schema_version WHERE v > 6;
		INSERT INTO mirror_artifacts(manager,name_key,name,version,filename,sha256,status,created_at,updated_at)
		VALUES ('npm','old','old','1.0.0','old-1.0.0.tgz','ab','admitted',1,1)`); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for i := 0; i < 2; i++ { // and again: a no-op
		st, err = Open(ctx, path)
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		var name, stripped, deps string
		var published, gen0, gen1 int64
		if err := st.DB().QueryRowContext(ctx, `SELECT name, stripped, dependencies, published_at FROM mirror_artifacts`).Scan(&name, &stripped, &deps, &published); err != nil ||
			name != "old" || stripped != "[]" || deps != "{}" || published != 0 {
			t.Fatalf("open %d: old row %q %q %q %d, %v", i, name, stripped, deps, published, err)
		}
		st.DB().QueryRowContext(ctx, `SELECT generation FROM mirror_state`).Scan(&gen0)
		if _, err := st.DB().ExecContext(ctx, `UPDATE mirror_artifacts SET version='1.0.1'`); err != nil {
			t.Fatal(err)
		}
		st.DB().QueryRowContext(ctx, `SELECT generation FROM mirror_state`).Scan(&gen1)
		if gen1 != gen0+1 {
			t.Fatalf("open %d: generation %d -> %d after an update", i, gen0, gen1)
		}
		if _, err := st.ReserveSessionSlot(ctx, "k", "s", "", 1); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
}

// TestMirrorGenerationTrigger: on both engines, every insert, update and
// delete of a catalogue row bumps the generation the mirror's caches poll.
func TestMirrorGenerationTrigger(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		t.Parallel()
		ctx := context.Background()
		st := open(t)
		gen := func() int64 {
			var g int64
			if err := st.DB().QueryRowContext(ctx, `SELECT generation FROM mirror_state WHERE id = 1`).Scan(&g); err != nil {
				t.Fatal(err)
			}
			return g
		}
		for i, q := range []string{
			`INSERT INTO mirror_artifacts(manager,name_key,name,version,filename,sha256,status,created_at,updated_at) VALUES ('pip','a','a','1','a-1.whl','ab','admitted',1,1)`,
			`UPDATE mirror_artifacts SET status='removed'`,
			`DELETE FROM mirror_artifacts`,
		} {
			before := gen()
			if _, err := st.DB().ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
			if after := gen(); after != before+1 {
				t.Fatalf("statement %d: generation %d -> %d", i, before, after)
			}
		}
	})
}

// TestRecentSessions lists sessions newest first with every column (it
// used to select fewer columns than it scanned, and failed).
func TestRecentSessions(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		t.Parallel()
		ctx := context.Background()
		st := open(t)
		t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		for i, id := range []string{"a", "b", "c"} {
			at := t0.Add(time.Duration(i) * time.Minute)
			if err := st.InsertSession(ctx, SessionRow{ID: id, KeyID: "k", Language: "python", State: "running", Network: "{}",
				IdleTTL: time.Minute, CreatedAt: at, LastUsedAt: at, DiskBytes: int64(i), ParentID: "p"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.SetSessionHibernated(ctx, "b", t0.Add(time.Hour), t0); err != nil {
			t.Fatal(err)
		}
		got, err := st.RecentSessions(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].ID != "c" || got[1].ID != "b" || got[1].State != "hibernated" || !got[1].HibernatedAt.Equal(t0.Add(time.Hour)) ||
			got[0].DiskBytes != 2 || got[0].ParentID != "p" || got[0].IdleTTL != time.Minute {
			t.Fatalf("recent sessions: %+v", got)
		}
	})
}
