// Package store persists rows and holds no business rules. It runs on the
// embedded SQLite file (modernc.org/sqlite, pure Go, so the binary stays
// static) or, for many nodes, on PostgreSQL (github.com/jackc/pgx/v5), with
// the same migrations and queries (see dialect.go). A *Store is safe for
// concurrent use.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite" // registers the "sqlite" driver
)

// ErrNotFound is returned when a row does not exist.
var ErrNotFound = errors.New("not found")

// Store wraps one database: the embedded SQLite file or a PostgreSQL
// database shared by many nodes.
type Store struct {
	db      *sql.DB
	dialect Dialect
	// node is the cluster node this handle writes for (ForNode): session
	// state changes apply only to sessions it owns.
	node string
	// rateTake is TakeRateToken's statement, prepared once: it runs on
	// every authenticated request.
	rateTake *sql.Stmt
	// rateDB is the pool rateTake runs on: db itself on SQLite; on
	// PostgreSQL a small pool of its own whose commits do not wait for
	// the WAL flush (synchronous_commit=off, see openPostgresRate).
	rateDB *sql.DB
}

// Open opens (creating if needed) the SQLite database at path and applies
// the schema.
func Open(ctx context.Context, path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating store folder: %w", err)
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	return open(ctx, db, db, SQLite)
}

// OpenURL opens the store that url names: empty is the SQLite file at
// sqlitePath (Open); postgres:// or postgresql:// is a PostgreSQL
// database, migrated on open (nodes starting together migrate it once).
func OpenURL(ctx context.Context, url, sqlitePath string) (*Store, error) {
	switch {
	case url == "":
		return Open(ctx, sqlitePath)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		db, err := openPostgres(url)
		if err != nil {
			return nil, fmt.Errorf("opening store: %w", err)
		}
		rateDB, err := openPostgresRate(url)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("opening store: %w", err)
		}
		return open(ctx, db, rateDB, Postgres)
	default:
		return nil, fmt.Errorf("%w: store url must be empty or postgres://...", ErrBadURL)
	}
}

// ErrBadURL is returned by OpenURL for a URL of an unknown kind.
var ErrBadURL = errors.New("unsupported store url")

// sqliteBusy reports whether err is SQLite's "database is locked"
// (SQLITE_BUSY, extended codes included).
func sqliteBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqliteBusyCode
}

// sqliteBusyCode is SQLITE_BUSY.
const sqliteBusyCode = 5

// open migrates db and prepares the rate statement on rateDB (db, or a
// pool of its own on the same database). On error both are closed.
func open(ctx context.Context, db, rateDB *sql.DB, d Dialect) (*Store, error) {
	s := &Store{db: db, rateDB: rateDB, dialect: d}
	closeAll := func() {
		db.Close()
		if rateDB != db {
			rateDB.Close()
		}
	}
	err := s.migrate(ctx)
	// Processes opening one new SQLite file together can find it locked
	// while another sets it up (WAL mode, the schema table), which SQLite
	// reports at once rather than after its busy timeout: try again,
	// for about two seconds in all.
	for delay := 10 * time.Millisecond; err != nil && d == SQLite && sqliteBusy(err) && delay <= time.Second; delay *= 2 {
		select {
		case <-ctx.Done():
			closeAll()
			return nil, err
		case <-time.After(delay):
		}
		err = s.migrate(ctx)
	}
	if err != nil {
		closeAll()
		return nil, err
	}
	if s.rateTake, err = rateDB.PrepareContext(ctx, rateTakeQuery(d)); err != nil {
		closeAll()
		return nil, fmt.Errorf("preparing the rate statement: %w", err)
	}
	return s, nil
}

// DB exposes the handle for packages that keep their own rows (the
// mirror). Queries take ? placeholders on both engines.
func (s *Store) DB() *sql.DB { return s.db }

// Dialect reports the engine behind the store.
func (s *Store) Dialect() Dialect { return s.dialect }

// ForNode returns a handle on the same database that acts for the cluster
// node name: sessions it inserts are owned by name, and changes of a
// session's state apply only while name still owns it (ErrNotOwner
// otherwise), so a node that lost its lease cannot overwrite the state of
// a session another node took over. The zero name is a single node.
// Closing either handle closes both.
func (s *Store) ForNode(name string) *Store {
	cp := *s
	cp.node = name
	return &cp
}

