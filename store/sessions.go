package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// SessionRow is one session as persisted.
type SessionRow struct {
	ID       string
	KeyID    string
	Language string
	// Version is the language's version as the runtimes file lists it
	// ("22"; empty: the default).
	Version    string
	State      sandbox.State
	Network    string // JSON
	IdleTTL    time.Duration
	CreatedAt  time.Time
	LastUsedAt time.Time
	EndedAt    time.Time
	EndReason  string
	// HibernatedAt is when the session was last hibernated (zero: never).
	HibernatedAt time.Time
	DiskBytes    int64  // size of its home image
	ParentID     string // the session it was forked from
	// Node owns the session: its sandbox runs there, and only there may
	// its state change ("" for a single node, or handed over to be claimed).
	Node string
	// Kernel: the session's executes run as cells of one long-lived
	// kernel ("kernel": true at create), kept across restarts so that a
	// session adopted again still runs cells (in a fresh kernel).
	Kernel bool
	// Live: the session's sandbox holds memory (a kernel, background
	// processes) that a plain restart would lose.
	Live bool
	// Checkpoint is the session's saved memory while it hibernates;
	// zero: none.
	Checkpoint Checkpoint
}

// Checkpoint is a runsc checkpoint image of a session's sandbox.
type Checkpoint struct {
	Path  string // relative to the homes folder ("<id>/checkpoint")
	Bytes int64  // its size on disk
	Runsc string // the runsc build that wrote it
	// Digest is the SHA-256 of the files the sandbox kernel parses on
	// restore (its state and the pages' index), checked before a restore.
	Digest string
}

// ErrNotOwner is returned by a session state change when the session is no
// longer owned by the handle's node (another node took it over).
var ErrNotOwner = errors.New("session is owned by another node")

// InsertSession records a new session, owned by the handle's node.
func (s *Store) InsertSession(ctx context.Context, r SessionRow) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO sessions(id, key_id, language, runtime_version, state, network, idle_ttl_ms, created_at, last_used_at, disk_bytes, parent_id, node, kernel)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`, r.ID, r.KeyID, r.Language, r.Version, string(r.State), r.Network, r.IdleTTL.Milliseconds(), ms(r.CreatedAt), ms(r.LastUsedAt), r.DiskBytes, r.ParentID, s.node, boolInt(r.Kernel))
	if err != nil {
		return fmt.Errorf("inserting session %s: %w", r.ID, err)
	}
	return nil
}

// SetSessionState moves a session the handle's node owns to state; ended
// states record when and why. A session another node owns is left alone
// (ErrNotOwner); one that does not exist is not an error.
func (s *Store) SetSessionState(ctx context.Context, id string, state sandbox.State, reason string, ended bool) error {
	var res sql.Result
	var err error
	if ended {
		res, err = s.db.ExecContext(ctx, `UPDATE sessions SET state=?, end_reason=?, ended_at=? WHERE id=? AND node=?`, string(state), reason, ms(time.Now()), id, s.node)
	} else {
		res, err = s.db.ExecContext(ctx, `UPDATE sessions SET state=? WHERE id=? AND node=?`, string(state), id, s.node)
	}
	if err != nil {
		return fmt.Errorf("updating session %s: %w", id, err)
	}
	return s.owned(ctx, res, id)
}

// SetSessionHibernated records that a session is hibernated: its sandbox
// is gone and its home image is whole. lastUsed is kept for its idle TTL.
// Like SetSessionState, only for a session the handle's node owns.
func (s *Store) SetSessionHibernated(ctx context.Context, id string, at, lastUsed time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE sessions SET state=?, hibernated_at=?, last_used_at=? WHERE id=? AND node=?`,
		string(sandbox.StateHibernated), ms(at), ms(lastUsed), id, s.node)
	if err != nil {
		return fmt.Errorf("updating session %s: %w", id, err)
	}
	return s.owned(ctx, res, id)
}

// SetSessionLive records whether a session's sandbox holds memory; like
// SetSessionState, only for a session the handle's node owns.
func (s *Store) SetSessionLive(ctx context.Context, id string, live bool) error {
	res, err := s.db.ExecContext(ctx, `UPDATE sessions SET live=? WHERE id=? AND node=?`, boolInt(live), id, s.node)
	if err != nil {
		return fmt.Errorf("updating session %s: %w", id, err)
	}
	return s.owned(ctx, res, id)
}

