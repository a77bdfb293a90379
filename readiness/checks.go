package readiness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/redact"
)

// FirewallChecker is anything whose host rules can be checked
// (egress.Network).
type FirewallChecker interface {
	FirewallIntact(ctx context.Context) error
}

// Firewall passes when every checker's rules are present and intact. With
// no checkers it fails: there is nothing fencing the sandboxes.
func Firewall(named map[string]FirewallChecker) Func {
	return func(ctx context.Context) (string, error) {
		if len(named) == 0 {
			return "", errors.New("no firewall configured")
		}
		var errs []error
		var ok []string
		for name, fw := range named {
			if err := fw.FirewallIntact(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				continue
			}
			ok = append(ok, name)
		}
		if err := errors.Join(errs...); err != nil {
			return "", err
		}
		return "rules intact: " + strings.Join(ok, ", "), nil
	}
}

// Probe is one topology measurement (real connection attempts from a
// canary sandbox); it returns what it saw and an error when anything was
// reachable that must not be, or unreachable that must be.
type Probe func(ctx context.Context) (string, error)

// Topology runs every probe; all must pass.
func Topology(probes map[string]Probe) Func {
	return func(ctx context.Context) (string, error) {
		if len(probes) == 0 {
			return "", errors.New("no topology probes configured")
		}
		var parts []string
		var errs []error
		for name, p := range probes {
			d, err := p(ctx)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				continue
			}
			parts = append(parts, name+": "+d)
		}
		if err := errors.Join(errs...); err != nil {
			return strings.Join(parts, "; "), err
		}
		return strings.Join(parts, "; "), nil
	}
}

// MirrorFile is one admitted artifact as the mirror's index records it.
type MirrorFile struct {
	Manager  string // pip or npm
	Name     string
	Version  string
	Filename string
	SHA256   string
	URLPath  string
}

// MirrorIndex lists what the mirror says it serves.
type MirrorIndex interface {
	Admitted(ctx context.Context) ([]MirrorFile, error)
}

// Mirror checks the mirror over HTTP at baseURL: the simple index is
// served and lists every admitted pip project; each project's index page
// (pip: the simple project page, npm: the packument) lists its admitted
// files or versions; and admitted files are downloaded and re-hashed
// against the index. Pages and files are taken in turns, up to
// max(sample, 8) pages and sample files per run, so successive runs cover
// every one of them at a bounded cost per run.
func Mirror(idx MirrorIndex, baseURL string, sample int) Func {
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	pages := max(sample, 8)
	var mu sync.Mutex
	var pageTurn, fileTurn int
	return func(ctx context.Context) (string, error) {
		files, err := idx.Admitted(ctx)
		if err != nil {
			return "", fmt.Errorf("reading mirror index: %w", err)
		}
		var root struct {
			Projects []struct {
				Name string `json:"name"`
			} `json:"projects"`
		}
		body, err := get(ctx, client, baseURL+"/mirror/pypi/simple/", pypiJSON, 8<<20)
		if err != nil {
			return "", fmt.Errorf("mirror not serving: %w", err)
		}
		if err := json.Unmarshal(body, &root); err != nil {
			return "", fmt.Errorf("mirror simple index unreadable: %w", err)
		}
		served := map[string]bool{}
		for _, p := range root.Projects {
			served[normPip(p.Name)] = true
		}
		for _, f := range files {
			if f.Manager == "pip" && !served[normPip(f.Name)] {
				return "", fmt.Errorf("index inconsistent: admitted %s missing from the simple index", f.Name)
			}
		}

		projects := groupProjects(files)
		sorted := append([]MirrorFile(nil), files...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].URLPath < sorted[j].URLPath })
		mu.Lock()
		pickedPages := turn(projects, &pageTurn, pages)
		pickedFiles := turn(sorted, &fileTurn, sample)
		mu.Unlock()

		for _, p := range pickedPages {
			if err := checkProjectPage(ctx, client, baseURL, p); err != nil {
				return "", err
			}
		}
		for _, f := range pickedFiles {
			b, err := get(ctx, client, baseURL+f.URLPath, "", 1<<30)
			if err != nil {
				return "", fmt.Errorf("serving %s: %w", f.Filename, err)
			}
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != f.SHA256 {
				return "", fmt.Errorf("served %s does not match its recorded sha256", f.Filename)
			}
		}
		return fmt.Sprintf("serving; %d admitted artifacts, %d pip projects indexed, %d of %d project pages and %d of %d files checked this run",
			len(files), len(root.Projects), len(pickedPages), len(projects), len(pickedFiles), len(files)), nil
	}
}

const (
	pypiJSON = "application/vnd.pypi.simple.v1+json"
	npmJSON  = "application/json"
)

// project is one package name's admitted files.
type project struct {
	manager, name string
	files         []MirrorFile
}

func groupProjects(files []MirrorFile) []project {
	byKey := map[string]*project{}
	for _, f := range files {
		name := f.Name
		if f.Manager == "pip" {
			name = normPip(name)
		}
		k := f.Manager + " " + name
		if byKey[k] == nil {
			byKey[k] = &project{manager: f.Manager, name: name}
		}
		byKey[k].files = append(byKey[k].files, f)
	}
	out := make([]project, 0, len(byKey))
	for _, p := range byKey {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].manager != out[j].manager {
			return out[i].manager < out[j].manager
		}
		return out[i].name < out[j].name
	})
	return out
}

// turn returns up to n items starting at *at (wrapping around) and moves
// *at past them.
func turn[T any](items []T, at *int, n int) []T {
	if len(items) == 0 || n <= 0 {
		return nil
	}
	if n >= len(items) {
		return items
	}
	start := *at % len(items)
	out := make([]T, 0, n)
	for k := range n {
		out = append(out, items[(start+k)%len(items)])
	}
	*at = (start + n) % len(items)
	return out
}