// Node is the node name ForNode gave ("" for a single node).
func (s *Store) Node() string { return s.node }

// Close closes the database.
func (s *Store) Close() error {
	if s.rateTake != nil {
		s.rateTake.Close()
	}
	if s.rateDB != nil && s.rateDB != s.db {
		s.rateDB.Close()
	}
	return s.db.Close()
}

// migration is one schema step. sqlite is the statement for SQLite;
// postgres is PostgreSQL's, or empty for pgSchema(sqlite); fix, when set,
// runs after the statement on SQLite (files made before the step existed).
type migration struct {
	sqlite, postgres string
	fix              func(context.Context, *sql.Tx) error
}

func (m migration) text(d Dialect) string {
	if d == SQLite {
		return m.sqlite
	}
	if m.postgres != "" {
		return m.postgres
	}
	return pgSchema(m.sqlite)
}

// migrations are applied in order; index i brings the schema to version i+1.
var migrations = []migration{
	{sqlite: `CREATE TABLE sessions (
		id TEXT PRIMARY KEY,
		key_id TEXT NOT NULL DEFAULT '',
		language TEXT NOT NULL,
		state TEXT NOT NULL,
		network TEXT NOT NULL DEFAULT '{}',
		idle_ttl_ms INTEGER NOT NULL,
		created_at INTEGER NOT NULL,
		last_used_at INTEGER NOT NULL,
		ended_at INTEGER,
		end_reason TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX sessions_key_state ON sessions(key_id, state);
	CREATE TABLE executions (
		id TEXT PRIMARY KEY,
		session_id TEXT NOT NULL DEFAULT '',
		key_id TEXT NOT NULL DEFAULT '',
		language TEXT NOT NULL,
		state TEXT NOT NULL,
		status TEXT NOT NULL DEFAULT '',
		exit_code INTEGER,
		duration_ms INTEGER NOT NULL DEFAULT 0,
		started_at INTEGER NOT NULL,
		ended_at INTEGER
	);
	CREATE INDEX executions_session ON executions(session_id);`},
	{sqlite: `CREATE TABLE api_keys (
		id TEXT PRIMARY KEY,
		name TEXT NOT NULL,
		plan TEXT NOT NULL,
		hash TEXT NOT NULL UNIQUE,
		created_at INTEGER NOT NULL,
		revoked_at INTEGER
	);
	CREATE TABLE usage (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		key_id TEXT NOT NULL,
		route TEXT NOT NULL,
		status INTEGER NOT NULL,
		duration_ms INTEGER NOT NULL,
		bytes_in INTEGER NOT NULL,
		bytes_out INTEGER NOT NULL,
		exec_ms INTEGER NOT NULL,
		at INTEGER NOT NULL
	);
	CREATE INDEX usage_key_at ON usage(key_id, at);`},
	{sqlite: `CREATE TABLE egress_decisions (
		id INTEGER PRIMARY KEY,
		session_id TEXT NOT NULL,
		key_id TEXT NOT NULL DEFAULT '',
		time INTEGER NOT NULL,
		mode TEXT NOT NULL,
		host TEXT NOT NULL,
		port INTEGER NOT NULL,
		addr TEXT NOT NULL DEFAULT '',
		outcome TEXT NOT NULL,
		reason TEXT NOT NULL DEFAULT '',
		bytes_up INTEGER NOT NULL DEFAULT 0,
		bytes_down INTEGER NOT NULL DEFAULT 0,
		duration_ms INTEGER NOT NULL DEFAULT 0
	);
	CREATE INDEX egress_decisions_session_time ON egress_decisions(session_id, time);
	CREATE INDEX egress_decisions_time ON egress_decisions(time);`},
	// A row may stand for several decisions (egress.Decision.Count):
	// repeats of one refusal, or a summary of those over the audit cap.
	{sqlite: `ALTER TABLE egress_decisions ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
	ALTER TABLE egress_decisions ADD COLUMN last_time INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE egress_decisions ADD COLUMN summary INTEGER NOT NULL DEFAULT 0;`},
	// Durable sessions: when a session was hibernated, its home's size
	// (the disk budget) and the session it was forked from.
	{sqlite: `ALTER TABLE sessions ADD COLUMN hibernated_at INTEGER;
	ALTER TABLE sessions ADD COLUMN disk_bytes INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE sessions ADD COLUMN parent_id TEXT NOT NULL DEFAULT '';`},
	// Installs into sessions (SBOMs) and operator keys (the console).
	{sqlite: `CREATE TABLE IF NOT EXISTS session_installs (
		id INTEGER PRIMARY KEY,
		session_id TEXT NOT NULL,
		key_id TEXT NOT NULL DEFAULT '',
		manager TEXT NOT NULL,
		name TEXT NOT NULL,
		version TEXT NOT NULL,
		filename TEXT NOT NULL,
		sha256 TEXT NOT NULL,
		osv_snapshot TEXT NOT NULL DEFAULT '',
		installed_at INTEGER NOT NULL
	);
	CREATE INDEX IF NOT EXISTS session_installs_session ON session_installs(session_id, id);
	ALTER TABLE api_keys ADD COLUMN kind TEXT NOT NULL DEFAULT 'client';`},
	// The mirror's catalogue, audit and OSV snapshots. Its tables were
	// made by the mirror itself before: IF NOT EXISTS keeps those files.
	{sqlite: mirrorTables + mirrorTriggersSQLite, postgres: pgSchema(mirrorTables) + mirrorTriggersPostgres, fix: addMirrorColumns},
	// Cluster-wide quotas: plan session slots and per-key rate buckets.
	{sqlite: `CREATE TABLE IF NOT EXISTS quota_keys (key_id TEXT PRIMARY KEY);
	CREATE TABLE IF NOT EXISTS session_slots (
		key_id TEXT NOT NULL,
		session_id TEXT NOT NULL,
		node TEXT NOT NULL DEFAULT '',
		reserved_at INTEGER NOT NULL,
		PRIMARY KEY (key_id, session_id)
	);
	CREATE INDEX IF NOT EXISTS session_slots_session ON session_slots(session_id);
	CREATE TABLE IF NOT EXISTS rate_buckets (
		key_id TEXT PRIMARY KEY,
		token_units INTEGER NOT NULL,
		last_ms INTEGER NOT NULL
	);`},
	// Cluster mode: the nodes sharing this store with their leases, and the
	// node that owns each session and runs each execution ('' is a single
	// node, or a session handed over and free to claim).
	{sqlite: `CREATE TABLE IF NOT EXISTS nodes (
		name TEXT PRIMARY KEY,
		url TEXT NOT NULL,
		epoch INTEGER NOT NULL,
		capacity INTEGER NOT NULL,
		free INTEGER NOT NULL,
		draining INTEGER NOT NULL DEFAULT 0,
		started_at INTEGER NOT NULL,
		renewed_at INTEGER NOT NULL,
		lease_until INTEGER NOT NULL
	);
	ALTER TABLE sessions ADD COLUMN node TEXT NOT NULL DEFAULT '';
	ALTER TABLE executions ADD COLUMN node TEXT NOT NULL DEFAULT '';
	CREATE INDEX IF NOT EXISTS sessions_node_state ON sessions(node, state);`},
	// Session slots follow their sessions (quota.go): a slot is a pending
	// reservation until bound to its session's row, and goes in the very
	// statement that moves that row out of the live states. Sessions
	// already live get their slots.
	// A rate bucket's row also says whether its latest take got a token
	// (TakeRateToken is one upsert). (SQLite has no ADD COLUMN IF NOT
	// EXISTS: addSlotBound adds the columns and backfills.)
	{sqlite: slotsEndTriggerSQLite, fix: addSlotBound,
		postgres: `ALTER TABLE session_slots ADD COLUMN IF NOT EXISTS bound BIGINT NOT NULL DEFAULT 0;
	ALTER TABLE rate_buckets ADD COLUMN IF NOT EXISTS granted BIGINT NOT NULL DEFAULT 0;
	` + slotsEndTriggerPostgres + `
	` + slotsBackfill},
	// An egress decision says whether the proxy added a session
	// credential on its connection (never which value). (SQLite has no ADD
	// COLUMN IF NOT EXISTS: addEgressCredential adds it.)
	{sqlite: `SELECT 1;`, fix: addEgressCredential,
		postgres: `ALTER TABLE egress_decisions ADD COLUMN IF NOT EXISTS credential BIGINT NOT NULL DEFAULT 0;`},
	// A session keeps the version of its language it was created with (the
	// series of the runtimes file, "22"; empty: the default of the day).
	// (SQLite has no ADD COLUMN IF NOT EXISTS: addRuntimeVersion adds it.)
	{sqlite: `SELECT 1`, fix: addRuntimeVersion,
		postgres: `ALTER TABLE sessions ADD COLUMN IF NOT EXISTS runtime_version TEXT NOT NULL DEFAULT '';`},
	// Migration 13 (issue 24, kernels): a session says whether its executes run as cells of
	// a kernel, so a restart adopts it as a kernel session.
	{sqlite: `SELECT 1`, fix: addSessionKernel,
		postgres: `ALTER TABLE sessions ADD COLUMN IF NOT EXISTS kernel BIGINT NOT NULL DEFAULT 0;`},
	// Migration 14 (issue 24): live state. A
	// session whose sandbox holds memory (live) hibernates into a runsc
	// checkpoint beside its home: the image's path (relative to the homes
	// folder; empty: none), its size on disk (counted against max_disk)
	// the runsc that wrote it (another runsc cannot read it) and the digest
	// of the state runsc parses on restore.
	// (SQLite has no ADD COLUMN IF NOT EXISTS: addLiveColumns adds them.)
	{sqlite: `SELECT 1`, fix: addLiveColumns,
		postgres: `ALTER TABLE sessions ADD COLUMN IF NOT EXISTS live BIGINT NOT NULL DEFAULT 0;
	ALTER TABLE sessions ADD COLUMN IF NOT EXISTS checkpoint_path TEXT NOT NULL DEFAULT '';
	ALTER TABLE sessions ADD COLUMN IF NOT EXISTS checkpoint_bytes BIGINT NOT NULL DEFAULT 0;
	ALTER TABLE sessions ADD COLUMN IF NOT EXISTS checkpoint_runsc TEXT NOT NULL DEFAULT '';
	ALTER TABLE sessions ADD COLUMN IF NOT EXISTS checkpoint_digest TEXT NOT NULL DEFAULT '';`},
	// Migration 15 (issue 25): what the
	// E2B adapter keeps of its sandboxes (store/e2b.go), so that metadata,
	// env vars and access tokens survive a restart and serve every node.
	{sqlite: `CREATE TABLE IF NOT EXISTS e2b_sandboxes (
		id TEXT PRIMARY KEY,
		template TEXT NOT NULL,
		metadata TEXT NOT NULL DEFAULT '{}',
		sealed_env TEXT NOT NULL DEFAULT '',
		token_hash TEXT NOT NULL,
		sealed_token TEXT NOT NULL,
		sealed_key TEXT NOT NULL,
		end_at INTEGER NOT NULL,
		created_at INTEGER NOT NULL
	);`},
}

