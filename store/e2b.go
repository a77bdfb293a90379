package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// E2BSandbox is what the E2B adapter (package e2b) keeps of a session it
// made, beside the session's own row: what E2B's API reports and our
// sessions do not hold. Secrets are never stored in the clear: the envd
// access token only as its SHA-256 (TokenHash) and sealed under a key
// derived from the caller's API key (SealedToken, so that connect can
// hand it out again), the API key sealed under a key derived from the
// token (SealedKey, so that sandbox traffic, which carries only the
// token, acts as its key), and the env vars sealed under the API key.
// The sealed values are the adapter's opaque text.
type E2BSandbox struct {
	ID          string // the session's id
	Template    string
	Metadata    string // JSON object of strings
	SealedEnv   string
	TokenHash   string
	SealedToken string
	SealedKey   string
	EndAt       time.Time // E2B's timeout: when the sandbox is due to end
	CreatedAt   time.Time
}

// InsertE2BSandbox stores a new record.
func (s *Store) InsertE2BSandbox(ctx context.Context, r E2BSandbox) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO e2b_sandboxes(id, template, metadata, sealed_env, token_hash, sealed_token, sealed_key, end_at, created_at)
		VALUES (?,?,?,?,?,?,?,?,?)`, r.ID, r.Template, r.Metadata, r.SealedEnv, r.TokenHash, r.SealedToken, r.SealedKey, ms(r.EndAt), ms(r.CreatedAt))
	if err != nil {
		return fmt.Errorf("inserting e2b sandbox %s: %w", r.ID, classify(err))
	}
	return nil
}

const e2bColumns = `id, template, metadata, sealed_env, token_hash, sealed_token, sealed_key, end_at, created_at`

func scanE2B(sc interface{ Scan(...any) error }) (E2BSandbox, error) {
	var r E2BSandbox
	var end, created int64
	if err := sc.Scan(&r.ID, &r.Template, &r.Metadata, &r.SealedEnv, &r.TokenHash, &r.SealedToken, &r.SealedKey, &end, &created); err != nil {
		return r, err
	}
	r.EndAt, r.CreatedAt = fromMS(end), fromMS(created)
	return r, nil
}

// E2BSandbox returns the record of session id, or ErrNotFound.
func (s *Store) E2BSandbox(ctx context.Context, id string) (E2BSandbox, error) {
	r, err := scanE2B(s.db.QueryRowContext(ctx, `SELECT `+e2bColumns+` FROM e2b_sandboxes WHERE id=?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, ErrNotFound
	}
	if err != nil {
		return r, fmt.Errorf("reading e2b sandbox %s: %w", id, classify(err))
	}
	return r, nil
}

// E2BSandboxes returns the records of the given session ids that exist
// (at most len(ids)), keyed by id.
func (s *Store) E2BSandboxes(ctx context.Context, ids []string) (map[string]E2BSandbox, error) {
	out := make(map[string]E2BSandbox, len(ids))
	// One query per id keeps the statement the same on both dialects; a
	// key lists at most its plan's sessions.
	for _, id := range ids {
		r, err := s.E2BSandbox(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[id] = r
	}
	return out, nil
}

// SetE2BEndAt moves a record's end (E2B's set timeout).
func (s *Store) SetE2BEndAt(ctx context.Context, id string, end time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE e2b_sandboxes SET end_at=? WHERE id=?`, ms(end), id)
	if err != nil {
		return fmt.Errorf("updating e2b sandbox %s: %w", id, classify(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// DeleteE2BSandbox removes a record (none is not an error).
func (s *Store) DeleteE2BSandbox(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM e2b_sandboxes WHERE id=?`, id); err != nil {
		return fmt.Errorf("deleting e2b sandbox %s: %w", id, classify(err))
	}
	return nil
}

// pruneE2BSQL deletes the records of sessions that have ended, whoever
// ended them (kill, idle TTL, a lost sandbox).
var pruneE2BSQL = `DELETE FROM e2b_sandboxes WHERE id IN (SELECT id FROM sessions WHERE ` + stateIn("state", sandbox.DoneStates) + `)`

// PruneE2BSandboxes deletes the records of ended sessions and returns how
// many went.
func (s *Store) PruneE2BSandboxes(ctx context.Context) (int64, error) {
	res, err := s.db.ExecContext(ctx, pruneE2BSQL)
	if err != nil {
		return 0, fmt.Errorf("pruning e2b sandboxes: %w", classify(err))
	}
	n, _ := res.RowsAffected()
	return n, nil
}
