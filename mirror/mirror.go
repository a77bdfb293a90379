// Package mirror is the curated cache of pip wheels and npm tarballs that
// sandboxes install from. Artifacts are admitted only after archive safety
// checks and an OSV check against a local database; npm tarballs are
// served as published (the installer strips lifecycle scripts and
// dependency fields when it extracts them into a session). Admitted
// artifacts are stored by sha256 under the store dir, indexed in the
// sandboxapi store (mirror_* tables, made by the store's migrations), and served as a PEP 503/691 simple index
// and npm packuments by Handler.
package mirror

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/osv-scalibr/semantic"

	"github.com/sandboxapi/sandboxapi/mirror/osvdb"
)

// Artifact is one file known to the mirror: a wheel or an npm tarball.
type Artifact struct {
	ID       int64   `json:"id"`
	Manager  Manager `json:"manager"`
	Name     string  `json:"name"` // as published (METADATA Name, package.json name)
	Version  string  `json:"version"`
	Filename string  `json:"filename"`
	// SHA256 is the hex sha256 of the stored file (npm: the published
	// tarball, or its re-pack when Stripped is not empty).
	SHA256 string `json:"sha256"`
	// Integrity is "sha512-<base64>" of the stored file; Shasum its sha1
	// hex (npm clients still read it).
	Integrity string `json:"integrity,omitempty"`
	Shasum    string `json:"shasum,omitempty"`
	Size      int64  `json:"size"`
	// URLPath is where Handler serves the file, e.g.
	// "/mirror/pypi/files/<sha256>/<filename>".
	URLPath        string   `json:"url_path"`
	Status         Status   `json:"status"`
	Reasons        []string `json:"reasons,omitempty"`
	Advisories     []string `json:"advisories,omitempty"`      // OSV ids that matched
	Accepted       []string `json:"accepted,omitempty"`        // OSV ids an operator accepted
	OSVSnapshot    string   `json:"osv_snapshot"`              // the snapshot the artifact was last judged against
	MetadataSHA256 string   `json:"metadata_sha256,omitempty"` // wheels: sha256 of .dist-info/METADATA (PEP 658)
	RequiresPython string   `json:"requires_python,omitempty"`
	UpstreamSHA256 string   `json:"upstream_sha256,omitempty"` // npm: sha256 of the published tarball
	Source         string   `json:"source"`                    // "file:" path or upstream URL, without userinfo, query or fragment
	// Stripped lists why the stored file differs from the published one
	// (npm: an archive re-packed for data its checks did not read; files
	// admitted by older versions of the mirror, which took out
	// "scripts.postinstall", "dependencies", ...); empty when the mirror
	// serves it byte for byte as published.
	Stripped []string `json:"stripped,omitempty"`
	// Dependencies are what an npm package needs installed next to it
	// (name -> npm range), as published less those bundled in the
	// tarball; the installer checks them.
	Dependencies map[string]string `json:"dependencies,omitempty"`
	// PublishedAt is the upstream registry's publish time of this version
	// (zero when unknown, e.g. a local file).
	PublishedAt time.Time `json:"published_at,omitzero"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`

	manifest string // npm: package.json as published (as re-packed for older rows)
}

// Mirror is the service. Build it with New; the zero value is not usable.
// A *Mirror is safe for concurrent use; several processes may share one
// store (the CLI adds while the server serves).
type Mirror struct {
	cfg    Config
	db     *sql.DB
	log    *slog.Logger
	blobs  blobStore
	client *http.Client
	now    func() time.Time

	genStmt *sql.Stmt
	cache   pageCache

	mu  sync.Mutex
	osv *osvdb.DB
}

// New returns a Mirror over db (a store.Store's DB, whose migrations made
// the mirror tables; ? placeholders on every engine) storing
// files under cfg.StoreDir, which must be absolute or relative to the
// working directory (callers join it to the data dir).
func New(ctx context.Context, cfg Config, db *sql.DB, log *slog.Logger) (*Mirror, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating mirror config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating mirror store %s: %w", cfg.StoreDir, err)
	}
	if err := scrubSources(ctx, db); err != nil {
		return nil, err
	}
	genStmt, err := db.PrepareContext(ctx, `SELECT generation FROM mirror_state WHERE id = 1`)
	if err != nil {
		return nil, fmt.Errorf("preparing mirror query: %w", err)
	}
	return &Mirror{
		genStmt: genStmt,
		cfg:     cfg,
		db:      db,
		log:     log,
		blobs:   blobStore{dir: filepath.Join(cfg.StoreDir, "blobs", "sha256")},
		client:  &http.Client{Timeout: cfg.FetchTimeout.D()},
		now:     time.Now,
	}, nil
}

