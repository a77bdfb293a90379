package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// KeyRow is an API key as stored: only the SHA-256 of the secret is kept.
type KeyRow struct {
	ID   string
	Name string
	Plan string
	Hash string
	// Kind is KindClient (the API) or KindAdmin (the operator console);
	// "" is stored as KindClient.
	Kind      string
	CreatedAt time.Time
	RevokedAt time.Time
}

// Key kinds. An admin key opens the operator console and nothing else; a
// client key opens the API and never the console.
const (
	KindClient = "client"
	KindAdmin  = "admin"
)

// InsertKey stores a new key.
func (s *Store) InsertKey(ctx context.Context, k KeyRow) error {
	if k.Kind == "" {
		k.Kind = KindClient
	}
	if k.Kind != KindClient && k.Kind != KindAdmin {
		return fmt.Errorf("inserting key: unknown kind %q", k.Kind)
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO api_keys(id, name, plan, hash, kind, created_at) VALUES (?,?,?,?,?,?)`,
		k.ID, k.Name, k.Plan, k.Hash, k.Kind, ms(k.CreatedAt))
	if err != nil {
		return fmt.Errorf("inserting key: %w", err)
	}
	return nil
}

// KeyByHash finds an unrevoked key by the hash of its secret.
func (s *Store) KeyByHash(ctx context.Context, hash string) (KeyRow, error) {
	var k KeyRow
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT id, name, plan, hash, kind, created_at FROM api_keys WHERE hash=? AND revoked_at IS NULL`, hash).
		Scan(&k.ID, &k.Name, &k.Plan, &k.Hash, &k.Kind, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return k, ErrNotFound
	}
	if err != nil {
		// classify: database/sql's own errors (no free connection before
		// the deadline) did not pass through the driver.
		return k, fmt.Errorf("looking up key: %w", classify(err))
	}
	k.CreatedAt = fromMS(created)
	return k, nil
}

// ListKeys returns every key, newest first.
func (s *Store) ListKeys(ctx context.Context) ([]KeyRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, plan, hash, kind, created_at, COALESCE(revoked_at,0) FROM api_keys ORDER BY created_at DESC`)
	if err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	defer rows.Close()
	var out []KeyRow
	for rows.Next() {
		var k KeyRow
		var created, revoked int64
		if err := rows.Scan(&k.ID, &k.Name, &k.Plan, &k.Hash, &k.Kind, &created, &revoked); err != nil {
			return nil, fmt.Errorf("reading key: %w", err)
		}
		k.CreatedAt = fromMS(created)
		if revoked > 0 {
			k.RevokedAt = fromMS(revoked)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeKey revokes a key by id.
func (s *Store) RevokeKey(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at=? WHERE id=? AND revoked_at IS NULL`, ms(time.Now()), id)
	if err != nil {
		return fmt.Errorf("revoking key: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// UsageRow is one metered request.
type UsageRow struct {
	KeyID      string
	Route      string
	Status     int
	DurationMS int64
	BytesIn    int64
	BytesOut   int64
	ExecMS     int64
	At         time.Time
}

// InsertUsage stores a batch of usage rows in one transaction.
func (s *Store) InsertUsage(ctx context.Context, rows []UsageRow) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("starting usage batch: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO usage(key_id, route, status, duration_ms, bytes_in, bytes_out, exec_ms, at) VALUES (?,?,?,?,?,?,?,?)`)
	if err != nil {
		return fmt.Errorf("preparing usage insert: %w", err)
	}
	defer stmt.Close()
	for _, r := range rows {
		if _, err := stmt.ExecContext(ctx, r.KeyID, r.Route, r.Status, r.DurationMS, r.BytesIn, r.BytesOut, r.ExecMS, ms(r.At)); err != nil {
			return fmt.Errorf("inserting usage: %w", err)
		}
	}
	return tx.Commit()
}

// UsageTotal is usage summed per key, day and route (the API reports it
// as wire.UsageTotal).
type UsageTotal struct {
	KeyID    string
	Day      string
	Route    string
	Requests int64
	Errors   int64
	BytesIn  int64
	BytesOut int64
	ExecMS   int64
	// DurationMS is the wall time spent answering the requests.
	DurationMS int64
}

// UsageTotals sums usage per key, UTC day and route; keyID "" means all keys.
func (s *Store) UsageTotals(ctx context.Context, keyID string, since time.Time) ([]UsageTotal, error) {
	q := `SELECT key_id, ` + s.dialect.DayOfMS("at") + ` AS day, route, COUNT(*), CAST(SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END) AS BIGINT),
		CAST(SUM(bytes_in) AS BIGINT), CAST(SUM(bytes_out) AS BIGINT), CAST(SUM(exec_ms) AS BIGINT), CAST(SUM(duration_ms) AS BIGINT)
		FROM usage WHERE at >= ? AND (? = '' OR key_id = ?) GROUP BY key_id, day, route ORDER BY day, key_id, route`
	rows, err := s.db.QueryContext(ctx, q, ms(since), keyID, keyID)
	if err != nil {
		return nil, fmt.Errorf("summing usage: %w", err)
	}
	defer rows.Close()
	out := []UsageTotal{}
	for rows.Next() {
		var u UsageTotal
		if err := rows.Scan(&u.KeyID, &u.Day, &u.Route, &u.Requests, &u.Errors, &u.BytesIn, &u.BytesOut, &u.ExecMS, &u.DurationMS); err != nil {
			return nil, fmt.Errorf("reading usage: %w", err)
		}
		out = append(out, u)
	}
	return out, rows.Err()
}
