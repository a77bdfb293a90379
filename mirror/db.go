package mirror

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/redact"
	"github.com/sandboxapi/sandboxapi/internal/transition"
)

// Status is an artifact's lifecycle state.
type Status string

const (
	// StatusAdmitted artifacts are served.
	StatusAdmitted Status = "admitted"
	// StatusRefused artifacts failed admission; they are never stored.
	StatusRefused Status = "refused"
	// StatusQuarantined artifacts were admitted and later flagged (recheck,
	// verify); they vanish from every endpoint.
	StatusQuarantined Status = "quarantined"
	// StatusRemoved artifacts were withdrawn by an operator.
	StatusRemoved Status = "removed"
)

// artifactStates lists the allowed status changes. Re-adding an artifact
// runs admission again, so any state may become admitted or refused that
// way.
func artifactStates() transition.Table[Status] {
	return transition.Table[Status]{
		"":                {StatusAdmitted, StatusRefused},
		StatusAdmitted:    {StatusAdmitted, StatusRefused, StatusQuarantined, StatusRemoved},
		StatusRefused:     {StatusAdmitted, StatusRefused, StatusRemoved},
		StatusQuarantined: {StatusAdmitted, StatusRefused, StatusQuarantined, StatusRemoved},
		StatusRemoved:     {StatusAdmitted, StatusRefused, StatusRemoved},
	}
}

func canMove(from, to Status) bool { return artifactStates().Allowed(from, to) }

// AuditEvent names an audit row's kind.
type AuditEvent string

// Audit events: every admission, refusal, quarantine, operator exception,
// removal and OSV import is recorded with its reason and OSV snapshot.
const (
	AuditAdmission  AuditEvent = "admission"
	AuditRefusal    AuditEvent = "refusal"
	AuditQuarantine AuditEvent = "quarantine"
	AuditException  AuditEvent = "exception"
	AuditRemoval    AuditEvent = "removal"
	AuditOSVImport  AuditEvent = "osv_import"
)

// AuditEntry is one audit row.
type AuditEntry struct {
	At          time.Time
	Event       AuditEvent
	Manager     Manager
	Name        string
	Version     string
	Filename    string
	SHA256      string
	Reason      string
	Advisories  []string
	OSVSnapshot string
}

func (m *Mirror) audit(ctx context.Context, e AuditEntry) error {
	adv, _ := json.Marshal(nonNil(e.Advisories))
	_, err := m.db.ExecContext(ctx, `INSERT INTO mirror_audit(at,event,manager,name,version,filename,sha256,reason,advisories,osv_snapshot) VALUES (?,?,?,?,?,?,?,?,?,?)`,
		m.now().UnixMilli(), string(e.Event), string(e.Manager), e.Name, e.Version, e.Filename, e.SHA256, e.Reason, string(adv), e.OSVSnapshot)
	if err != nil {
		return fmt.Errorf("writing mirror audit: %w", err)
	}
	m.log.LogAttrs(ctx, auditLevel(e.Event), "mirror "+string(e.Event), slogAttrs(e)...)
	return nil
}

// Audit returns audit rows, newest first, at most limit (0 = 1000).
func (m *Mirror) Audit(ctx context.Context, limit int) ([]AuditEntry, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := m.db.QueryContext(ctx, `SELECT at,event,manager,name,version,filename,sha256,reason,advisories,osv_snapshot FROM mirror_audit ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("reading mirror audit: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at int64
		var adv string
		if err := rows.Scan(&at, &e.Event, &e.Manager, &e.Name, &e.Version, &e.Filename, &e.SHA256, &e.Reason, &adv, &e.OSVSnapshot); err != nil {
			return nil, fmt.Errorf("reading mirror audit: %w", err)
		}
		e.At = time.UnixMilli(at).UTC()
		_ = json.Unmarshal([]byte(adv), &e.Advisories)
		out = append(out, e)
	}
	return out, rows.Err()
}

const artifactCols = `id,manager,name,version,filename,sha256,integrity,shasum,size,metadata_sha256,requires_python,upstream_sha256,manifest,status,reasons,advisories,accepted,osv_snapshot,source,created_at,updated_at,stripped,dependencies,published_at`

type scanner interface{ Scan(...any) error }

func scanArtifact(s scanner) (Artifact, error) {
	var a Artifact
	var reasons, adv, acc, stripped, deps string
	var created, updated, published int64
	err := s.Scan(&a.ID, &a.Manager, &a.Name, &a.Version, &a.Filename, &a.SHA256, &a.Integrity, &a.Shasum, &a.Size,
		&a.MetadataSHA256, &a.RequiresPython, &a.UpstreamSHA256, &a.manifest, &a.Status, &reasons, &adv, &acc, &a.OSVSnapshot, &a.Source, &created, &updated,
		&stripped, &deps, &published)
	if err != nil {
		return Artifact{}, err
	}
	_ = json.Unmarshal([]byte(stripped), &a.Stripped)
	_ = json.Unmarshal([]byte(deps), &a.Dependencies)
	if len(a.Dependencies) == 0 {
		a.Dependencies = nil
	}
	if published != 0 {
		a.PublishedAt = time.UnixMilli(published).UTC()
	}
	_ = json.Unmarshal([]byte(reasons), &a.Reasons)
	_ = json.Unmarshal([]byte(adv), &a.Advisories)
	_ = json.Unmarshal([]byte(acc), &a.Accepted)
	a.CreatedAt, a.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	// Rows written before sources were redacted may hold an index
	// credential: it is never read back (scrubSources rewrites them).
	a.Source = redact.Origin(a.Source)
	a.URLPath = urlPath(a)
	return a, nil
}

func (m *Mirror) queryArtifacts(ctx context.Context, where string, args ...any) ([]Artifact, error) {
	rows, err := m.db.QueryContext(ctx, `SELECT `+artifactCols+` FROM mirror_artifacts `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("querying mirror artifacts: %w", err)
	}
	defer rows.Close()
	var out []Artifact
	for rows.Next() {
		a, err := scanArtifact(rows)
		if err != nil {
			return nil, fmt.Errorf("reading mirror artifact: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading mirror artifacts: %w", err)
	}
	return out, nil
}

// upsert writes a (the row is keyed by manager, name and filename) and returns
// its id. The status change must be allowed by the transitions table.
func (m *Mirror) upsert(ctx context.Context, a *Artifact) error {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("starting mirror write: %w", err)
	}
	defer tx.Rollback()
	var old Status
	err = tx.QueryRowContext(ctx, `SELECT status FROM mirror_artifacts WHERE manager=? AND name_key=? AND filename=?`, string(a.Manager), NormalizeName(a.Manager, a.Name), a.Filename).Scan(&old)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("reading mirror artifact: %w", err)
	}
	if !canMove(old, a.Status) {
		return fmt.Errorf("%w: %s -> %s for %s", ErrTransition, old, a.Status, a.Filename)
	}
	a.Source = redact.Origin(a.Source)
	now := m.now().UnixMilli()
	reasons, _ := json.Marshal(nonNil(a.Reasons))
	adv, _ := json.Marshal(nonNil(a.Advisories))
	acc, _ := json.Marshal(nonNil(a.Accepted))
	stripped, _ := json.Marshal(nonNil(a.Stripped))
	deps, _ := json.Marshal(a.Dependencies)
	if a.Dependencies == nil {
		deps = []byte("{}")
	}
	var published int64
	if !a.PublishedAt.IsZero() {
		published = a.PublishedAt.UnixMilli()
	}
	err = tx.QueryRowContext(ctx, `INSERT INTO mirror_artifacts(manager,name_key,name,version,filename,sha256,integrity,shasum,size,metadata_sha256,requires_python,upstream_sha256,manifest,status,reasons,advisories,accepted,osv_snapshot,source,created_at,updated_at,stripped,dependencies,published_at)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
		ON CONFLICT(manager, name_key, filename) DO UPDATE SET name_key=excluded.name_key, name=excluded.name, version=excluded.version, sha256=excluded.sha256,
			integrity=excluded.integrity, shasum=excluded.shasum, size=excluded.size, metadata_sha256=excluded.metadata_sha256,
			requires_python=excluded.requires_python, upstream_sha256=excluded.upstream_sha256, manifest=excluded.manifest, status=excluded.status,
			reasons=excluded.reasons, advisories=excluded.advisories, accepted=excluded.accepted, osv_snapshot=excluded.osv_snapshot,
			source=excluded.source, updated_at=excluded.updated_at, stripped=excluded.stripped, dependencies=excluded.dependencies,
			published_at=excluded.published_at
		RETURNING id`,
		string(a.Manager), NormalizeName(a.Manager, a.Name), a.Name, a.Version, a.Filename, a.SHA256, a.Integrity, a.Shasum, a.Size,
		a.MetadataSHA256, a.RequiresPython, a.UpstreamSHA256, a.manifest, string(a.Status), string(reasons), string(adv), string(acc),
		a.OSVSnapshot, a.Source, now, now, string(stripped), string(deps), published).Scan(&a.ID)
	if err != nil {
		return fmt.Errorf("writing mirror artifact %s: %w", a.Filename, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing mirror artifact %s: %w", a.Filename, err)
	}
	a.URLPath = urlPath(*a)
	return nil
}

// setStatus moves one row to status with reasons.
func (m *Mirror) setStatus(ctx context.Context, a *Artifact, to Status, reasons, advisories []string) error {
	if !canMove(a.Status, to) {
		return fmt.Errorf("%w: %s -> %s for %s", ErrTransition, a.Status, to, a.Filename)
	}
	r, _ := json.Marshal(nonNil(reasons))
	adv, _ := json.Marshal(nonNil(advisories))
	_, err := m.db.ExecContext(ctx, `UPDATE mirror_artifacts SET status=?, reasons=?, advisories=?, updated_at=? WHERE id=? AND status=?`,
		string(to), string(r), string(adv), m.now().UnixMilli(), a.ID, string(a.Status))
	if err != nil {
		return fmt.Errorf("updating mirror artifact %s: %w", a.Filename, err)
	}
	a.Status, a.Reasons, a.Advisories = to, reasons, advisories
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// scrubSources rewrites the source of every row written before sources
// were redacted (an upstream URL with userinfo, a query or a fragment) to
// its redact.Origin, so an index credential does not stay on disk or in
// backups. Rows already clean are not touched; running it again is a
// no-op.
func scrubSources(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, `SELECT id, source FROM mirror_artifacts WHERE source LIKE '%@%' OR source LIKE '%?%' OR source LIKE '%#%'`)
	if err != nil {
		return fmt.Errorf("reading mirror sources: %w", err)
	}
	type fix struct {
		id  int64
		src string
	}
	var fixes []fix
	for rows.Next() {
		var f fix
		var src string
		if err := rows.Scan(&f.id, &src); err != nil {
			rows.Close()
			return fmt.Errorf("reading mirror sources: %w", err)
		}
		if f.src = redact.Origin(src); f.src != src {
			fixes = append(fixes, f)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading mirror sources: %w", err)
	}
	for _, f := range fixes {
		if _, err := db.ExecContext(ctx, `UPDATE mirror_artifacts SET source=? WHERE id=?`, f.src, f.id); err != nil {
			return fmt.Errorf("redacting mirror source %d: %w", f.id, err)
		}
	}
	return nil
}