// SetSessionCheckpoint records a session's checkpoint image (the zero
// Checkpoint: none) and its live flag in one statement: a session that
// lost its memory says so in the same write that forgets the image.
func (s *Store) SetSessionCheckpoint(ctx context.Context, id string, live bool, c Checkpoint) error {
	res, err := s.db.ExecContext(ctx, `UPDATE sessions SET live=?, checkpoint_path=?, checkpoint_bytes=?, checkpoint_runsc=?, checkpoint_digest=? WHERE id=? AND node=?`,
		boolInt(live), c.Path, c.Bytes, c.Runsc, c.Digest, id, s.node)
	if err != nil {
		return fmt.Errorf("updating session %s: %w", id, err)
	}
	return s.owned(ctx, res, id)
}

// SetSessionNetwork records a session's new network request (its JSON)
// for a session the handle's node owns; like SetSessionState, another
// node's session is left alone (ErrNotOwner) and a missing one is not an
// error.
func (s *Store) SetSessionNetwork(ctx context.Context, id, network string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE sessions SET network=? WHERE id=? AND node=?`, network, id, s.node)
	if err != nil {
		return fmt.Errorf("updating network of session %s: %w", id, err)
	}
	return s.owned(ctx, res, id)
}

// owned turns an update that changed no row into ErrNotOwner when the
// session exists under another node.
func (s *Store) owned(ctx context.Context, res sql.Result, id string) error {
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return nil
	}
	var node string
	err := s.db.QueryRowContext(ctx, `SELECT node FROM sessions WHERE id=?`, id).Scan(&node)
	if err == nil && node != s.node {
		return fmt.Errorf("updating session %s (owner %q): %w", id, node, ErrNotOwner)
	}
	return nil
}

// SessionsInStates lists the sessions the handle's node owns whose state
// is one of states.
func (s *Store) SessionsInStates(ctx context.Context, states ...sandbox.State) ([]SessionRow, error) {
	if len(states) == 0 {
		return nil, nil
	}
	q := `SELECT ` + sessionCols + ` FROM sessions WHERE node = ? AND state IN (?` + repeat(",?", len(states)-1) + `) ORDER BY created_at`
	args := make([]any, 0, len(states)+1)
	args = append(args, s.node)
	for _, st := range states {
		args = append(args, string(st))
	}
	return s.querySessions(ctx, q, args...)
}

// querySessions runs q, a SELECT of sessionCols, and reads every row (an
// empty list, never nil, when there is none).
func (s *Store) querySessions(ctx context.Context, q string, args ...any) ([]SessionRow, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing sessions: %w", err)
	}
	defer rows.Close()
	out := []SessionRow{}
	for rows.Next() {
		r, err := scanSession(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// GetSession reads one session.
func (s *Store) GetSession(ctx context.Context, id string) (SessionRow, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id=?`, id)
	r, err := scanSession(row)
	if errors.Is(err, sql.ErrNoRows) {
		return SessionRow{}, ErrNotFound
	}
	return r, err
}

type scanner interface{ Scan(...any) error }

// sessionCols are the columns scanSession reads, in its order.
const sessionCols = `id, key_id, language, runtime_version, state, network, idle_ttl_ms, created_at, last_used_at, COALESCE(ended_at,0), end_reason, COALESCE(hibernated_at,0), disk_bytes, parent_id, node, live, checkpoint_path, checkpoint_bytes, checkpoint_runsc, checkpoint_digest, kernel`

func scanSession(sc scanner) (SessionRow, error) {
	var r SessionRow
	var ttl, created, used, ended, hib, live, kernel int64
	if err := sc.Scan(&r.ID, &r.KeyID, &r.Language, &r.Version, &r.State, &r.Network, &ttl, &created, &used, &ended, &r.EndReason, &hib, &r.DiskBytes, &r.ParentID, &r.Node,
		&live, &r.Checkpoint.Path, &r.Checkpoint.Bytes, &r.Checkpoint.Runsc, &r.Checkpoint.Digest, &kernel); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return r, err
		}
		return r, fmt.Errorf("reading session: %w", err)
	}
	r.Kernel = kernel != 0
	r.setTimes(ttl, created, used, ended, hib)
	r.Live = live != 0
	return r, nil
}

// setTimes fills r's durations and times from their stored milliseconds
// (0 for a time not set).
func (r *SessionRow) setTimes(ttl, created, used, ended, hib int64) {
	r.IdleTTL = time.Duration(ttl) * time.Millisecond
	r.CreatedAt, r.LastUsedAt = fromMS(created), fromMS(used)
	if ended > 0 {
		r.EndedAt = fromMS(ended)
	}
	if hib > 0 {
		r.HibernatedAt = fromMS(hib)
	}
}

