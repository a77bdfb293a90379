package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Nodes of a cluster share one store. Each registers under its name and
// renews a lease; a node whose lease has run out no longer owns anything
// it cannot prove, and its sessions may be claimed by another node, one
// at a time and in one transaction each (ClaimSession).

// NodeRow is one node of the cluster as registered.
type NodeRow struct {
	Name string
	// URL is how other nodes reach this one (cluster.advertise_url).
	URL string
	// Epoch grows by one at every registration: a restarted node is a new
	// incarnation, and a renewal by an older one fails.
	Epoch      int64
	Capacity   int // sandboxes the node may run
	Free       int // sandboxes it could still start, at the last renewal
	Draining   bool
	StartedAt  time.Time
	RenewedAt  time.Time
	LeaseUntil time.Time
}

// Alive reports whether the node's lease runs at now (and it is not
// draining, when serving says so).
func (n NodeRow) Alive(now time.Time) bool { return n.LeaseUntil.After(now) }

// ErrLeaseLost is returned by RenewNode when the node's lease ran out or
// a newer incarnation of the node registered.
var ErrLeaseLost = errors.New("node lease lost")

// RegisterNode records n (a new incarnation: its epoch is one more than
// the last one of that name) and returns the row as stored.
func (s *Store) RegisterNode(ctx context.Context, n NodeRow) (NodeRow, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return NodeRow{}, fmt.Errorf("registering node %s: %w", n.Name, err)
	}
	defer tx.Rollback()
	var epoch int64
	err = tx.QueryRowContext(ctx, `SELECT epoch FROM nodes WHERE name = ?`+s.dialect.ForUpdate(), n.Name).Scan(&epoch)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		n.Epoch = 1
		_, err = tx.ExecContext(ctx, `INSERT INTO nodes(name, url, epoch, capacity, free, draining, started_at, renewed_at, lease_until) VALUES (?,?,?,?,?,?,?,?,?)`,
			n.Name, n.URL, n.Epoch, n.Capacity, n.Free, boolInt(n.Draining), ms(n.StartedAt), ms(n.RenewedAt), ms(n.LeaseUntil))
	case err == nil:
		n.Epoch = epoch + 1
		_, err = tx.ExecContext(ctx, `UPDATE nodes SET url=?, epoch=?, capacity=?, free=?, draining=?, started_at=?, renewed_at=?, lease_until=? WHERE name=?`,
			n.URL, n.Epoch, n.Capacity, n.Free, boolInt(n.Draining), ms(n.StartedAt), ms(n.RenewedAt), ms(n.LeaseUntil), n.Name)
	}
	if err != nil {
		return NodeRow{}, fmt.Errorf("registering node %s: %w", n.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return NodeRow{}, fmt.Errorf("registering node %s: %w", n.Name, err)
	}
	return n, nil
}

