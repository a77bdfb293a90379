package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// InstallRow is one package put into a session by a successful install.
type InstallRow struct {
	SessionID string
	KeyID     string
	Manager   string // pip, npm
	Name      string
	Version   string
	Filename  string
	SHA256    string
	// OSVSnapshot is the snapshot the mirror had judged the artifact
	// against when it was installed.
	OSVSnapshot string
	InstalledAt time.Time
}

// InsertInstalls records the packages of one install in one transaction.
func (s *Store) InsertInstalls(ctx context.Context, rows []InstallRow) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("starting install record: %w", err)
	}
	defer tx.Rollback()
	for _, r := range rows {
		if _, err := tx.ExecContext(ctx, `INSERT INTO session_installs(session_id, key_id, manager, name, version, filename, sha256, osv_snapshot, installed_at)
			VALUES (?,?,?,?,?,?,?,?,?)`, r.SessionID, r.KeyID, r.Manager, r.Name, r.Version, r.Filename, r.SHA256, r.OSVSnapshot, ms(r.InstalledAt)); err != nil {
			return fmt.Errorf("recording install of %s: %w", r.Filename, err)
		}
	}
	return tx.Commit()
}

// SessionInstalls returns what was installed into a session, oldest
// first; a file installed again appears once, with its latest install.
func (s *Store) SessionInstalls(ctx context.Context, sessionID string) ([]InstallRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT session_id, key_id, manager, name, version, filename, sha256, osv_snapshot, installed_at
		FROM session_installs WHERE id IN (SELECT MAX(id) FROM session_installs WHERE session_id=? GROUP BY manager, filename, sha256) ORDER BY id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("reading installs of %s: %w", sessionID, err)
	}
	return scanInstalls(rows)
}

// RecentSessions returns the latest limit sessions of every key, live or
// ended, newest first (the operator console).
func (s *Store) RecentSessions(ctx context.Context, limit int) ([]SessionRow, error) {
	return s.RecentSessionsPage(ctx, 0, limit)
}

// RecentSessionsPage is RecentSessions after skipping the offset newest:
// one page of the list.
func (s *Store) RecentSessionsPage(ctx context.Context, offset, limit int) ([]SessionRow, error) {
	return s.querySessions(ctx, `SELECT `+sessionCols+` FROM sessions ORDER BY created_at DESC, id LIMIT ? OFFSET ?`, limit, max(offset, 0))
}

// scanInstalls reads the rows of a query that selects session_installs'
// columns in InstallRow's order, and closes them.
func scanInstalls(rows *sql.Rows) ([]InstallRow, error) {
	defer rows.Close()
	out := []InstallRow{}
	for rows.Next() {
		var r InstallRow
		var at int64
		if err := rows.Scan(&r.SessionID, &r.KeyID, &r.Manager, &r.Name, &r.Version, &r.Filename, &r.SHA256, &r.OSVSnapshot, &at); err != nil {
			return nil, fmt.Errorf("reading install: %w", err)
		}
		r.InstalledAt = fromMS(at)
		out = append(out, r)
	}
	return out, rows.Err()
}