// Config returns the mirror's settings.
func (m *Mirror) Config() Config { return m.cfg }

func (m *Mirror) osvDir() string { return filepath.Join(m.cfg.StoreDir, "osv") }

// urlPath is where Handler serves a's file.
func urlPath(a Artifact) string {
	switch a.Manager {
	case Pip:
		return "/mirror/pypi/files/" + a.SHA256 + "/" + url.PathEscape(a.Filename)
	case NPM:
		return "/mirror/npm/" + a.Name + "/-/" + url.PathEscape(a.Filename)
	}
	return ""
}

// candidate is an artifact on its way through admission.
type candidate struct {
	a        Artifact
	blob     []byte // stored file (nil when refused before storing)
	metadata []byte // wheels: METADATA
	problem  error  // archive problem found during inspection
}

// admit runs the OSV gate on c and records the outcome. It returns the
// stored artifact, or a *RefusedError.
func (m *Mirror) admit(ctx context.Context, c candidate, accept []string) (Artifact, error) {
	a := c.a
	a.Accepted = normIDs(accept)
	refuse := func(reasons, advisories []string) (Artifact, error) {
		a.Status, a.Reasons, a.Advisories = StatusRefused, reasons, advisories
		if err := m.upsert(ctx, &a); err != nil {
			return a, err
		}
		if err := m.audit(ctx, m.entry(AuditRefusal, a, strings.Join(reasons, "; "))); err != nil {
			return a, err
		}
		return a, &RefusedError{Filename: a.Filename, Reasons: reasons, Advisories: advisories}
	}
	// Every outcome, refusals for archive problems included, names the
	// snapshot loaded at the time (none when no database is readable).
	db, dbErr := m.osvDB(ctx)
	if dbErr == nil {
		a.OSVSnapshot = db.Snapshot().ID
	}
	// A file name stays bound to its bytes while it is served (or held in
	// quarantine); replacing it needs an explicit remove first. This comes
	// first so that a refused file cannot overwrite the row of an admitted
	// one with the same name.
	prev, err := m.queryArtifacts(ctx, `WHERE manager=? AND name_key=? AND filename=? AND status IN ('admitted','quarantined') AND sha256!=?`,
		string(a.Manager), NormalizeName(a.Manager, a.Name), a.Filename, a.SHA256)
	if err != nil {
		return a, err
	}
	if len(prev) > 0 {
		reason := fmt.Sprintf("%s is already %s with different content (sha256 %s); remove it first", a.Filename, prev[0].Status, prev[0].SHA256)
		if c.problem != nil {
			reason += "; it is also refused: " + c.problem.Error()
		}
		a.Status, a.Reasons = StatusRefused, []string{reason}
		if err := m.audit(ctx, m.entry(AuditRefusal, a, reason)); err != nil {
			return a, err
		}
		return a, &RefusedError{Filename: a.Filename, Reasons: a.Reasons}
	}
	if c.problem != nil {
		return refuse([]string{c.problem.Error()}, nil)
	}
	if dbErr != nil {
		return refuse([]string{"osv database unavailable: nothing is admitted until one is imported"}, nil)
	}
	found, err := db.Match(a.Manager.Ecosystem(), a.Name, a.Version)
	if err != nil {
		return refuse([]string{fmt.Sprintf("osv check failed: %v", err)}, nil)
	}
	ids := findingIDs(found)
	// An exception names exactly the advisories that match now: ids
	// accepted in advance (matching nothing yet) would silently cover a
	// future advisory.
	if !slices.Equal(ids, a.Accepted) {
		var reasons []string
		if len(ids) > 0 {
			reasons = append(reasons, "affected by "+describe(found))
		}
		switch {
		case len(ids) == 0:
			reasons = append(reasons, fmt.Sprintf("accepted ids [%s] match no advisory affecting %s %s in osv snapshot %s: only matching advisories can be accepted",
				strings.Join(a.Accepted, " "), a.Name, a.Version, a.OSVSnapshot))
		case len(a.Accepted) > 0:
			reasons = append(reasons, fmt.Sprintf("accepted ids [%s] are not exactly the matched ids [%s]", strings.Join(a.Accepted, " "), strings.Join(ids, " ")))
		}
		return refuse(reasons, ids)
	}
	exception := len(ids) > 0
	if err := m.blobs.put(c.blob, a.SHA256); err != nil {
		return a, err
	}
	if c.metadata != nil {
		sum := sha256.Sum256(c.metadata)
		a.MetadataSHA256 = hex.EncodeToString(sum[:])
		if err := m.blobs.put(c.metadata, a.MetadataSHA256); err != nil {
			return a, err
		}
	}
	a.Status, a.Advisories, a.Reasons = StatusAdmitted, ids, nil
	if exception {
		a.Reasons = []string{"operator accepted " + strings.Join(ids, " ")}
	}
	if err := m.upsert(ctx, &a); err != nil {
		return a, err
	}
	if exception {
		if err := m.audit(ctx, m.entry(AuditException, a, "operator accepted "+describe(found))); err != nil {
			return a, err
		}
	}
	if err := m.audit(ctx, m.entry(AuditAdmission, a, strings.Join(a.Reasons, "; "))); err != nil {
		return a, err
	}
	return a, nil
}

