package store

import (
	"context"
	"database/sql"
	"fmt"
)

// mirrorTables are the package mirror's tables (package mirror reads and
// writes them through DB). The mirror made them itself before they moved
// here, hence IF NOT EXISTS: files that have them keep them.
const mirrorTables = `
CREATE TABLE IF NOT EXISTS mirror_artifacts (
	id INTEGER PRIMARY KEY,
	manager TEXT NOT NULL,
	name_key TEXT NOT NULL,
	name TEXT NOT NULL,
	version TEXT NOT NULL,
	filename TEXT NOT NULL,
	sha256 TEXT NOT NULL,
	integrity TEXT NOT NULL DEFAULT '',
	shasum TEXT NOT NULL DEFAULT '',
	size INTEGER NOT NULL DEFAULT 0,
	metadata_sha256 TEXT NOT NULL DEFAULT '',
	requires_python TEXT NOT NULL DEFAULT '',
	upstream_sha256 TEXT NOT NULL DEFAULT '',
	manifest TEXT NOT NULL DEFAULT '',
	status TEXT NOT NULL,
	reasons TEXT NOT NULL DEFAULT '[]',
	advisories TEXT NOT NULL DEFAULT '[]',
	accepted TEXT NOT NULL DEFAULT '[]',
	osv_snapshot TEXT NOT NULL DEFAULT '',
	source TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	stripped TEXT NOT NULL DEFAULT '[]',
	dependencies TEXT NOT NULL DEFAULT '{}',
	published_at INTEGER NOT NULL DEFAULT 0,
	UNIQUE(manager, name_key, filename)
);
CREATE INDEX IF NOT EXISTS mirror_artifacts_name ON mirror_artifacts(manager, name_key, status);
CREATE INDEX IF NOT EXISTS mirror_artifacts_sha ON mirror_artifacts(sha256);
CREATE TABLE IF NOT EXISTS mirror_audit (
	id INTEGER PRIMARY KEY,
	at INTEGER NOT NULL,
	event TEXT NOT NULL,
	manager TEXT NOT NULL DEFAULT '',
	name TEXT NOT NULL DEFAULT '',
	version TEXT NOT NULL DEFAULT '',
	filename TEXT NOT NULL DEFAULT '',
	sha256 TEXT NOT NULL DEFAULT '',
	reason TEXT NOT NULL DEFAULT '',
	advisories TEXT NOT NULL DEFAULT '[]',
	osv_snapshot TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS mirror_state (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	generation INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS mirror_osv (
	id TEXT PRIMARY KEY,
	imported_at INTEGER NOT NULL,
	newest_modified INTEGER NOT NULL,
	records INTEGER NOT NULL,
	source TEXT NOT NULL DEFAULT '',
	current INTEGER NOT NULL DEFAULT 0
);
INSERT INTO mirror_state(id, generation) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
`

// Every change to the catalogue bumps mirror_state.generation, which the
// mirror polls to drop its cached indexes (on every node).
const mirrorTriggersSQLite = `
CREATE TRIGGER IF NOT EXISTS mirror_artifacts_gen_insert AFTER INSERT ON mirror_artifacts
BEGIN UPDATE mirror_state SET generation = generation + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS mirror_artifacts_gen_update AFTER UPDATE ON mirror_artifacts
BEGIN UPDATE mirror_state SET generation = generation + 1 WHERE id = 1; END;
CREATE TRIGGER IF NOT EXISTS mirror_artifacts_gen_delete AFTER DELETE ON mirror_artifacts
BEGIN UPDATE mirror_state SET generation = generation + 1 WHERE id = 1; END;`

const mirrorTriggersPostgres = `
CREATE OR REPLACE FUNCTION mirror_bump_generation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN UPDATE mirror_state SET generation = generation + 1 WHERE id = 1; RETURN NULL; END $$;
CREATE TRIGGER mirror_artifacts_gen AFTER INSERT OR UPDATE OR DELETE ON mirror_artifacts
FOR EACH ROW EXECUTE FUNCTION mirror_bump_generation();`

// addMirrorColumns gives a SQLite file whose mirror tables predate the
// stripped, dependencies and published_at columns those columns (SQLite
// has no ADD COLUMN IF NOT EXISTS).
func addMirrorColumns(ctx context.Context, tx *sql.Tx) error {
	have := map[string]bool{}
	rows, err := tx.QueryContext(ctx, `SELECT name FROM pragma_table_info('mirror_artifacts')`)
	if err != nil {
		return fmt.Errorf("reading mirror columns: %w", err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return fmt.Errorf("reading mirror columns: %w", err)
		}
		have[n] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading mirror columns: %w", err)
	}
	for _, c := range []struct{ name, def string }{
		{"stripped", `TEXT NOT NULL DEFAULT '[]'`},
		{"dependencies", `TEXT NOT NULL DEFAULT '{}'`},
		{"published_at", `INTEGER NOT NULL DEFAULT 0`},
	} {
		if have[c.name] {
			continue
		}
		if _, err := tx.ExecContext(ctx, `ALTER TABLE mirror_artifacts ADD COLUMN `+c.name+` `+c.def); err != nil {
			return fmt.Errorf("adding mirror column %s: %w", c.name, err)
		}
	}
	return nil
}
