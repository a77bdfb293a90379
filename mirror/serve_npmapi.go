package mirror

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/mirror/osvdb"
)

// The npm registry's own endpoints besides packuments and tarballs, as
// npm 7+ calls them under the registry URL.
const (
	npmSearchPath = "-/v1/search"
	npmBulkPath   = "-/npm/v1/security/advisories/bulk"
)

// Limits of npm search and the bulk advisory endpoint. A search answers
// at most maxSearchSize packages (npm asks for 20, at most 250 upstream);
// an audit body is at most maxAuditBody bytes as sent and maxAuditJSON
// once un-gzipped, naming at most maxAuditNames packages and
// maxAuditVersions versions in all (a lockfile of thousands of packages
// fits; the reply is bounded by the same counts).
const (
	maxSearchText    = 256
	maxSearchSize    = 250
	maxSearchFrom    = 10000
	maxAuditBody     = 4 << 20
	maxAuditJSON     = 16 << 20
	maxAuditNames    = 20000
	maxAuditVersions = 50000
)

// serveNPMAPI answers npm search and npm audit; ok is false when rest
// names neither.
func (m *Mirror) serveNPMAPI(w http.ResponseWriter, r *http.Request, rest string) bool {
	switch rest {
	case npmSearchPath:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			npmError(w, http.StatusMethodNotAllowed, "use GET")
			return true
		}
		m.serveNPMSearch(w, r)
	case npmBulkPath:
		if r.Method != http.MethodPost {
			npmError(w, http.StatusMethodNotAllowed, "use POST")
			return true
		}
		m.serveNPMAudit(w, r)
	default:
		return false
	}
	return true
}

func npmError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Header().Set("Content-Type", npmFull)
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func writeNPMJSON(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		npmError(w, http.StatusInternalServerError, "encoding reply")
		return
	}
	h := w.Header()
	h.Set("Content-Type", npmFull)
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}

// npmSearchResult is one package of a search reply, in the registry's
// shape (what libnpmsearch reads).
type npmSearchResult struct {
	Package struct {
		Name        string            `json:"name"`
		Version     string            `json:"version"`
		Description string            `json:"description,omitempty"`
		Keywords    []string          `json:"keywords,omitempty"`
		Date        string            `json:"date,omitempty"`
		Links       map[string]string `json:"links"`
		Publisher   *npmUser          `json:"publisher,omitempty"`
		Maintainers []npmUser         `json:"maintainers"`
	} `json:"package"`
	Score struct {
		Final  float64            `json:"final"`
		Detail map[string]float64 `json:"detail"`
	} `json:"score"`
	SearchScore float64 `json:"searchScore"`
}

type npmUser struct {
	Username string `json:"username"`
}

// serveNPMSearch answers GET -/v1/search?text=&size=&from= from the
// catalogue: admitted packages whose name, description or keywords hold
// every word of text (case-insensitive), the newest admitted version of
// each, exact name matches first, then by name.
func (m *Mirror) serveNPMSearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	text := strings.TrimSpace(q.Get("text"))
	if len(text) > maxSearchText {
		npmError(w, http.StatusBadRequest, fmt.Sprintf("text is over %d bytes", maxSearchText))
		return
	}
	size, from := 20, 0
	if s := q.Get("size"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			npmError(w, http.StatusBadRequest, "size must be a positive number")
			return
		}
		size = min(n, maxSearchSize)
	}
	if s := q.Get("from"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxSearchFrom {
			npmError(w, http.StatusBadRequest, fmt.Sprintf("from must be 0 to %d", maxSearchFrom))
			return
		}
		from = n
	}
	as, err := m.queryArtifacts(r.Context(), `WHERE manager='npm' AND status='admitted'`)
	if err != nil {
		m.internalError(r.Context(), w, "npm search", err)
		return
	}
	// The newest admitted version of each package.
	byName := map[string][]Artifact{}
	for _, a := range as {
		k := NormalizeName(NPM, a.Name)
		byName[k] = append(byName[k], a)
	}
	words := strings.Fields(strings.ToLower(text))
	type hit struct {
		res   npmSearchResult
		exact bool
	}
	var hits []hit
	for _, versions := range byName {
		sortByVersion(NPM, versions)
		a := versions[len(versions)-1]
		var man struct {
			Description string          `json:"description"`
			Keywords    json.RawMessage `json:"keywords"`
		}
		_ = json.Unmarshal([]byte(a.manifest), &man)
		var keywords []string
		if json.Unmarshal(man.Keywords, &keywords) != nil {
			var one string
			if json.Unmarshal(man.Keywords, &one) == nil {
				keywords = strings.Fields(strings.ReplaceAll(one, ",", " "))
			}
		}
		hay := strings.ToLower(a.Name + "\n" + man.Description + "\n" + strings.Join(keywords, "\n"))
		if !allIn(words, hay) {
			continue
		}
		var res npmSearchResult
		res.Package.Name, res.Package.Version = a.Name, a.Version
		res.Package.Description, res.Package.Keywords = truncate(man.Description, 1024), keywords[:min(len(keywords), 32)]
		published := a.PublishedAt
		if published.IsZero() {
			published = a.CreatedAt
		}
		res.Package.Date = published.Format(time.RFC3339Nano)
		res.Package.Links = map[string]string{"npm": requestBase(r) + "/mirror/npm/" + a.Name}
		res.Package.Maintainers = []npmUser{}
		res.Score.Final, res.Score.Detail = 1, map[string]float64{"quality": 1, "popularity": 1, "maintenance": 1}
		res.SearchScore = 1
		hits = append(hits, hit{res: res, exact: len(words) > 0 && strings.ToLower(a.Name) == strings.Join(words, " ")})
	}
	slices.SortFunc(hits, func(a, b hit) int {
		if a.exact != b.exact {
			if a.exact {
				return -1
			}
			return 1
		}
		return strings.Compare(a.res.Package.Name, b.res.Package.Name)
	})
	objects := []npmSearchResult{}
	for i := from; i < len(hits) && len(objects) < size; i++ {
		objects = append(objects, hits[i].res)
	}
	writeNPMJSON(w, r, map[string]any{"objects": objects, "total": len(hits), "time": m.now().UTC().Format(time.RFC1123)})
}

