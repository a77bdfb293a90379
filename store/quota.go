package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Plan quotas that hold across every node sharing the store. Each check
// runs in one transaction that first locks a row of the key (SELECT ...
// FOR UPDATE on PostgreSQL; SQLite's IMMEDIATE transactions hold the one
// write lock), so parallel callers on any number of nodes are serialized
// per key and never overshoot.
//
// A session slot is a row of session_slots in one of two kinds:
//
//   - pending (bound = 0): reserved under a provisional id before the
//     session exists (its id is the executor's to choose). It counts
//     while younger than PendingSlotTTL, so a node that dies between
//     reserving and binding holds the slot for that long at most.
//   - bound (bound = 1): bound to its session's row (BindSessionSlot). It
//     counts while that row is in a slot state (sandbox.SlotStates): hibernated
//     counts, ending, ended and failed do not.
//
// So whatever ends a session, on whatever node, and whether or not the
// node lives to tidy up, the slot stops counting the moment the row
// leaves the slot states. The trigger session_slots_follow (migration 10)
// deletes it in that same statement, and ReserveSessionSlot deletes any
// row that no longer counts (a bind that raced the session's end, a
// pending reservation of a node that died) before it counts.

// PendingSlotTTL is how long a reservation not yet bound to its session
// counts. It outlasts any create or fork (the executor bounds both by
// create_timeout, 30 s by default), so a slow create is never counted
// out; it is also how long a node that crashed mid-create keeps a slot.
const PendingSlotTTL = 10 * time.Minute

// slotCounts is the condition under which a row of session_slots counts;
// its one argument is the oldest reserved_at a pending slot may have. A
// bound slot counts while its session is in sandbox.SlotStates.
var slotCounts = `((bound = 0 AND reserved_at >= ?) OR (bound <> 0 AND EXISTS (
	SELECT 1 FROM sessions s WHERE s.id = session_slots.session_id AND ` + stateIn("s.state", sandbox.SlotStates) + `)))`

// The trigger behind "a slot goes with its session": when a session row
// leaves the slot states (or is deleted), its bound slot is deleted in
// the same statement, however the row was changed. The trigger is made
// by a migration: a change to sandbox.SlotStates needs a new migration
// that makes it again, or stores made before keep the old list.
var (
	slotsEndTriggerSQLite = `CREATE TRIGGER IF NOT EXISTS session_slots_follow AFTER UPDATE OF state ON sessions
	WHEN ` + stateNotIn("NEW.state", sandbox.SlotStates) + `
	BEGIN DELETE FROM session_slots WHERE session_id = NEW.id; END;
	CREATE TRIGGER IF NOT EXISTS session_slots_follow_delete AFTER DELETE ON sessions
	BEGIN DELETE FROM session_slots WHERE session_id = OLD.id; END;`
	slotsEndTriggerPostgres = `CREATE OR REPLACE FUNCTION session_slots_follow() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF TG_OP = 'DELETE' THEN
			DELETE FROM session_slots WHERE session_id = OLD.id;
		ELSIF ` + stateNotIn("NEW.state", sandbox.SlotStates) + ` THEN
			DELETE FROM session_slots WHERE session_id = NEW.id;
		END IF;
		RETURN NULL;
	END $$;
	DROP TRIGGER IF EXISTS session_slots_follow ON sessions;
	CREATE TRIGGER session_slots_follow AFTER UPDATE OF state OR DELETE ON sessions
	FOR EACH ROW EXECUTE FUNCTION session_slots_follow();`
	// Sessions live when the store gains the rule hold their slots.
	slotsBackfill = `INSERT INTO session_slots(key_id, session_id, node, reserved_at, bound)
	SELECT key_id, id, '', created_at, 1 FROM sessions WHERE key_id <> '' AND ` + stateIn("state", sandbox.SlotStates) + `
	ON CONFLICT (key_id, session_id) DO NOTHING;`
)

// addSlotBound gives session_slots its bound column and rate_buckets its
// granted column (whether the latest take got a token) on SQLite, unless
// they have them (a file whose schema version was rolled back), and
// backfills the slots.
func addSlotBound(ctx context.Context, tx *sql.Tx) error {
	for _, c := range []struct{ table, column string }{{"session_slots", "bound"}, {"rate_buckets", "granted"}} {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('`+c.table+`') WHERE name = ?`, c.column).Scan(&n); err != nil {
			return fmt.Errorf("reading %s columns: %w", c.table, err)
		}
		if n == 0 {
			if _, err := tx.ExecContext(ctx, `ALTER TABLE `+c.table+` ADD COLUMN `+c.column+` INTEGER NOT NULL DEFAULT 0`); err != nil {
				return fmt.Errorf("adding %s.%s: %w", c.table, c.column, err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, slotsBackfill); err != nil {
		return fmt.Errorf("backfilling session slots: %w", err)
	}
	return nil
}

// ReserveSessionSlot takes one of keyID's max session slots, pending
// under slotID (a provisional id, or the session's own when it is known),
// on node ("": the node this handle acts for, see ForNode), and reports
// whether it got one. Taking a slot slotID already
// holds succeeds without taking another. Rows of keyID that no longer
// count are deleted first.
func (s *Store) ReserveSessionSlot(ctx context.Context, keyID, slotID, node string, max int) (bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("reserving session slot: %w", err)
	}
	defer tx.Rollback()
	if err := s.lockQuotaKey(ctx, tx, keyID); err != nil {
		return false, fmt.Errorf("reserving session slot: %w", err)
	}
	if node == "" {
		node = s.node
	}
	now := time.Now()
	if _, err := tx.ExecContext(ctx, `DELETE FROM session_slots WHERE key_id = ? AND NOT `+slotCounts, keyID, ms(now.Add(-PendingSlotTTL))); err != nil {
		return false, fmt.Errorf("reconciling session slots: %w", err)
	}
	var held, mine int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN session_id = ? THEN 1 ELSE 0 END), 0) FROM session_slots WHERE key_id = ?`,
		slotID, keyID).Scan(&held, &mine); err != nil {
		return false, fmt.Errorf("counting session slots: %w", err)
	}
	ok := mine > 0
	if !ok && held < max {
		if _, err := tx.ExecContext(ctx, `INSERT INTO session_slots(key_id, session_id, node, reserved_at, bound) VALUES (?,?,?,?,0)`,
			keyID, slotID, node, ms(now)); err != nil {
			return false, fmt.Errorf("reserving session slot: %w", err)
		}
		ok = true
	}
	// Committed also when refused: the reconciliation's deletes stand.
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("reserving session slot: %w", err)
	}
	return ok, nil
}

// lockQuotaKey makes keyID's row of quota_keys and locks it for tx.
func (s *Store) lockQuotaKey(ctx context.Context, tx *sql.Tx, keyID string) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO quota_keys(key_id) VALUES (?) ON CONFLICT (key_id) DO NOTHING`, keyID); err != nil {
		return err
	}
	var locked string
	return tx.QueryRowContext(ctx, `SELECT key_id FROM quota_keys WHERE key_id = ?`+s.dialect.ForUpdate(), keyID).Scan(&locked)
}

// BindSessionSlot binds keyID's pending slot slotID to the session
// sessionID, whose row the executor has inserted into this store: from
// then on the slot counts exactly while that row is live. A reservation
// that has expired in the meantime (a create slower than PendingSlotTTL)
// is taken again, over the limit if need be, so that the session is
// counted; a session that has already ended keeps no slot.
func (s *Store) BindSessionSlot(ctx context.Context, keyID, slotID, sessionID string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("binding session slot to %s: %w", sessionID, err)
	}
	defer tx.Rollback()
	if err := s.lockQuotaKey(ctx, tx, keyID); err != nil {
		return fmt.Errorf("binding session slot to %s: %w", sessionID, err)
	}
	res, err := tx.ExecContext(ctx, `UPDATE session_slots SET session_id = ?, bound = 1 WHERE key_id = ? AND session_id = ?`, sessionID, keyID, slotID)
	if err != nil {
		return fmt.Errorf("binding session slot to %s: %w", sessionID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("binding session slot to %s: %w", sessionID, err)
	} else if n == 0 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO session_slots(key_id, session_id, node, reserved_at, bound) VALUES (?,?,'',?,1)
			ON CONFLICT (key_id, session_id) DO UPDATE SET bound = 1`, keyID, sessionID, ms(time.Now())); err != nil {
			return fmt.Errorf("binding session slot to %s: %w", sessionID, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM session_slots WHERE session_id = ? AND NOT EXISTS (
		SELECT 1 FROM sessions s WHERE s.id = ? AND `+stateIn("s.state", sandbox.SlotStates)+`)`, sessionID, sessionID); err != nil {
		return fmt.Errorf("binding session slot to %s: %w", sessionID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("binding session slot to %s: %w", sessionID, err)
	}
	return nil
}

// ReleaseSessionSlot gives back the slot slotID holds (a pending
// reservation, or a bound slot by its session's id), if any.
func (s *Store) ReleaseSessionSlot(ctx context.Context, slotID string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM session_slots WHERE session_id = ?`, slotID); err != nil {
		return fmt.Errorf("releasing session slot of %s: %w", slotID, err)
	}
	return nil
}

// ReleasePendingSlots deletes the pending reservations of the node this
// handle acts for (ForNode) and returns how many went. A node calls it as
// its process starts, before it serves: the creates they were taken for
// died with its previous process. A PostgreSQL handle of no node name
// does nothing (several processes may share that name); its reservations
// expire after PendingSlotTTL instead.
func (s *Store) ReleasePendingSlots(ctx context.Context) (int64, error) {
	if s.node == "" && s.dialect == Postgres {
		return 0, nil
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM session_slots WHERE bound = 0 AND node = ?`, s.node)
	if err != nil {
		return 0, fmt.Errorf("releasing pending session slots: %w", err)
	}
	return res.RowsAffected()
}

// SessionSlots counts the slots keyID holds.
func (s *Store) SessionSlots(ctx context.Context, keyID string) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM session_slots WHERE key_id = ? AND `+slotCounts,
		keyID, ms(time.Now().Add(-PendingSlotTTL))).Scan(&n); err != nil {
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
//
// It is one prepared statement (rateTakeQuery), an upsert that reads,
// refills, takes and writes the key's row under the row's lock (ON
// CONFLICT DO UPDATE serializes writers of a row on both engines), so a
// request pays one round trip to the database, not a transaction's five.
func (s *Store) TakeRateToken(ctx context.Context, keyID string, perMinute int, now time.Time) (bool, time.Duration, error) {
	if perMinute <= 0 {
		return false, time.Minute, nil
	}
	capacity := int64(perMinute) * tokenUnits
	at := ms(now)
	var tokens, granted int64
	if err := s.rateTake.QueryRowContext(ctx, keyID, capacity-tokenUnits, at, capacity, int64(perMinute)).Scan(&tokens, &granted); err != nil {
		return false, 0, fmt.Errorf("taking rate token: %w", classify(err))
	}
	if granted != 0 {
		return true, 0, nil
	}
	missing := tokenUnits - tokens
	return false, time.Duration((missing+int64(perMinute)-1)/int64(perMinute)) * time.Millisecond, nil
}

// rateTakeQuery is TakeRateToken's upsert. Its arguments: the key, the
// tokens of a new bucket after this take, now (ms), the capacity and the
// rate (both in units). The SET expressions all read the row as it was.
func rateTakeQuery(d Dialect) string {
	// refilled is the bucket at now, before this take: a minute refills
	// the whole bucket, so longer gaps count as one minute, and a clock
	// behind the last take (another node's) refills nothing.
	least := d.Least()
	// Numbered parameters, as each is used more than once: $n on
	// PostgreSQL (left alone by rebind), ?n on SQLite.
	arg := func(n int, typ string) string {
		mark := "?"
		if d == Postgres {
			mark = "$"
		}
		return "CAST(" + mark + strconv.Itoa(n) + " AS " + typ + ")"
	}
	key, fresh, now, capacity, rate := arg(1, "TEXT"), arg(2, "BIGINT"), arg(3, "BIGINT"), arg(4, "BIGINT"), arg(5, "BIGINT")
	refilled := `(CASE WHEN ` + now + ` > rate_buckets.last_ms
		THEN ` + least + `(` + capacity + `, rate_buckets.token_units + ` + least + `(` + now + ` - rate_buckets.last_ms, 60000) * ` + rate + `)
		ELSE rate_buckets.token_units END)`
	unit := strconv.Itoa(tokenUnits)
	return `INSERT INTO rate_buckets(key_id, token_units, last_ms, granted) VALUES (` + key + `, ` + fresh + `, ` + now + `, 1)
	ON CONFLICT (key_id) DO UPDATE SET
		token_units = ` + refilled + ` - CASE WHEN ` + refilled + ` >= ` + unit + ` THEN ` + unit + ` ELSE 0 END,
		granted = CASE WHEN ` + refilled + ` >= ` + unit + ` THEN 1 ELSE 0 END,
		last_ms = CASE WHEN ` + now + ` > rate_buckets.last_ms THEN ` + now + ` ELSE rate_buckets.last_ms END
	RETURNING token_units, granted`
}
