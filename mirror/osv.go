package mirror

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/mirror/osvdb"
)

// OSVStatus describes the OSV database for readiness checks. Two times
// say how old it is: ImportedAt (when an operator imported it) and
// NewestModified (the newest "modified" of its records: how fresh the
// source itself was). A fresh import of an old dump has a recent
// ImportedAt but an old NewestModified.
type OSVStatus struct {
	Present    bool   `json:"present"`
	SnapshotID string `json:"snapshot_id"`
	// Contents is the snapshot's: when it was imported, its newest record
	// "modified" time, how many records it holds and skipped.
	osvdb.Contents
	// Age is now minus ImportedAt; Stale is Age > MaxAge.
	Age    time.Duration `json:"age_ns"`
	MaxAge time.Duration `json:"max_age_ns"`
	Stale  bool          `json:"stale"`
	// ModifiedAge is now minus NewestModified (zero when no record has a
	// modified time). Stale does not look at it; readiness may.
	ModifiedAge time.Duration `json:"modified_age_ns"`
}

// ImportOSV imports OSV records from path (see osvdb.Import) as the new
// current snapshot and records it. Artifacts are not rechecked: run Recheck.
func (m *Mirror) ImportOSV(ctx context.Context, path string) (osvdb.Snapshot, error) {
	snap, err := osvdb.Import(path, m.osvDir(), m.now())
	if err != nil {
		return osvdb.Snapshot{}, fmt.Errorf("importing osv database: %w", err)
	}
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return snap, fmt.Errorf("recording osv snapshot: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE mirror_osv SET current=0`); err != nil {
		return snap, fmt.Errorf("recording osv snapshot: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO mirror_osv(id,imported_at,newest_modified,records,source,current) VALUES (?,?,?,?,?,1)
		ON CONFLICT(id) DO UPDATE SET imported_at=excluded.imported_at, source=excluded.source, current=1`,
		snap.ID, snap.ImportedAt.UnixMilli(), snap.NewestModified.UnixMilli(), snap.Records, snap.Source); err != nil {
		return snap, fmt.Errorf("recording osv snapshot: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return snap, fmt.Errorf("recording osv snapshot: %w", err)
	}
	m.mu.Lock()
	m.osv = nil
	m.mu.Unlock()
	reason := fmt.Sprintf("%d records from %s, newest modified %s", snap.Records, snap.Source, snap.NewestModified.Format(time.RFC3339))
	if err := m.audit(ctx, AuditEntry{Event: AuditOSVImport, Reason: reason, OSVSnapshot: snap.ID}); err != nil {
		return snap, err
	}
	return snap, nil
}

// currentSnapshot returns the id of the snapshot recorded as current.
func (m *Mirror) currentSnapshot(ctx context.Context) (string, error) {
	var id string
	err := m.db.QueryRowContext(ctx, `SELECT id FROM mirror_osv WHERE current=1`).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("%w: none imported", ErrOSVUnavailable)
	}
	if err != nil {
		return "", fmt.Errorf("reading osv snapshot: %w", err)
	}
	return id, nil
}

// settledSnapshot is asked when the files hold snapshot files but the
// store names another as current. An import (maybe by another process)
// writes the files first and records them a moment later, so the store is
// read again for a short while before the mismatch counts: readiness must
// not flap during an import, and a lasting mismatch is still an error.
func (m *Mirror) settledSnapshot(ctx context.Context, files string) (string, error) {
	var id string
	for try := 0; try < 20; try++ {
		var err error
		if id, err = m.currentSnapshot(ctx); err != nil {
			return "", err
		}
		if id == files {
			return id, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("%w: files hold snapshot %s, store says %s", ErrOSVUnavailable, files, id)
}

// osvDB returns the loaded current snapshot, loading it once per snapshot
// (another process may have imported a newer one since).
func (m *Mirror) osvDB(ctx context.Context) (*osvdb.DB, error) {
	id, err := m.currentSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.osv != nil && m.osv.Snapshot().ID == id {
		return m.osv, nil
	}
	db, err := osvdb.Load(m.osvDir())
	if err != nil {
		m.log.ErrorContext(ctx, "mirror osv database unreadable", "err", err)
		return nil, fmt.Errorf("%w: %w", ErrOSVUnavailable, err)
	}
	if db.Snapshot().ID != id {
		if id, err = m.settledSnapshot(ctx, db.Snapshot().ID); err != nil {
			return nil, err
		}
	}
	m.osv = db
	return db, nil
}

// loadedSnapshot returns the id of the current snapshot when it loads, or
// "" when no database is readable: the stamp for audit rows that are not
// an OSV judgement themselves.
func (m *Mirror) loadedSnapshot(ctx context.Context) string {
	db, err := m.osvDB(ctx)
	if err != nil {
		return ""
	}
	return db.Snapshot().ID
}

// OSVStatus reports the current OSV database for readiness. A missing or
// unreadable database returns an error wrapping ErrOSVUnavailable.
func (m *Mirror) OSVStatus(ctx context.Context) (OSVStatus, error) {
	st := OSVStatus{MaxAge: m.cfg.OSVMaxAge.D()}
	id, err := m.currentSnapshot(ctx)
	if err != nil {
		return st, err
	}
	snap, err := osvdb.ReadSnapshot(m.osvDir())
	if err != nil {
		return st, fmt.Errorf("%w: %w", ErrOSVUnavailable, err)
	}
	if snap.ID != id {
		if _, err := m.settledSnapshot(ctx, snap.ID); err != nil {
			return st, err
		}
	}
	st.Present, st.SnapshotID, st.Contents = true, snap.ID, snap.Contents
	st.Age = m.now().Sub(snap.ImportedAt)
	if !snap.NewestModified.IsZero() {
		st.ModifiedAge = m.now().Sub(snap.NewestModified)
	}
	st.Stale = st.Age > st.MaxAge
	return st, nil
}

// RecheckResult summarises one Recheck.
type RecheckResult struct {
	Checked     int
	Quarantined []Artifact
	// Excepted are kept admitted only because an operator accepted the
	// advisories that match them; an exception audit row is written when
	// that changes (a new snapshot, other matching ids), not every time.
	Excepted []Artifact
}

// Recheck runs the OSV gate again on every admitted artifact against the
// current database; newly affected ones (advisories beyond the ids an
// operator accepted, or a failed version check) are quarantined at once.
// A missing database is an error and changes nothing.
func (m *Mirror) Recheck(ctx context.Context) (RecheckResult, error) {
	var res RecheckResult
	db, err := m.osvDB(ctx)
	if err != nil {
		return res, fmt.Errorf("rechecking mirror: %w", err)
	}
	snap := db.Snapshot().ID
	as, err := m.queryArtifacts(ctx, `WHERE status='admitted' ORDER BY id`)
	if err != nil {
		return res, err
	}
	var errs []error
	for _, a := range as {
		res.Checked++
		found, err := db.Match(a.Manager.Ecosystem(), a.Name, a.Version)
		var reasons []string
		ids := findingIDs(found)
		// Only ids an operator accepted when they matched at admission
		// (they are then also its advisories) cover a match now.
		accepted := intersect(a.Accepted, a.Advisories)
		switch {
		case err != nil:
			reasons = []string{fmt.Sprintf("osv check failed: %v", err)}
		case !subset(ids, accepted):
			reasons = []string{"affected by " + describe(found)}
		}
		prevSnap, prevIDs := a.OSVSnapshot, a.Advisories
		a.OSVSnapshot = snap
		if reasons == nil {
			// Kept: the row now says which snapshot passed it and which
			// accepted advisories match.
			changed := prevSnap != snap || !slices.Equal(ids, normIDs(prevIDs))
			if changed {
				if err := m.keep(ctx, &a, ids); err != nil {
					errs = append(errs, err)
				}
			}
			// An exception is audited (a row and a warning) when its state
			// changes: first judged against a new snapshot, or other
			// accepted advisories match. Rechecks run with every readiness
			// check; an unchanged exception is not news.
			switch {
			case len(ids) > 0 && changed:
				e := m.entry(AuditException, a, fmt.Sprintf("kept admitted only because the operator accepted %s (osv snapshot %s)", describe(found), snap))
				if err := m.audit(ctx, e); err != nil {
					errs = append(errs, err)
				}
			case len(ids) == 0 && len(prevIDs) > 0:
				e := m.entry(AuditException, a, fmt.Sprintf("exception lapsed: no advisory matches any more (was %s; osv snapshot %s)", strings.Join(prevIDs, " "), snap))
				if err := m.audit(ctx, e); err != nil {
					errs = append(errs, err)
				}
			}
			if len(ids) > 0 {
				res.Excepted = append(res.Excepted, a)
			}
			continue
		}
		if err := m.setStatus(ctx, &a, StatusQuarantined, reasons, ids); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := m.db.ExecContext(ctx, `UPDATE mirror_artifacts SET osv_snapshot=? WHERE id=?`, snap, a.ID); err != nil {
			errs = append(errs, fmt.Errorf("updating mirror artifact %s: %w", a.Filename, err))
		}
		if err := m.audit(ctx, m.entry(AuditQuarantine, a, strings.Join(reasons, "; "))); err != nil {
			errs = append(errs, err)
		}
		res.Quarantined = append(res.Quarantined, a)
	}
	return res, errors.Join(errs...)
}

// keep records on an admitted artifact the snapshot that passed it and the
// accepted advisories that match it now.
func (m *Mirror) keep(ctx context.Context, a *Artifact, ids []string) error {
	a.Advisories, a.Reasons = ids, nil
	if len(ids) > 0 {
		a.Reasons = []string{"operator accepted " + strings.Join(ids, " ")}
	}
	adv, _ := json.Marshal(nonNil(a.Advisories))
	reasons, _ := json.Marshal(nonNil(a.Reasons))
	if _, err := m.db.ExecContext(ctx, `UPDATE mirror_artifacts SET osv_snapshot=?, advisories=?, reasons=? WHERE id=? AND status='admitted'`,
		a.OSVSnapshot, string(adv), string(reasons), a.ID); err != nil {
		return fmt.Errorf("updating mirror artifact %s: %w", a.Filename, err)
	}
	return nil
}

// intersect returns the ids in both a and b, in a's order.
func intersect(a, b []string) []string {
	var out []string
	for _, id := range a {
		if slices.Contains(b, id) {
			out = append(out, id)
		}
	}
	return out
}

func subset(ids, accepted []string) bool {
	for _, id := range ids {
		found := false
		for _, a := range accepted {
			if a == id {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// VerifyResult summarises one Verify.
type VerifyResult struct {
	Checked     int
	Quarantined []Artifact
}

// Verify re-hashes the stored file (and wheel metadata) of every admitted
// artifact; a missing or altered file quarantines the artifact.
func (m *Mirror) Verify(ctx context.Context) (VerifyResult, error) {
	var res VerifyResult
	as, err := m.queryArtifacts(ctx, `WHERE status='admitted' ORDER BY id`)
	if err != nil {
		return res, err
	}
	var errs []error
	for _, a := range as {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		res.Checked++
		err := m.blobs.verify(a.SHA256)
		if err == nil && a.MetadataSHA256 != "" {
			err = m.blobs.verify(a.MetadataSHA256)
		}
		if err == nil {
			continue
		}
		reasons := []string{"stored file failed verification: " + err.Error()}
		if err := m.setStatus(ctx, &a, StatusQuarantined, reasons, a.Advisories); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := m.audit(ctx, m.entry(AuditQuarantine, a, reasons[0])); err != nil {
			errs = append(errs, err)
		}
		res.Quarantined = append(res.Quarantined, a)
	}
	return res, errors.Join(errs...)
}

func auditLevel(e AuditEvent) slog.Level {
	switch e {
	case AuditRefusal, AuditQuarantine, AuditException:
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

func slogAttrs(e AuditEntry) []slog.Attr {
	return []slog.Attr{
		slog.String("manager", string(e.Manager)), slog.String("name", e.Name), slog.String("version", e.Version),
		slog.String("filename", e.Filename), slog.String("sha256", e.SHA256), slog.String("reason", e.Reason),
		slog.Any("advisories", e.Advisories), slog.String("osv_snapshot", e.OSVSnapshot),
	}
}