func allIn(words []string, hay string) bool {
	for _, w := range words {
		if !strings.Contains(hay, w) {
			return false
		}
	}
	return true
}

// NPMAdvisory is one advisory of a bulk audit reply, in the shape npm 7+
// reads (@npmcli/metavuln-calculator). ID is a number derived from the
// OSV id (FNV-1a, 32 bits), which URL names.
type NPMAdvisory struct {
	ID                 uint32   `json:"id"`
	URL                string   `json:"url"`
	Title              string   `json:"title"`
	Severity           string   `json:"severity"`
	VulnerableVersions string   `json:"vulnerable_versions"`
	CWE                []string `json:"cwe"`
	CVSS               struct {
		Score        float64 `json:"score"`
		VectorString *string `json:"vectorString"`
	} `json:"cvss"`
}

// serveNPMAudit answers POST -/npm/v1/security/advisories/bulk: the body
// is {name: [versions]} (gzip allowed), the reply {name: [advisory]} with
// every advisory of the loaded OSV snapshot that affects one of the
// versions given; names without one are left out.
func (m *Mirror) serveNPMAudit(w http.ResponseWriter, r *http.Request) {
	req, err := readAuditBody(w, r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) || errors.Is(err, errAuditTooLarge) {
			npmError(w, http.StatusRequestEntityTooLarge, err.Error())
			return
		}
		npmError(w, http.StatusBadRequest, err.Error())
		return
	}
	db, err := m.osvDB(r.Context())
	if err != nil {
		npmError(w, http.StatusServiceUnavailable, "the mirror has no OSV database loaded")
		return
	}
	out := map[string][]NPMAdvisory{}
	for name, versions := range req {
		if !ValidName(NPM, name) {
			continue
		}
		if advs := npmAdvisories(db, name, versions); len(advs) > 0 {
			out[name] = advs
		}
	}
	writeNPMJSON(w, r, out)
}

var errAuditTooLarge = errors.New("audit request too large")

// readAuditBody reads and bounds a bulk audit request.
func readAuditBody(w http.ResponseWriter, r *http.Request) (map[string][]string, error) {
	var body io.Reader = http.MaxBytesReader(w, r.Body, maxAuditBody)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, fmt.Errorf("reading gzip body: %w", err)
		}
		defer zr.Close()
		body = zr
	default:
		return nil, fmt.Errorf("content encoding %q: want gzip or none", truncate(enc, 32))
	}
	b, err := io.ReadAll(io.LimitReader(body, maxAuditJSON+1))
	if err != nil {
		return nil, fmt.Errorf("reading body: %w", err)
	}
	if len(b) > maxAuditJSON {
		return nil, fmt.Errorf("%w: over %d bytes un-gzipped", errAuditTooLarge, maxAuditJSON)
	}
	var req map[string][]string
	if err := json.Unmarshal(b, &req); err != nil {
		return nil, fmt.Errorf("body must be a JSON object of package names to lists of versions: %w", err)
	}
	if len(req) > maxAuditNames {
		return nil, fmt.Errorf("%w: %d packages, at most %d", errAuditTooLarge, len(req), maxAuditNames)
	}
	n := 0
	for _, vs := range req {
		n += len(vs)
	}
	if n > maxAuditVersions {
		return nil, fmt.Errorf("%w: %d versions, at most %d", errAuditTooLarge, n, maxAuditVersions)
	}
	return req, nil
}