// migrationLock is the PostgreSQL advisory lock key under which a node
// migrates, so that nodes starting together migrate once.
const migrationLock = 0x73616e64626f78 // "sandbox"

func (s *Store) migrate(ctx context.Context) error {
	if s.dialect == SQLite {
		if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (v INTEGER NOT NULL)`); err != nil {
			return fmt.Errorf("creating schema table: %w", err)
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("starting migration: %w", err)
	}
	defer tx.Rollback()
	if s.dialect == Postgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(?)`, int64(migrationLock)); err != nil {
			return fmt.Errorf("locking for migration: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (v BIGINT NOT NULL)`); err != nil {
			return fmt.Errorf("creating schema table: %w", err)
		}
	}
	var v int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(v),0) FROM schema_version`).Scan(&v); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	for i := v; i < len(migrations); i++ {
		m := migrations[i]
		if _, err := tx.ExecContext(ctx, m.text(s.dialect)); err != nil {
			return fmt.Errorf("applying migration %d: %w", i+1, err)
		}
		if m.fix != nil && s.dialect == SQLite {
			if err := m.fix(ctx, tx); err != nil {
				return fmt.Errorf("applying migration %d: %w", i+1, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version(v) VALUES (?)`, i+1); err != nil {
			return fmt.Errorf("recording migration %d: %w", i+1, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing migration: %w", err)
	}
	return nil
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }
