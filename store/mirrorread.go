package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// MirrorArtifactRow is one catalogue entry as the operator console reads
// it (package mirror owns the table and writes it).
type MirrorArtifactRow struct {
	Name, Version, Filename, Status string
	Reasons, Advisories, Accepted   []string
	Stripped                        []string
	OSVSnapshot                     string
	UpdatedAt                       time.Time
}

// MirrorPackage returns at most limit of the catalogue entries of one
// package (manager and its normalised name key), most recently judged
// first, after skipping offset, and how many entries it has in all.
func (s *Store) MirrorPackage(ctx context.Context, manager, nameKey string, offset, limit int) ([]MirrorArtifactRow, int, error) {
	var total int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM mirror_artifacts WHERE manager=? AND name_key=?`, manager, nameKey).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("counting catalogue entries of %s %s: %w", manager, nameKey, err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT name, version, filename, status, reasons, advisories, accepted, stripped, osv_snapshot, updated_at
		FROM mirror_artifacts WHERE manager=? AND name_key=? ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?`, manager, nameKey, max(limit, 0), max(offset, 0))
	if err != nil {
		return nil, 0, fmt.Errorf("reading catalogue entries of %s %s: %w", manager, nameKey, err)
	}
	defer rows.Close()
	out := []MirrorArtifactRow{}
	for rows.Next() {
		var r MirrorArtifactRow
		var reasons, adv, acc, stripped string
		var at int64
		if err := rows.Scan(&r.Name, &r.Version, &r.Filename, &r.Status, &reasons, &adv, &acc, &stripped, &r.OSVSnapshot, &at); err != nil {
			return nil, 0, fmt.Errorf("reading catalogue entry: %w", err)
		}
		// A list that does not decode is shown empty: the row still says
		// its status.
		_ = json.Unmarshal([]byte(reasons), &r.Reasons)
		_ = json.Unmarshal([]byte(adv), &r.Advisories)
		_ = json.Unmarshal([]byte(acc), &r.Accepted)
		_ = json.Unmarshal([]byte(stripped), &r.Stripped)
		r.UpdatedAt = fromMS(at)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("reading catalogue entries of %s %s: %w", manager, nameKey, err)
	}
	return out, total, nil
}

// MirrorPackageAdvisories returns the OSV ids recorded on any catalogue
// entry of one package, sorted, at most limit of them; more says some
// were left out.
func (s *Store) MirrorPackageAdvisories(ctx context.Context, manager, nameKey string, limit int) (ids []string, more bool, err error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT advisories FROM mirror_artifacts WHERE manager=? AND name_key=? AND advisories<>'[]'`, manager, nameKey)
	if err != nil {
		return nil, false, fmt.Errorf("reading advisories of %s %s: %w", manager, nameKey, err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			return nil, false, fmt.Errorf("reading advisories: %w", err)
		}
		var list []string
		_ = json.Unmarshal([]byte(raw), &list)
		for _, id := range list {
			if len(seen) >= limit && !seen[id] {
				more = true
				continue
			}
			seen[id] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("reading advisories of %s %s: %w", manager, nameKey, err)
	}
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, more, nil
}

// MirrorPackageNames returns the names (as published, at most limit) a
// package was catalogued under: one name key can be spelled several ways.
func (s *Store) MirrorPackageNames(ctx context.Context, manager, nameKey string, limit int) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT name FROM mirror_artifacts WHERE manager=? AND name_key=? ORDER BY name LIMIT ?`, manager, nameKey, max(limit, 0))
	if err != nil {
		return nil, fmt.Errorf("reading names of %s %s: %w", manager, nameKey, err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("reading name: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// MirrorRef names one catalogue entry.
type MirrorRef struct{ Name, Version string }

// NPMDependents returns at most limit npm catalogue entries whose
// recorded dependencies name the package (its name compared without
// regard to case), by name and version; more says there are others.
// Wheels' Requires-Dist is not in the catalogue's rows (it is in each
// wheel's METADATA), so pip packages have none here.
func (s *Store) NPMDependents(ctx context.Context, name string, limit int) (refs []MirrorRef, more bool, err error) {
	quoted, _ := json.Marshal(strings.ToLower(name))
	pattern := "%" + likeEscape(string(quoted)) + ":%"
	rows, err := s.db.QueryContext(ctx, `SELECT name, version, dependencies FROM mirror_artifacts
		WHERE manager='npm' AND LOWER(dependencies) LIKE ? ESCAPE '!' ORDER BY name_key, version, id`, pattern)
	if err != nil {
		return nil, false, fmt.Errorf("reading dependents of %s: %w", name, err)
	}
	defer rows.Close()
	seen := map[MirrorRef]bool{}
	for rows.Next() {
		var r MirrorRef
		var raw string
		if err := rows.Scan(&r.Name, &r.Version, &raw); err != nil {
			return nil, false, fmt.Errorf("reading dependents: %w", err)
		}
		var deps map[string]string
		if json.Unmarshal([]byte(raw), &deps) != nil || !hasKeyFold(deps, name) || seen[r] {
			continue // the pattern matched a range or another field
		}
		if len(refs) >= limit {
			more = true
			break
		}
		seen[r] = true
		refs = append(refs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("reading dependents of %s: %w", name, err)
	}
	return refs, more, nil
}

func hasKeyFold(m map[string]string, name string) bool {
	for k := range m {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// likeEscape escapes LIKE's wildcards and its escape character, '!'.
func likeEscape(s string) string {
	return strings.NewReplacer(`!`, `!!`, `%`, `!%`, `_`, `!_`).Replace(s)
}

// PackageInstalls returns, for the at most limit sessions that most
// recently installed a package (manager and any of the names it was
// catalogued under), each session's latest install of it, newest first.
func (s *Store) PackageInstalls(ctx context.Context, manager string, names []string, limit int) ([]InstallRow, error) {
	if len(names) == 0 || limit <= 0 {
		return []InstallRow{}, nil
	}
	args := []any{manager}
	for _, n := range names {
		args = append(args, n)
	}
	args = append(args, limit)
	in := strings.TrimSuffix(strings.Repeat("?,", len(names)), ",")
	rows, err := s.db.QueryContext(ctx, `SELECT session_id, key_id, manager, name, version, filename, sha256, osv_snapshot, installed_at
		FROM session_installs WHERE id IN (SELECT MAX(id) FROM session_installs WHERE manager=? AND name IN (`+in+`) GROUP BY session_id)
		ORDER BY installed_at DESC, id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("reading installs of %s %s: %w", manager, names[0], err)
	}
	return scanInstalls(rows)
}
