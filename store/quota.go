package store

import (
	"context"
	"fmt"
	"time"
)

// Plan quotas that hold across every node sharing the store. Each check
// runs in one transaction that first locks a row of the key (SELECT ...
// FOR UPDATE on PostgreSQL; SQLite's IMMEDIATE transactions hold the one
// write lock), so parallel callers on any number of nodes are serialized
// per key and never overshoot.

// ReserveSessionSlot takes one of keyID's max session slots for
// sessionID, on node, and reports whether it got one. Taking a slot the
// session already holds succeeds without taking another.
func (s *Store) ReserveSessionSlot(ctx context.Context, keyID, sessionID, node string, max int) (bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("reserving session slot: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO quota_keys(key_id) VALUES (?) ON CONFLICT (key_id) DO NOTHING`, keyID); err != nil {
		return false, fmt.Errorf("reserving session slot: %w", err)
	}
	var locked string
	if err := tx.QueryRowContext(ctx, `SELECT key_id FROM quota_keys WHERE key_id = ?`+s.dialect.ForUpdate(), keyID).Scan(&locked); err != nil {
		return false, fmt.Errorf("reserving session slot: %w", err)
	}
	var held, mine int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN session_id = ? THEN 1 ELSE 0 END), 0) FROM session_slots WHERE key_id = ?`,
		sessionID, keyID).Scan(&held, &mine); err != nil {
		return false, fmt.Errorf("counting session slots: %w", err)
	}
	if mine > 0 {
		return true, nil
	}
	if held >= max {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO session_slots(key_id, session_id, node, reserved_at) VALUES (?,?,?,?)`,
		keyID, sessionID, node, ms(time.Now())); err != nil {
		return false, fmt.Errorf("reserving session slot: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("reserving session slot: %w", err)
	}
	return true, nil
}

// ReleaseSessionSlot gives back the slot sessionID holds, if any.
func (s *Store) ReleaseSessionSlot(ctx context.Context, sessionID string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM session_slots WHERE session_id = ?`, sessionID); err != nil {
		return fmt.Errorf("releasing session slot of %s: %w", sessionID, err)
	}
	return nil
}

// SessionSlots counts the slots keyID holds.
func (s *Store) SessionSlots(ctx context.Context, keyID string) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM session_slots WHERE key_id = ?`, keyID).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting session slots: %w", err)
	}
	return n, nil
}

// tokenUnits is the fixed-point scale of rate_buckets.token_units: a
// bucket refilling at perMinute tokens a minute gains exactly perMinute
// units a millisecond, so refills lose nothing to rounding.
const tokenUnits = 60_000

// TakeRateToken takes a token from keyID's bucket, which holds perMinute
// tokens and refills at perMinute a minute, at now; when the bucket is
// empty it reports how long until the next token. One bucket per key is
// shared by every node.
func (s *Store) TakeRateToken(ctx context.Context, keyID string, perMinute int, now time.Time) (bool, time.Duration, error) {
	if perMinute <= 0 {
		return false, time.Minute, nil
	}
	capacity := int64(perMinute) * tokenUnits
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, 0, fmt.Errorf("taking rate token: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO rate_buckets(key_id, token_units, last_ms) VALUES (?,?,?) ON CONFLICT (key_id) DO NOTHING`,
		keyID, capacity, ms(now)); err != nil {
		return false, 0, fmt.Errorf("taking rate token: %w", err)
	}
	var tokens, last int64
	if err := tx.QueryRowContext(ctx, `SELECT token_units, last_ms FROM rate_buckets WHERE key_id = ?`+s.dialect.ForUpdate(), keyID).Scan(&tokens, &last); err != nil {
		return false, 0, fmt.Errorf("taking rate token: %w", err)
	}
	// A minute refills the whole bucket, so longer gaps count as one minute.
	if el := ms(now) - last; el > 0 {
		tokens = min(capacity, tokens+min(el, 60000)*int64(perMinute))
		last = ms(now)
	}
	ok := tokens >= tokenUnits
	var wait time.Duration
	if ok {
		tokens -= tokenUnits
	} else {
		missing := tokenUnits - tokens
		wait = time.Duration((missing+int64(perMinute)-1)/int64(perMinute)) * time.Millisecond
	}
	if _, err := tx.ExecContext(ctx, `UPDATE rate_buckets SET token_units = ?, last_ms = ? WHERE key_id = ?`, tokens, last, keyID); err != nil {
		return false, 0, fmt.Errorf("taking rate token: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return false, 0, fmt.Errorf("taking rate token: %w", err)
	}
	return ok, wait, nil
}
