// Package osvdb is the mirror's local OSV database: it imports OSV records
// (a folder of <Ecosystem>/<ID>.json files or per-ecosystem all.zip files),
// writes them as an immutable snapshot in the offline layout osv-scanner
// reads (<dir>/osv-scanner/<Ecosystem>/all.zip), loads a snapshot once and
// matches many package versions against it.
//
// Version order comes from Google's OSV tooling
// (github.com/google/osv-scalibr/semantic): PEP 440 for PyPI, semver for npm.
// Two weak spots of osv-scalibr's own matcher are avoided here: every range
// of an entry is evaluated (a GIT range listed first does not hide the
// ECOSYSTEM range after it), and a panic while parsing or comparing versions
// is recovered and reported as an error, which callers treat as rejection.
package osvdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/osv-scalibr/semantic"
)

var (
	// ErrUnavailable means no snapshot exists or it cannot be read.
	ErrUnavailable = errors.New("osv database unavailable")
	// ErrVersion means the candidate version could not be parsed or
	// compared (including a recovered panic); treat it as rejection.
	ErrVersion = errors.New("osv version comparison failed")
)

// Record is the subset of the OSV schema the matcher uses.
type Record struct {
	ID        string     `json:"id"`
	Modified  time.Time  `json:"modified"`
	Withdrawn *time.Time `json:"withdrawn,omitempty"`
	Aliases   []string   `json:"aliases,omitempty"`
	Summary   string     `json:"summary,omitempty"`
	Affected  []Affected `json:"affected"`
	// Severity and DatabaseSpecific are read for reports (npm audit's
	// severity, CVSS vector and CWE ids); matching ignores them.
	Severity         []Severity       `json:"severity,omitempty"`
	DatabaseSpecific DatabaseSpecific `json:"database_specific,omitzero"`
}

// Severity is one OSV severity entry (e.g. type CVSS_V3 and its vector).
type Severity struct {
	Type  string `json:"type"`
	Score string `json:"score"`
}

// DatabaseSpecific holds the GitHub Advisory Database's fields that
// reports show; other databases leave them empty.
type DatabaseSpecific struct {
	Severity string   `json:"severity,omitempty"` // LOW, MODERATE, HIGH, CRITICAL
	CWEIDs   []string `json:"cwe_ids,omitempty"`
}

// UnmarshalJSON reads the fields above and ignores the rest, whatever
// their type (database_specific is free-form in OSV).
func (d *DatabaseSpecific) UnmarshalJSON(b []byte) error {
	var raw struct {
		Severity json.RawMessage `json:"severity"`
		CWEIDs   json.RawMessage `json:"cwe_ids"`
	}
	if json.Unmarshal(b, &raw) != nil {
		return nil
	}
	_ = json.Unmarshal(raw.Severity, &d.Severity)
	_ = json.Unmarshal(raw.CWEIDs, &d.CWEIDs)
	return nil
}

// Affected is one affected package entry.
type Affected struct {
	Package  Package  `json:"package"`
	Ranges   []Range  `json:"ranges,omitempty"`
	Versions []string `json:"versions,omitempty"`
}

// Package names a package in an ecosystem.
type Package struct {
	Ecosystem string `json:"ecosystem"`
	Name      string `json:"name"`
}

// Range is one OSV range.
type Range struct {
	Type   string  `json:"type"`
	Events []Event `json:"events"`
}

// Event is one range event; exactly one field is set.
type Event struct {
	Introduced   string `json:"introduced,omitempty"`
	Fixed        string `json:"fixed,omitempty"`
	LastAffected string `json:"last_affected,omitempty"`
	Limit        string `json:"limit,omitempty"`
}

// Finding is one advisory that affects a version.
type Finding struct {
	ID      string
	Summary string
	// Why says how it matched: "range", "versions", "all versions" or
	// "unparsable advisory version" (matched to fail closed).
	Why string
	// Fixed is the lowest version the matching range names as fixed above
	// the matched one ("" when the advisory names none).
	Fixed string
}

// Snapshot describes one imported database.
type Snapshot struct {
	// ID is the sha256 over every record held (id and record hash).
	ID string `json:"id"`
	Contents
	Source string `json:"source"`
}

// Contents says when a snapshot was imported and what it holds; the
// mirror's OSV status reports it as it is.
type Contents struct {
	ImportedAt time.Time `json:"imported_at"`
	// NewestModified is the newest "modified" time of the records held:
	// how fresh the source was, whenever it was imported.
	NewestModified time.Time `json:"newest_modified"`
	// Records is how many records the snapshot holds; Skipped how many
	// the source had that name no ecosystem (e.g. "affected": []) and so
	// can match nothing and are not held.
	Records    int      `json:"records"`
	Skipped    int      `json:"skipped,omitempty"`
	Ecosystems []string `json:"ecosystems"`
}