func (m *Mirror) entry(ev AuditEvent, a Artifact, reason string) AuditEntry {
	return AuditEntry{Event: ev, Manager: a.Manager, Name: a.Name, Version: a.Version, Filename: a.Filename,
		SHA256: a.SHA256, Reason: reason, Advisories: a.Advisories, OSVSnapshot: a.OSVSnapshot}
}

func findingIDs(f []osvdb.Finding) []string {
	ids := make([]string, 0, len(f))
	for _, x := range f {
		ids = append(ids, x.ID)
	}
	return normIDs(ids)
}

func normIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func describe(f []osvdb.Finding) string {
	parts := make([]string, 0, len(f))
	for _, x := range f {
		s := x.ID
		if strings.HasPrefix(x.ID, "MAL-") {
			s += " (malicious package)"
		}
		if x.Why == "unparsable advisory version" {
			s += " (unparsable advisory version, matched to fail closed)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// AddFile admits a local file: a .whl (pip) or a .tgz (npm). Source
// distributions are refused. accept names the OSV ids an operator accepts.
func (m *Mirror) AddFile(ctx context.Context, path string, accept []string) (Artifact, error) {
	// A path that names no package file is a mistake, not a package to
	// refuse: nothing is recorded for it.
	if b := filepath.Base(path); !strings.HasSuffix(b, ".whl") && !strings.HasSuffix(b, ".tgz") && !IsSdistFilename(b) {
		return Artifact{}, fmt.Errorf("%w: %s is not a wheel (.whl), an npm tarball (.tgz) or a source distribution; "+
			"a requirements file is added with -r FILE, a package-lock.json with --lockfile FILE", ErrBadSpec, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return Artifact{}, fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, m.cfg.Limits.MaxArtifactBytes+1))
	if err != nil {
		return Artifact{}, fmt.Errorf("reading %s: %w", path, err)
	}
	base := filepath.Base(path)
	abs, _ := filepath.Abs(path)
	switch {
	case strings.HasSuffix(base, ".tgz"):
		return m.AddNPMTarball(ctx, data, "file:"+abs, accept)
	default:
		return m.AddWheel(ctx, base, data, "file:"+abs, accept)
	}
}

// AddWheel admits wheel bytes named filename (source records provenance).
func (m *Mirror) AddWheel(ctx context.Context, filename string, data []byte, source string, accept []string) (Artifact, error) {
	sum := sha256.Sum256(data)
	c := candidate{a: Artifact{Manager: Pip, Filename: filename, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)), Source: source}}
	w, err := InspectWheel(filename, data, m.cfg.Limits)
	if err != nil {
		if !IsArchiveProblem(err) {
			return Artifact{}, fmt.Errorf("inspecting %s: %w", filename, err)
		}
		c.problem = err
		c.a.Name, c.a.Version = guessPipName(filename)
		return m.admit(ctx, c, accept)
	}
	c.a.Name, c.a.Version, c.a.RequiresPython = w.Name, w.Version, w.RequiresPython
	c.a.Integrity, c.a.Shasum = npmDigests(data)
	c.blob, c.metadata = data, w.Metadata
	return m.admit(ctx, c, accept)
}

func guessPipName(fn string) (string, string) {
	if w, err := ParseWheelFilename(fn); err == nil {
		return w.Name, w.Version
	}
	base := fn
	for _, s := range sdistSuffixes {
		base = strings.TrimSuffix(base, s)
	}
	if i := strings.LastIndex(base, "-"); i > 0 {
		return base[:i], base[i+1:]
	}
	return base, ""
}

// AddNPMTarball sanitises and admits an npm tarball. want, when non-empty,
// is the spec the tarball must match.
func (m *Mirror) AddNPMTarball(ctx context.Context, data []byte, source string, accept []string) (Artifact, error) {
	return m.addNPM(ctx, data, source, accept, Spec{}, time.Time{})
}

func (m *Mirror) addNPM(ctx context.Context, data []byte, source string, accept []string, want Spec, published time.Time) (Artifact, error) {
	up := sha256.Sum256(data)
	c := candidate{a: Artifact{Manager: NPM, Name: want.Name, Version: want.Version, UpstreamSHA256: hex.EncodeToString(up[:]), Source: source}}
	p, err := SanitizeNPM(data, m.cfg.Limits)
	if err == nil && want.Name != "" && (p.Name != want.Name || p.Version != want.Version) {
		err = refusef("tarball holds %s@%s, not %s", p.Name, p.Version, want)
	}
	if err != nil {
		if !IsArchiveProblem(err) {
			return Artifact{}, fmt.Errorf("inspecting npm tarball: %w", err)
		}
		c.problem = err
		if c.a.Name == "" {
			c.a.Name, c.a.Version = "unknown", c.a.UpstreamSHA256[:12]
		}
		c.a.Filename = npmTarballName(c.a.Name, c.a.Version)
		c.a.SHA256 = c.a.UpstreamSHA256
		return m.admit(ctx, c, accept)
	}
	sum := sha256.Sum256(p.Tarball)
	c.a.Name, c.a.Version = p.Name, p.Version
	c.a.Filename = npmTarballName(p.Name, p.Version)
	c.a.SHA256, c.a.Integrity, c.a.Shasum, c.a.Size = hex.EncodeToString(sum[:]), p.Integrity, p.Shasum, int64(len(p.Tarball))
	c.a.manifest = string(p.Manifest)
	c.a.Stripped, c.a.Dependencies = p.Removed, p.Dependencies
	c.a.PublishedAt = published
	c.blob = p.Tarball
	if len(p.Removed) > 0 {
		m.log.InfoContext(ctx, "mirror re-packed npm package", "name", p.Name, "version", p.Version, "removed", p.Removed)
	}
	return m.admit(ctx, c, accept)
}

// List returns artifacts, all of them when manager is "", ordered by
// manager, name and filename.
func (m *Mirror) List(ctx context.Context, manager Manager) ([]Artifact, error) {
	if manager == "" {
		return m.queryArtifacts(ctx, `ORDER BY manager, name_key, filename`)
	}
	return m.queryArtifacts(ctx, `WHERE manager=? ORDER BY name_key, filename`, string(manager))
}

// Remove withdraws every file of name at version (all versions when
// version is ""). It returns the artifacts it changed.
func (m *Mirror) Remove(ctx context.Context, manager Manager, name, version string) ([]Artifact, error) {
	as, err := m.queryArtifacts(ctx, `WHERE manager=? AND name_key=? AND status!='removed'`, string(manager), NormalizeName(manager, name))
	if err != nil {
		return nil, err
	}
	var out []Artifact
	for _, a := range as {
		if version != "" && !versionEqual(manager, a.Version, version) {
			continue
		}
		if err := m.setStatus(ctx, &a, StatusRemoved, []string{"removed by operator"}, a.Advisories); err != nil {
			return out, err
		}
		if err := m.audit(ctx, m.entry(AuditRemoval, a, "removed by operator")); err != nil {
			return out, err
		}
		if err := m.dropUnusedBlobs(ctx, a.SHA256, a.MetadataSHA256); err != nil {
			return out, err
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("removing %s %s %s: %w", manager, name, version, ErrNotFound)
	}
	return out, nil
}

// dropUnusedBlobs deletes stored files that no artifact still served or
// held in quarantine refers to: a removed artifact's bytes leave the disk
// (its record and audit entries stay). Adding it again stores them anew.
func (m *Mirror) dropUnusedBlobs(ctx context.Context, sums ...string) error {
	for _, sum := range sums {
		if sum == "" {
			continue
		}
		var n int
		err := m.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM mirror_artifacts WHERE status!='removed' AND (sha256=? OR metadata_sha256=?)`, sum, sum).Scan(&n)
		if err != nil {
			return fmt.Errorf("checking blob use: %w", err)
		}
		if n == 0 {
			if err := m.blobs.remove(sum); err != nil {
				return err
			}
		}
	}
	return nil
}

func versionEqual(mgr Manager, a, b string) bool {
	if a == b {
		return true
	}
	return mgr == Pip && sameVersion(a, b)
}

// Lookup finds the file of name at version ("" = newest admitted) for the
// installer. An admitted artifact returns a nil error. A known but not
// admitted one returns the artifact (with status and reasons) and an error
// wrapping ErrNotAdmitted; an unknown one ErrNotFound. For pip, when a
// version has several wheels, a pure ("none-any") wheel is preferred.
func (m *Mirror) Lookup(ctx context.Context, manager Manager, name, version string) (Artifact, error) {
	as, err := m.queryArtifacts(ctx, `WHERE manager=? AND name_key=?`, string(manager), NormalizeName(manager, name))
	if err != nil {
		return Artifact{}, err
	}
	var admitted, other []Artifact
	for _, a := range as {
		if version != "" && !versionEqual(manager, a.Version, version) {
			continue
		}
		if a.Status == StatusAdmitted {
			admitted = append(admitted, a)
		} else {
			other = append(other, a)
		}
	}
	if len(admitted) == 0 {
		if len(other) > 0 {
			a := other[0]
			return a, fmt.Errorf("looking up %s %s %s: %s: %w", manager, name, version, a.Status, ErrNotAdmitted)
		}
		return Artifact{}, fmt.Errorf("looking up %s %s %s: %w", manager, name, version, ErrNotFound)
	}
	sortByVersion(manager, admitted)
	best := admitted[len(admitted)-1]
	for _, a := range admitted {
		if versionEqual(manager, a.Version, best.Version) && strings.HasSuffix(a.Filename, "-none-any.whl") {
			return a, nil
		}
	}
	return best, nil
}

// sortByVersion orders artifacts by ascending version (PEP 440 or semver),
// then filename; unparsable versions sort first.
func sortByVersion(mgr Manager, as []Artifact) {
	eco := mgr.Ecosystem()
	parsed := make(map[string]semantic.Version, len(as))
	for _, a := range as {
		if _, ok := parsed[a.Version]; !ok {
			parsed[a.Version] = safeParse(a.Version, eco)
		}
	}
	sort.SliceStable(as, func(i, j int) bool {
		c := compareVersions(parsed[as[i].Version], parsed[as[j].Version])
		if c != 0 {
			return c < 0
		}
		return as[i].Filename < as[j].Filename
	})
}

func safeParse(v, eco string) (out semantic.Version) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	p, err := semantic.Parse(v, eco)
	if err != nil {
		return nil
	}
	return p
}

func compareVersions(a, b semantic.Version) (c int) {
	defer func() {
		if recover() != nil {
			c = 0
		}
	}()
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	c, err := a.Compare(b)
	if err != nil {
		return 0
	}
	return c
}

// Close releases the mirror's prepared statements; the *sql.DB stays open
// (the caller owns it).
func (m *Mirror) Close() error {
	if m.genStmt == nil {
		return nil
	}
	return m.genStmt.Close()
}