// ExecutionRow is one execution as persisted.
type ExecutionRow struct {
	ID         string
	SessionID  string
	KeyID      string
	Language   string
	State      string // running, done, failed
	Status     string
	ExitCode   int
	DurationMS int64
	StartedAt  time.Time
}

// InsertExecution records an execution that is starting.
func (s *Store) InsertExecution(ctx context.Context, r ExecutionRow) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO executions(id, session_id, key_id, language, state, started_at, node) VALUES (?,?,?,?,?,?,?)`,
		r.ID, r.SessionID, r.KeyID, r.Language, string(sandbox.ExecRunning), ms(r.StartedAt), s.node)
	if err != nil {
		return fmt.Errorf("inserting execution %s: %w", r.ID, err)
	}
	return nil
}

// FinishExecution records an execution's outcome.
func (s *Store) FinishExecution(ctx context.Context, id, state, status string, exitCode int, durationMS int64) error {
	_, err := s.db.ExecContext(ctx, `UPDATE executions SET state=?, status=?, exit_code=?, duration_ms=?, ended_at=? WHERE id=?`,
		state, status, exitCode, durationMS, ms(time.Now()), id)
	if err != nil {
		return fmt.Errorf("finishing execution %s: %w", id, err)
	}
	return nil
}

// FailRunningExecutions marks every execution of the handle's node still
// running as failed (used at start: whatever was running when the node's
// last process died did not succeed).
func (s *Store) FailRunningExecutions(ctx context.Context, reason string) (int64, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE executions SET state=?, status=?, ended_at=? WHERE state=? AND node=?`,
		string(sandbox.ExecFailed), reason, ms(time.Now()), string(sandbox.ExecRunning), s.node)
	if err != nil {
		return 0, fmt.Errorf("failing interrupted executions: %w", err)
	}
	return res.RowsAffected()
}

// ExecutionState reads an execution's state and status (for tests and audits).
func (s *Store) ExecutionState(ctx context.Context, id string) (state, status string, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT state, status FROM executions WHERE id=?`, id).Scan(&state, &status)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", ErrNotFound
	}
	return state, status, err
}

func repeat(s string, n int) string {
	out := ""
	for i := 0; i < n; i++ {
		out += s
	}
	return out
}

// addRuntimeVersion adds sessions.runtime_version on SQLite unless a
// store rolled back by hand still has it.
func addRuntimeVersion(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('sessions') WHERE name = 'runtime_version'`).Scan(&n); err != nil {
		return fmt.Errorf("reading sessions columns: %w", err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `ALTER TABLE sessions ADD COLUMN runtime_version TEXT NOT NULL DEFAULT ''`); err != nil {
		return fmt.Errorf("adding sessions.runtime_version: %w", err)
	}
	return nil
}

// addSessionKernel adds sessions.kernel on SQLite unless a file made
// between the column's addition and this migration's number has it.
func addSessionKernel(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('sessions') WHERE name = 'kernel'`).Scan(&n); err != nil {
		return fmt.Errorf("reading sessions columns: %w", err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `ALTER TABLE sessions ADD COLUMN kernel INTEGER NOT NULL DEFAULT 0`); err != nil {
		return fmt.Errorf("adding sessions.kernel: %w", err)
	}
	return nil
}

// addLiveColumns adds the sessions' live-state columns (migration 14) on
// SQLite, each unless the file has it already.
func addLiveColumns(ctx context.Context, tx *sql.Tx) error {
	for _, c := range []struct{ name, def string }{
		{"live", "INTEGER NOT NULL DEFAULT 0"},
		{"checkpoint_path", "TEXT NOT NULL DEFAULT ''"},
		{"checkpoint_bytes", "INTEGER NOT NULL DEFAULT 0"},
		{"checkpoint_runsc", "TEXT NOT NULL DEFAULT ''"},
		{"checkpoint_digest", "TEXT NOT NULL DEFAULT ''"},
	} {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('sessions') WHERE name = ?`, c.name).Scan(&n); err != nil {
			return fmt.Errorf("reading sessions columns: %w", err)
		}
		if n > 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, `ALTER TABLE sessions ADD COLUMN `+c.name+` `+c.def); err != nil {
			return fmt.Errorf("adding sessions.%s: %w", c.name, err)
		}
	}
	return nil
}
