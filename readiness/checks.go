package readiness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
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
// served and lists every admitted pip project, and a random sample of up
// to sample admitted files is downloaded and re-hashed against the index.
func Mirror(idx MirrorIndex, baseURL string, sample int) Func {
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
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
		body, err := get(ctx, client, baseURL+"/mirror/pypi/simple/", "application/vnd.pypi.simple.v1+json", 8<<20)
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
		picked := files
		if len(picked) > sample {
			picked = make([]MirrorFile, len(files))
			copy(picked, files)
			rand.Shuffle(len(picked), func(i, j int) { picked[i], picked[j] = picked[j], picked[i] })
			picked = picked[:sample]
		}
		for _, f := range picked {
			b, err := get(ctx, client, baseURL+f.URLPath, "", 1<<30)
			if err != nil {
				return "", fmt.Errorf("serving %s: %w", f.Filename, err)
			}
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != f.SHA256 {
				return "", fmt.Errorf("served %s does not match its recorded sha256", f.Filename)
			}
		}
		return fmt.Sprintf("serving; %d admitted artifacts, %d pip projects indexed, %d re-hashed", len(files), len(root.Projects), len(picked)), nil
	}
}

func normPip(s string) string {
	return strings.NewReplacer("_", "-", ".", "-").Replace(strings.ToLower(s))
}

func get(ctx context.Context, c *http.Client, url, accept string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
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
// max age ago, its newest record was modified no longer than the same max
// age ago (so an old dump imported today is not fresh), and every served
// artifact has been judged against it.
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
		case st.NewestModified.IsZero():
			return d, fmt.Errorf("%w: the newest record's modified time is unknown", ErrOSVTooOld)
		case modAge > st.MaxAge:
			return d, fmt.Errorf("%w: its newest record was modified more than %s ago", ErrOSVTooOld, st.MaxAge)
		}
		checked, quarantined, err := src.Judge(ctx)
		if err != nil {
			return d, fmt.Errorf("judging served artifacts: %w", err)
		}
		return fmt.Sprintf("%s; %d served artifacts judged, %d newly quarantined", d, checked, quarantined), nil
	}
}