// npmAdvisories lists the advisories of db that affect name at one of
// versions, sorted by OSV id.
func npmAdvisories(db *osvdb.DB, name string, versions []string) []NPMAdvisory {
	recs := db.Records("npm", name)
	if len(recs) == 0 {
		return nil
	}
	hit := map[string]bool{}
	for _, v := range versions {
		if len(v) > 256 || !ValidVersion(NPM, v) {
			continue
		}
		found, err := db.Match("npm", name, v)
		if err != nil {
			continue
		}
		for _, f := range found {
			hit[f.ID] = true
		}
	}
	var out []NPMAdvisory
	for _, rec := range recs {
		if !hit[rec.ID] {
			continue
		}
		out = append(out, toNPMAdvisory(rec, name))
	}
	slices.SortFunc(out, func(a, b NPMAdvisory) int { return strings.Compare(a.URL, b.URL) })
	return out
}

func toNPMAdvisory(rec *osvdb.Record, name string) NPMAdvisory {
	h := fnv.New32a()
	h.Write([]byte(rec.ID))
	a := NPMAdvisory{ID: h.Sum32(), URL: "https://osv.dev/vulnerability/" + rec.ID, Title: rec.Summary, CWE: []string{}}
	if a.Title == "" {
		a.Title = rec.ID
	}
	if strings.HasPrefix(rec.ID, "MAL-") {
		a.Title = "Malicious package (" + rec.ID + ")"
	}
	switch strings.ToUpper(rec.DatabaseSpecific.Severity) {
	case "LOW":
		a.Severity = "low"
	case "MODERATE", "MEDIUM":
		a.Severity = "moderate"
	case "CRITICAL":
		a.Severity = "critical"
	default:
		// HIGH, and records that say nothing (malicious packages):
		// npm's own default for an advisory without a severity.
		a.Severity = "high"
	}
	for _, c := range rec.DatabaseSpecific.CWEIDs {
		if len(a.CWE) < 16 {
			a.CWE = append(a.CWE, truncate(c, 32))
		}
	}
	for _, s := range rec.Severity {
		if strings.HasPrefix(s.Type, "CVSS_V3") && strings.HasPrefix(s.Score, "CVSS:3") && len(s.Score) <= 200 {
			v := s.Score
			a.CVSS.VectorString = &v
			break
		}
	}
	a.VulnerableVersions = npmRangeOf(rec, name)
	return a
}

// npmRangeOf writes the versions rec affects of name as an npm range
// (">=1.0.0 <1.2.3 || 2.0.0"); "*" when an entry names no versions.
func npmRangeOf(rec *osvdb.Record, name string) string {
	var parts []string
	for _, a := range rec.Affected {
		if !strings.EqualFold(a.Package.Ecosystem, "npm") || NormalizeName(NPM, a.Package.Name) != NormalizeName(NPM, name) {
			continue
		}
		if len(a.Ranges) == 0 && len(a.Versions) == 0 {
			return "*"
		}
		for _, r := range a.Ranges {
			if r.Type != "SEMVER" && r.Type != "ECOSYSTEM" {
				continue
			}
			lower, open := "", false
			for _, e := range r.Events {
				switch {
				case e.Introduced != "":
					lower, open = e.Introduced, true
				case e.Fixed != "" && open:
					parts = append(parts, bound(lower, "<"+e.Fixed))
					open = false
				case e.LastAffected != "" && open:
					parts = append(parts, bound(lower, "<="+e.LastAffected))
					open = false
				}
			}
			if open {
				parts = append(parts, bound(lower, ""))
			}
		}
		for _, v := range a.Versions {
			if ValidVersion(NPM, v) && !slices.Contains(parts, v) {
				parts = append(parts, v)
			}
		}
	}
	if len(parts) == 0 {
		return "*"
	}
	if len(parts) > 64 {
		return "*" // a record naming this many versions: fail closed
	}
	return strings.Join(parts, " || ")
}

func bound(lower, upper string) string {
	var b []string
	if lower != "" && lower != "0" {
		b = append(b, ">="+lower)
	}
	if upper != "" {
		b = append(b, upper)
	}
	if len(b) == 0 {
		return "*"
	}
	return strings.Join(b, " ")
}