// checkProjectPage fetches a project's index page and checks that it
// lists every admitted file (pip, with its recorded sha256) or version
// (npm).
func checkProjectPage(ctx context.Context, c *http.Client, baseURL string, p project) error {
	switch p.manager {
	case "pip":
		body, err := get(ctx, c, baseURL+"/mirror/pypi/simple/"+url.PathEscape(p.name)+"/", pypiJSON, 32<<20)
		if err != nil {
			return fmt.Errorf("index page of %s: %w", p.name, err)
		}
		var page struct {
			Files []struct {
				Filename string            `json:"filename"`
				Hashes   map[string]string `json:"hashes"`
			} `json:"files"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("index page of %s unreadable: %w", p.name, err)
		}
		listed := map[string]string{}
		for _, f := range page.Files {
			listed[f.Filename] = f.Hashes["sha256"]
		}
		for _, f := range p.files {
			h, ok := listed[f.Filename]
			if !ok {
				return fmt.Errorf("index inconsistent: admitted %s missing from the index page of %s", f.Filename, p.name)
			}
			if h != f.SHA256 {
				return fmt.Errorf("index inconsistent: the index page of %s lists %s with another sha256", p.name, f.Filename)
			}
		}
	case "npm":
		body, err := get(ctx, c, baseURL+"/mirror/npm/"+url.PathEscape(p.name), npmJSON, 32<<20)
		if err != nil {
			return fmt.Errorf("packument of %s: %w", p.name, err)
		}
		var doc struct {
			Versions map[string]json.RawMessage `json:"versions"`
		}
		if err := json.Unmarshal(body, &doc); err != nil {
			return fmt.Errorf("packument of %s unreadable: %w", p.name, err)
		}
		for _, f := range p.files {
			if _, ok := doc.Versions[f.Version]; !ok {
				return fmt.Errorf("index inconsistent: admitted %s@%s missing from its packument", p.name, f.Version)
			}
		}
	default:
		return fmt.Errorf("admitted %s has unknown manager %q", p.name, p.manager)
	}
	return nil
}

var pipSeparators = regexp.MustCompile(`[-_.]+`)

// normPip is the PEP 503 normalised name.
func normPip(s string) string {
	return pipSeparators.ReplaceAllString(strings.ToLower(s), "-")
}

func get(ctx context.Context, c *http.Client, url, accept string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, redact.Err(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, redact.Err(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", req.URL.Path, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, limit))
}

// OSVInfo is the OSV database's state.
type OSVInfo struct {
	SnapshotID string
	ImportedAt time.Time
	// NewestModified is the newest "modified" time of any record: a dump
	// imported today whose newest record is years old is old data.
	NewestModified time.Time
	Records        int
	Age            time.Duration // since ImportedAt
	MaxAge         time.Duration
	Stale          bool // Age > MaxAge, as the source judged it
	// MaxRecordAge, when positive, bounds how long ago NewestModified may
	// be; zero shows that age without gating on it.
	MaxRecordAge time.Duration
}

// OSVSource reports on the OSV database and judges every served artifact
// against the current one (quarantining what it now affects).
type OSVSource interface {
	OSVInfo(ctx context.Context) (OSVInfo, error)
	Judge(ctx context.Context) (checked, quarantined int, err error)
}

// Errors of the OSV check.
var (
	ErrOSVNotLoaded = errors.New("osv database not loaded")
	ErrOSVTooOld    = errors.New("osv database too old")
)

// OSV passes when the database is loaded, was imported no longer than its
// max age ago, its newest record was modified no longer than MaxRecordAge
// ago when that is set (so an old dump imported today is not fresh), and
// every served artifact has been judged against it.
func OSV(src OSVSource) Func {
	return osvCheck(src, time.Now)
}

func osvCheck(src OSVSource, now func() time.Time) Func {
	return func(ctx context.Context) (string, error) {
		st, err := src.OSVInfo(ctx)
		if err != nil {
			return "", fmt.Errorf("osv database: %w", err)
		}
		if st.SnapshotID == "" {
			return "", ErrOSVNotLoaded
		}
		t := now()
		modAge := t.Sub(st.NewestModified)
		newest := "unknown"
		if !st.NewestModified.IsZero() {
			newest = fmt.Sprintf("%s (%s ago)", st.NewestModified.UTC().Format(time.RFC3339), modAge.Round(time.Second))
		}
		d := fmt.Sprintf("snapshot %s, %d records, imported %s (%s ago), newest record modified %s, max age %s",
			st.SnapshotID, st.Records, st.ImportedAt.UTC().Format(time.RFC3339), st.Age.Round(time.Second), newest, st.MaxAge)
		switch {
		case st.MaxAge <= 0:
			return d, fmt.Errorf("%w: no max age set", ErrOSVTooOld)
		case st.Stale || st.Age > st.MaxAge:
			return d, fmt.Errorf("%w: imported more than %s ago", ErrOSVTooOld, st.MaxAge)
		case st.MaxRecordAge > 0 && st.NewestModified.IsZero():
			return d, fmt.Errorf("%w: the newest record's modified time is unknown", ErrOSVTooOld)
		case st.MaxRecordAge > 0 && modAge > st.MaxRecordAge:
			return d, fmt.Errorf("%w: its newest record was modified more than %s ago (osv_max_record_age)", ErrOSVTooOld, st.MaxRecordAge)
		}
		checked, quarantined, err := src.Judge(ctx)
		if err != nil {
			return d, fmt.Errorf("judging served artifacts: %w", err)
		}
		return fmt.Sprintf("%s; %d served artifacts judged, %d newly quarantined", d, checked, quarantined), nil
	}
}