// DB is a loaded snapshot. The zero value holds no records and matches
// nothing; use Load. A *DB is immutable and safe for concurrent use.
type DB struct {
	snap  Snapshot
	byPkg map[string][]*Record
	parse func(version, ecosystem string) (semantic.Version, error) // nil: semantic.Parse; tests inject panics
}

// Snapshot returns the loaded snapshot's description.
func (db *DB) Snapshot() Snapshot { return db.snap }

// parseVersion parses a version with db.parse, semantic.Parse by default.
func (db *DB) parseVersion(version, ecosystem string) (semantic.Version, error) {
	if db.parse != nil {
		return db.parse(version, ecosystem)
	}
	return semantic.Parse(version, ecosystem)
}

var (
	pep503Sep = regexp.MustCompile(`[-_.]+`)
	// pep440 is the canonical version pattern from PEP 440 (appendix B).
	pep440 = regexp.MustCompile(`^(?i)\s*v?(?:(?:[0-9]+)!)?[0-9]+(?:\.[0-9]+)*(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?(?:[-_.]?dev[-_.]?[0-9]*)?(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?\s*$`)
	// looseSemver accepts what npm advisories use ("1.0", "v2.3.4-beta.1").
	looseSemver = regexp.MustCompile(`^[v=]?[0-9]+(\.[0-9]+){0,2}([-+][0-9A-Za-z.+-]*)?$`)
)

// wellFormed reports whether s is a version the ecosystem's rules define;
// semantic.Parse is lenient (PEP 440 "legacy" versions sort below all
// others), which would turn garbage into "older than every fix".
func wellFormed(s, eco string) bool {
	switch eco {
	case "PyPI":
		return pep440.MatchString(s)
	case "npm":
		return looseSemver.MatchString(s)
	}
	return true
}

// NormalizeName is the matching key for a package name: PEP 503 for PyPI,
// lower case for npm (OSV has both "Axios" and "axios"), as is otherwise.
func NormalizeName(ecosystem, name string) string {
	switch baseEcosystem(ecosystem) {
	case "PyPI":
		return strings.ToLower(pep503Sep.ReplaceAllString(name, "-"))
	case "npm":
		return strings.ToLower(name)
	}
	return name
}

func baseEcosystem(e string) string {
	b, _, _ := strings.Cut(e, ":")
	return b
}

func key(ecosystem, name string) string {
	return baseEcosystem(ecosystem) + "\x00" + NormalizeName(ecosystem, name)
}

func newDB(snap Snapshot, recs []*Record) *DB {
	db := &DB{snap: snap, byPkg: make(map[string][]*Record)}
	for _, r := range recs {
		if r.Withdrawn != nil {
			continue
		}
		seen := map[string]bool{}
		for _, a := range r.Affected {
			k := key(a.Package.Ecosystem, a.Package.Name)
			if !seen[k] {
				seen[k] = true
				db.byPkg[k] = append(db.byPkg[k], r)
			}
		}
	}
	return db
}

// Records returns the advisories that name the package (not withdrawn),
// whichever versions they affect; the caller must not change them.
func (db *DB) Records(ecosystem, name string) []*Record {
	if db == nil || db.byPkg == nil {
		return nil
	}
	return db.byPkg[key(ecosystem, name)]
}

// Match returns the advisories that affect name at version in ecosystem,
// sorted by id. A version that cannot be parsed, or a panic in the version
// code, yields an error wrapping ErrVersion: the caller must refuse.
func (db *DB) Match(ecosystem, name, version string) (found []Finding, err error) {
	defer func() {
		if p := recover(); p != nil {
			found, err = nil, fmt.Errorf("%w: matching %s %s@%s: panic: %v", ErrVersion, ecosystem, name, version, p)
		}
	}()
	if db == nil || db.byPkg == nil {
		return nil, ErrUnavailable
	}
	recs := db.byPkg[key(ecosystem, name)]
	if len(recs) == 0 {
		return nil, nil
	}
	if !wellFormed(version, baseEcosystem(ecosystem)) {
		return nil, fmt.Errorf("%w: %s version %q is not well formed", ErrVersion, ecosystem, version)
	}
	v, err := db.parseVersion(version, baseEcosystem(ecosystem))
	if err != nil {
		return nil, fmt.Errorf("%w: parsing %s version %q: %w", ErrVersion, ecosystem, version, err)
	}
	want := key(ecosystem, name)
	for _, r := range recs {
		for _, a := range r.Affected {
			if key(a.Package.Ecosystem, a.Package.Name) != want {
				continue
			}
			if why := db.affects(a, v, version, baseEcosystem(ecosystem)); why != "" {
				found = append(found, Finding{ID: r.ID, Summary: r.Summary, Why: why, Fixed: db.fixedAbove(a, v, baseEcosystem(ecosystem))})
				break
			}
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].ID < found[j].ID })
	return found, nil
}

