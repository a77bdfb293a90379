package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"
)

// EgressRow is one egress proxy decision as persisted. The trail outlives
// the session it describes: rows are removed only by PruneEgressDecisions.
type EgressRow struct {
	SessionID string
	// KeyID is the key that owns the session. Left empty on insert, it is
	// taken from the session's row (empty when there is none).
	KeyID      string
	Time       time.Time // when the connection reached the proxy
	Mode       string
	Host       string
	Port       int
	Addr       string // address dialled or refused; empty when none
	Outcome    string
	Reason     string
	BytesUp    int64
	BytesDown  int64
	DurationMS int64
	// Count is how many decisions the row stands for (0 is stored as 1),
	// from Time to Last (zero for a single decision); Summary marks a row
	// that counts decisions over the audit cap rather than repeats of one.
	Count   int
	Last    time.Time
	Summary bool
	// Credential marks a connection on which the proxy added a session
	// credential.
	Credential bool
}

// InsertEgressDecisions stores a batch of decisions in one transaction.
func (s *Store) InsertEgressDecisions(ctx context.Context, rows []EgressRow) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("starting egress batch: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO egress_decisions(session_id, key_id, time, mode, host, port, addr, outcome, reason, bytes_up, bytes_down, duration_ms, count, last_time, summary, credential)
		VALUES (?, COALESCE(NULLIF(?, ''), (SELECT key_id FROM sessions WHERE id = ?), ''), ?,?,?,?,?,?,?,?,?,?,?,?,?,?)`)
	if err != nil {
		return fmt.Errorf("preparing egress insert: %w", err)
	}
	defer stmt.Close()
	for _, r := range rows {
		last := int64(0)
		if !r.Last.IsZero() {
			last = ms(r.Last)
		}
		if _, err := stmt.ExecContext(ctx, r.SessionID, r.KeyID, r.SessionID, ms(r.Time), r.Mode, r.Host, r.Port, r.Addr,
			r.Outcome, r.Reason, r.BytesUp, r.BytesDown, r.DurationMS, max(r.Count, 1), last, r.Summary, r.Credential); err != nil {
			return fmt.Errorf("inserting egress decision: %w", err)
		}
	}
	return tx.Commit()
}

// addEgressCredential adds egress_decisions.credential on SQLite unless
// a file made by an older step already has it.
func addEgressCredential(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('egress_decisions') WHERE name = 'credential'`).Scan(&n); err != nil {
		return fmt.Errorf("reading egress_decisions columns: %w", err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `ALTER TABLE egress_decisions ADD COLUMN credential INTEGER NOT NULL DEFAULT 0`); err != nil {
		return fmt.Errorf("adding egress_decisions.credential: %w", err)
	}
	return nil
}

// EgressDecisions returns the latest limit decisions of a session, oldest
// first (by time, then by insertion). The list is empty, not nil, when
// there are none.
func (s *Store) EgressDecisions(ctx context.Context, sessionID string, limit int) ([]EgressRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT session_id, key_id, time, mode, host, port, addr, outcome, reason, bytes_up, bytes_down, duration_ms, count, last_time, summary, credential FROM (
			SELECT * FROM egress_decisions WHERE session_id = ? ORDER BY time DESC, id DESC LIMIT ?
		) AS latest ORDER BY time, id`, sessionID, limit)
	if err != nil {
		return nil, fmt.Errorf("listing egress decisions of %s: %w", sessionID, err)
	}
	defer rows.Close()
	out := []EgressRow{}
	for rows.Next() {
		var r EgressRow
		var at, last int64
		if err := rows.Scan(&r.SessionID, &r.KeyID, &at, &r.Mode, &r.Host, &r.Port, &r.Addr, &r.Outcome, &r.Reason,
			&r.BytesUp, &r.BytesDown, &r.DurationMS, &r.Count, &last, &r.Summary, &r.Credential); err != nil {
			return nil, fmt.Errorf("reading egress decision: %w", err)
		}
		r.Time = fromMS(at)
		if last != 0 {
			r.Last = fromMS(last)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// pruneChunk bounds the rows one DELETE removes, so that pruning a large
// backlog never holds the write lock for long.
const pruneChunk = 5000

// PruneEgressDecisions deletes decisions older than before and reports how
// many it deleted.
func (s *Store) PruneEgressDecisions(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, `DELETE FROM egress_decisions WHERE id IN (SELECT id FROM egress_decisions WHERE time < ? LIMIT ?)`,
			ms(before), pruneChunk)
		if err != nil {
			return total, fmt.Errorf("pruning egress decisions: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("pruning egress decisions: %w", err)
		}
		total += n
		if n < pruneChunk {
			return total, nil
		}
	}
}

// Queue bounds of EgressWriter.
const (
	egressBatch     = 512     // queued rows that trigger a write before the tick
	egressMaxQueued = 1 << 16 // rows held while the database is slow; more are dropped
)

// EgressWriter batches egress decisions off the proxy's connection
// goroutines and writes them every interval, as soon as a batch is full,
// and on Close. Unlike UsageWriter, Record never touches the database:
// the caller is the proxy's hot path. Rows beyond egressMaxQueued waiting
// for a slow or unavailable database are dropped and counted in the log
// (the proxy's log line of each decision remains); those within it are
// written once the database is back. Build it with NewEgressWriter; safe
// for concurrent use.
type EgressWriter struct{ b *batchWriter[EgressRow] }

// NewEgressWriter starts a writer flushing every interval. ctx carries
// values only: the writer runs until Close.
func NewEgressWriter(ctx context.Context, st *Store, interval time.Duration, log *slog.Logger) *EgressWriter {
	return &EgressWriter{newBatchWriter(ctx, "egress decisions", st.InsertEgressDecisions, interval, egressBatch, egressMaxQueued, log)}
}

// Record queues one row. It never blocks on the database.
func (w *EgressWriter) Record(r EgressRow) { w.b.record(r) }

// Flush writes what is queued (a reader calls it to see its latest rows).
func (w *EgressWriter) Flush(ctx context.Context) { w.b.flush(ctx) }

// Close writes what is queued and stops the writer; rows recorded after
// it are dropped. Call it after the proxy has stopped and before the
// store closes. Calling it again does nothing.
func (w *EgressWriter) Close() { w.b.close() }