// RenewNode extends the lease of incarnation epoch of node name to until,
// reporting free capacity and whether it drains. It fails with
// ErrLeaseLost when the lease had already run out at now (other nodes may
// have claimed its sessions: the node must stop using them and register
// again) or a newer incarnation exists.
func (s *Store) RenewNode(ctx context.Context, name string, epoch int64, now, until time.Time, free int, draining bool) error {
	res, err := s.db.ExecContext(ctx, `UPDATE nodes SET renewed_at=?, lease_until=?, free=?, draining=? WHERE name=? AND epoch=? AND lease_until > ?`,
		ms(now), ms(until), free, boolInt(draining), name, epoch, ms(now))
	if err != nil {
		return fmt.Errorf("renewing lease of %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("renewing lease of %s: %w", name, err)
	} else if n == 0 {
		return fmt.Errorf("renewing lease of %s (epoch %d): %w", name, epoch, ErrLeaseLost)
	}
	return nil
}

// ExpireNode ends the lease of incarnation epoch of node name at once
// (a node that has handed over its sessions and exits).
func (s *Store) ExpireNode(ctx context.Context, name string, epoch int64) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE nodes SET lease_until=0, draining=1 WHERE name=? AND epoch=?`, name, epoch); err != nil {
		return fmt.Errorf("expiring lease of %s: %w", name, err)
	}
	return nil
}

const nodeCols = `name, url, epoch, capacity, free, draining, started_at, renewed_at, lease_until`

func scanNode(sc scanner) (NodeRow, error) {
	var n NodeRow
	var draining int
	var started, renewed, until int64
	if err := sc.Scan(&n.Name, &n.URL, &n.Epoch, &n.Capacity, &n.Free, &draining, &started, &renewed, &until); err != nil {
		return n, err
	}
	n.Draining = draining != 0
	n.StartedAt, n.RenewedAt, n.LeaseUntil = fromMS(started), fromMS(renewed), fromMS(until)
	return n, nil
}

// Nodes lists every registered node, by name.
func (s *Store) Nodes(ctx context.Context) ([]NodeRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+nodeCols+` FROM nodes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	defer rows.Close()
	var out []NodeRow
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("reading node: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// GetNode reads one node (ErrNotFound when it never registered).
func (s *Store) GetNode(ctx context.Context, name string) (NodeRow, error) {
	n, err := scanNode(s.db.QueryRowContext(ctx, `SELECT `+nodeCols+` FROM nodes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return NodeRow{}, ErrNotFound
	}
	if err != nil {
		return NodeRow{}, fmt.Errorf("reading node %s: %w", name, err)
	}
	return n, nil
}

// SessionOwner is where a session lives: its row and its owner node's
// (Owner.Name is empty when the session is unowned: a single node's, or
// handed over by a drained node).
type SessionOwner struct {
	Session SessionRow
	Owner   NodeRow
}

// OwnerOf reads session id and the node that owns it, in one query.
func (s *Store) OwnerOf(ctx context.Context, id string) (SessionOwner, error) {
	var o SessionOwner
	var name, url sql.NullString
	var epoch, capacity, free, draining, started, renewed, until sql.NullInt64
	var ttl, created, used, ended, hib int64
	r := &o.Session
	err := s.db.QueryRowContext(ctx, `SELECT s.id, s.key_id, s.language, s.state, s.network, s.idle_ttl_ms, s.created_at, s.last_used_at,
		COALESCE(s.ended_at,0), s.end_reason, COALESCE(s.hibernated_at,0), s.disk_bytes, s.parent_id, s.node,
		n.name, n.url, n.epoch, n.capacity, n.free, n.draining, n.started_at, n.renewed_at, n.lease_until
		FROM sessions s LEFT JOIN nodes n ON n.name = s.node WHERE s.id = ?`, id).Scan(
		&r.ID, &r.KeyID, &r.Language, &r.State, &r.Network, &ttl, &created, &used, &ended, &r.EndReason, &hib, &r.DiskBytes, &r.ParentID, &r.Node,
		&name, &url, &epoch, &capacity, &free, &draining, &started, &renewed, &until)
	if errors.Is(err, sql.ErrNoRows) {
		return o, ErrNotFound
	}
	if err != nil {
		return o, fmt.Errorf("reading owner of session %s: %w", id, err)
	}
	r.setTimes(ttl, created, used, ended, hib)
	if name.Valid {
		o.Owner = NodeRow{Name: name.String, URL: url.String, Epoch: epoch.Int64, Capacity: int(capacity.Int64), Free: int(free.Int64),
			Draining: draining.Int64 != 0, StartedAt: fromMS(started.Int64), RenewedAt: fromMS(renewed.Int64), LeaseUntil: fromMS(until.Int64)}
	}
	return o, nil
}

// ClaimSession moves session id to the handle's node, in one transaction,
// when its owner can no longer use it: the session is unowned (handed
// over), or its owner's lease had run out at now. It reports the previous
// owner and whether the claim took; a session whose owner is alive is not
// claimed (false, no error), nor is an ended one.
func (s *Store) ClaimSession(ctx context.Context, id string, now time.Time) (prev string, ok bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", false, fmt.Errorf("claiming session %s: %w", id, err)
	}
	defer tx.Rollback()
	var state sandbox.State
	err = tx.QueryRowContext(ctx, `SELECT node, state FROM sessions WHERE id = ?`+s.dialect.ForUpdate(), id).Scan(&prev, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, ErrNotFound
	}
	if err != nil {
		return "", false, fmt.Errorf("claiming session %s: %w", id, err)
	}
	if prev == s.node || state == sandbox.StateEnded {
		return prev, prev == s.node && state != sandbox.StateEnded, nil
	}
	if prev != "" {
		var until int64
		err := tx.QueryRowContext(ctx, `SELECT lease_until FROM nodes WHERE name = ?`+s.dialect.ForUpdate(), prev).Scan(&until)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return prev, false, fmt.Errorf("claiming session %s: %w", id, err)
		}
		if err == nil && until > ms(now) {
			return prev, false, nil // its owner still holds a lease
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sessions SET node = ? WHERE id = ?`, s.node, id); err != nil {
		return prev, false, fmt.Errorf("claiming session %s: %w", id, err)
	}
	// Executions the old owner left running never finish there.
	if _, err := tx.ExecContext(ctx, `UPDATE executions SET state=?, status='interrupted', ended_at=? WHERE session_id=? AND state=?`,
		string(sandbox.ExecFailed), ms(now), id, string(sandbox.ExecRunning)); err != nil {
		return prev, false, fmt.Errorf("claiming session %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return prev, false, fmt.Errorf("claiming session %s: %w", id, err)
	}
	return prev, true, nil
}

// ReleaseSessions hands every live session the handle's node owns over to
// the cluster (unowned, claimable at once by any node) and returns their
// ids. A draining node calls it once they are all hibernated.
func (s *Store) ReleaseSessions(ctx context.Context) ([]string, error) {
	if s.node == "" {
		return nil, nil // a single node has nobody to hand over to
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("releasing sessions: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id FROM sessions WHERE node = ? AND `+stateNotIn("state", sandbox.EndedStates)+s.dialect.ForUpdate(), s.node)
	if err != nil {
		return nil, fmt.Errorf("releasing sessions: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("releasing sessions: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("releasing sessions: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sessions SET node = '' WHERE node = ? AND `+stateNotIn("state", sandbox.EndedStates), s.node); err != nil {
		return nil, fmt.Errorf("releasing sessions: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("releasing sessions: %w", err)
	}
	return ids, nil
}

// LiveSessionsOfKey lists the sessions of keyID that are in none of
// sandbox.DoneStates (not ended, not failed), on every node.
func (s *Store) LiveSessionsOfKey(ctx context.Context, keyID string) ([]SessionRow, error) {
	return s.querySessions(ctx, `SELECT `+sessionCols+` FROM sessions WHERE key_id = ? AND `+stateNotIn("state", sandbox.DoneStates)+` ORDER BY created_at`, keyID)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// OrphanedIdleSessions lists up to limit sessions that nobody will end
// on their own: not ended, owned by no node holding a lease at now (their
// owner's lease ran out, or they were handed over and never claimed), and
// idle past their TTL at now (last used more than idle_ttl ago). The
// longest idle come first. A node of the cluster claims (ClaimSession)
// and ends each: their owner's reaper is gone, and no call will come to
// take them over.
func (s *Store) OrphanedIdleSessions(ctx context.Context, now time.Time, limit int) ([]SessionRow, error) {
	// The owner is looked up per name (the sessions_node_state index):
	// unowned, or a registered node whose lease ran out.
	rows, err := s.querySessions(ctx, `SELECT `+sessionCols+` FROM sessions
		WHERE node IN (SELECT '' UNION SELECT name FROM nodes WHERE lease_until <= ?)
		AND `+stateNotIn("state", sandbox.EndedStates)+` AND last_used_at + idle_ttl_ms < ?
		ORDER BY last_used_at, id LIMIT ?`, ms(now), ms(now), limit)
	if err != nil {
		return nil, fmt.Errorf("listing orphaned idle sessions: %w", err)
	}
	return rows, nil
}