// fixedAbove returns the lowest "fixed" event version of a's ranges that
// is above v ("" when there is none or it cannot be compared).
func (db *DB) fixedAbove(a Affected, v semantic.Version, eco string) (out string) {
	defer func() {
		if recover() != nil {
			out = ""
		}
	}()
	var best semantic.Version
	for _, r := range a.Ranges {
		for _, e := range r.Events {
			if e.Fixed == "" || !wellFormed(e.Fixed, eco) {
				continue
			}
			p, err := db.parseVersion(e.Fixed, eco)
			if err != nil || p == nil {
				continue
			}
			if c, err := v.Compare(p); err != nil || c >= 0 {
				continue
			}
			if best != nil {
				if c, err := p.Compare(best); err != nil || c >= 0 {
					continue
				}
			}
			best, out = p, e.Fixed
		}
	}
	return out
}

// affects reports why a affects v ("" if it does not).
func (db *DB) affects(a Affected, v semantic.Version, raw, eco string) string {
	if len(a.Ranges) == 0 && len(a.Versions) == 0 {
		return "all versions" // an entry that names no versions covers all of them
	}
	for _, s := range a.Versions {
		if s == raw {
			return "versions"
		}
		if c, err := v.CompareStr(s); err == nil && c == 0 {
			return "versions"
		}
	}
	for _, r := range a.Ranges {
		switch r.Type {
		case "ECOSYSTEM", "SEMVER":
		default:
			continue // GIT ranges carry commits; keep looking at the others
		}
		hit, bad := db.inRange(r.Events, v, eco)
		if bad {
			return "unparsable advisory version"
		}
		if hit {
			return "range"
		}
	}
	return ""
}

// inRange evaluates one range as the OSV specification describes: events
// sorted by version ("0" lowest), introduced opens, fixed and last_affected
// close, and limit events bound from above. bad is true when an event
// version cannot be parsed or compared.
func (db *DB) inRange(events []Event, v semantic.Version, eco string) (hit, bad bool) {
	type ev struct {
		kind byte // 'i', 'f', 'l'
		zero bool
		ver  semantic.Version
	}
	evs := make([]ev, 0, len(events))
	var limits []semantic.Version
	parse := func(s string) (semantic.Version, bool) {
		if !wellFormed(s, eco) {
			return nil, false
		}
		p, err := db.parseVersion(s, eco)
		return p, err == nil && p != nil
	}
	for _, e := range events {
		var kind byte
		var s string
		switch {
		case e.Introduced != "":
			kind, s = 'i', e.Introduced
		case e.Fixed != "":
			kind, s = 'f', e.Fixed
		case e.LastAffected != "":
			kind, s = 'l', e.LastAffected
		case e.Limit != "":
			if e.Limit == "*" {
				continue // no upper bound
			}
			p, ok := parse(e.Limit)
			if !ok {
				return false, true
			}
			limits = append(limits, p)
			continue
		default:
			continue
		}
		if kind == 'i' && s == "0" {
			evs = append(evs, ev{kind: kind, zero: true})
			continue
		}
		p, ok := parse(s)
		if !ok {
			return false, true
		}
		evs = append(evs, ev{kind: kind, ver: p})
	}
	var cmpErr bool
	slices.SortStableFunc(evs, func(a, b ev) int {
		switch {
		case a.zero && b.zero:
			return 0
		case a.zero:
			return -1
		case b.zero:
			return 1
		}
		c, err := a.ver.Compare(b.ver)
		if err != nil {
			cmpErr = true
		}
		return c
	})
	if cmpErr {
		return false, true
	}
	affected := false
	for _, e := range evs {
		c := 1 // v relative to the event version
		if !e.zero {
			var err error
			if c, err = v.Compare(e.ver); err != nil {
				return false, true
			}
		}
		switch e.kind {
		case 'i':
			if c >= 0 {
				affected = true
			}
		case 'f':
			if c >= 0 {
				affected = false
			}
		case 'l':
			if c > 0 {
				affected = false
			}
		}
	}
	if affected && len(limits) > 0 {
		below := false
		for _, l := range limits {
			c, err := v.Compare(l)
			if err != nil {
				return false, true
			}
			if c < 0 {
				below = true
			}
		}
		affected = below
	}
	return affected, false
}
