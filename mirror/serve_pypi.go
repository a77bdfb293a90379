package mirror

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"sort"
	"strings"
)

const (
	simpleJSON       = "application/vnd.pypi.simple.v1+json"
	simpleHTML       = "application/vnd.pypi.simple.v1+html"
	simpleLatestJSON = "application/vnd.pypi.simple.latest+json"
	simpleLatestHTML = "application/vnd.pypi.simple.latest+html"
	textHTML         = "text/html"
	simpleAPIVersion = "1.1"
)

var simpleOffers = []string{simpleJSON, simpleLatestJSON, simpleHTML, simpleLatestHTML, textHTML}

// simpleFormat negotiates the response type for a simple-index page; the
// ?format= query parameter (PEP 691) overrides Accept.
func simpleFormat(r *http.Request) (ct string, isJSON bool) {
	accept := r.Header.Get("Accept")
	if f := r.URL.Query().Get("format"); f != "" {
		accept = f
	}
	ct = negotiate(accept, simpleOffers)
	switch ct {
	case simpleLatestJSON:
		ct = simpleJSON
	case simpleLatestHTML:
		ct = simpleHTML
	}
	if strings.TrimSpace(accept) == "" {
		ct = textHTML
	}
	return ct, ct == simpleJSON
}

func writeSimple(w http.ResponseWriter, r *http.Request, ct string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("Vary", "Accept")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

func (m *Mirror) serveSimpleRoot(w http.ResponseWriter, r *http.Request) {
	ct, isJSON := simpleFormat(r)
	if ct == "" {
		http.Error(w, "not acceptable", http.StatusNotAcceptable)
		return
	}
	body, err := m.cachedPage(r.Context(), "pypi-root|"+ct, func() ([]byte, error) { return m.renderSimpleRoot(r.Context(), isJSON) })
	if err != nil {
		m.internalError(r.Context(), w, "simple root", err)
		return
	}
	writeSimple(w, r, ct, body)
}

func (m *Mirror) renderSimpleRoot(ctx context.Context, isJSON bool) ([]byte, error) {
	rows, err := m.db.QueryContext(ctx, `SELECT name_key, MIN(name) FROM mirror_artifacts WHERE manager='pip' AND status='admitted' GROUP BY name_key ORDER BY name_key`)
	if err != nil {
		return nil, fmt.Errorf("listing projects: %w", err)
	}
	defer rows.Close()
	type proj struct {
		Name string `json:"name"`
		key  string
	}
	ps := []proj{}
	for rows.Next() {
		var p proj
		if err := rows.Scan(&p.key, &p.Name); err != nil {
			return nil, fmt.Errorf("listing projects: %w", err)
		}
		ps = append(ps, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing projects: %w", err)
	}
	if isJSON {
		return json.Marshal(map[string]any{"meta": map[string]string{"api-version": simpleAPIVersion}, "projects": ps})
	}
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n<html>\n<head>\n<meta name=\"pypi:repository-version\" content=\"" + simpleAPIVersion + "\">\n<title>Simple index</title>\n</head>\n<body>\n")
	for _, p := range ps {
		fmt.Fprintf(&b, "<a href=\"%s/\">%s</a><br/>\n", html.EscapeString(p.key), html.EscapeString(p.Name))
	}
	b.WriteString("</body>\n</html>\n")
	return []byte(b.String()), nil
}

type simpleFile struct {
	Filename       string            `json:"filename"`
	URL            string            `json:"url"`
	Hashes         map[string]string `json:"hashes"`
	RequiresPython *string           `json:"requires-python,omitempty"`
	// CoreMetadata is PEP 714's name. The JSON page leaves out the older
	// dist-info-metadata key (PEP 714 lets a repository drop it): pip
	// 23.0, Debian 12's, reads that key as a string and crashes on the
	// dict PEP 691 gives it. The HTML page keeps both attributes.
	CoreMetadata any   `json:"core-metadata"`
	Size         int64 `json:"size"`
	Yanked       bool  `json:"yanked"`
}

func (m *Mirror) serveSimpleProject(w http.ResponseWriter, r *http.Request, rest string) {
	raw, ok := unescape(strings.TrimSuffix(rest, "/"))
	if !ok || raw == "" || strings.Contains(raw, "/") || !ValidName(Pip, raw) {
		http.NotFound(w, r)
		return
	}
	norm := NormalizePyPI(raw)
	if norm != raw || !strings.HasSuffix(rest, "/") {
		u := Prefix + "pypi/simple/" + norm + "/"
		if r.URL.RawQuery != "" {
			u += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, u, http.StatusMovedPermanently)
		return
	}
	ct, isJSON := simpleFormat(r)
	if ct == "" {
		http.Error(w, "not acceptable", http.StatusNotAcceptable)
		return
	}
	body, err := m.cachedPage(r.Context(), "pypi|"+ct+"|"+norm, func() ([]byte, error) { return m.renderSimpleProject(r.Context(), norm, isJSON) })
	if err != nil {
		m.internalError(r.Context(), w, "simple project", err)
		return
	}
	if body == nil {
		http.NotFound(w, r)
		return
	}
	writeSimple(w, r, ct, body)
}

// renderSimpleProject renders a project page; nil means no admitted files.
func (m *Mirror) renderSimpleProject(ctx context.Context, norm string, isJSON bool) ([]byte, error) {
	as, err := m.queryArtifacts(ctx, `WHERE manager='pip' AND name_key=? AND status='admitted' ORDER BY filename`, norm)
	if err != nil {
		return nil, err
	}
	if len(as) == 0 {
		return nil, nil
	}
	sortByVersion(Pip, as)
	name := as[0].Name
	if isJSON {
		files := make([]simpleFile, 0, len(as))
		versions := []string{}
		seen := map[string]bool{}
		for _, a := range as {
			f := simpleFile{Filename: a.Filename, URL: fileHref(a), Hashes: map[string]string{"sha256": a.SHA256}, Size: a.Size, CoreMetadata: false}
			if a.RequiresPython != "" {
				rp := a.RequiresPython
				f.RequiresPython = &rp
			}
			if a.MetadataSHA256 != "" {
				md := map[string]string{"sha256": a.MetadataSHA256}
				f.CoreMetadata = md
			}
			files = append(files, f)
			if !seen[a.Version] {
				seen[a.Version] = true
				versions = append(versions, a.Version)
			}
		}
		return json.Marshal(map[string]any{"meta": map[string]string{"api-version": simpleAPIVersion}, "name": norm, "files": files, "versions": versions})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html>\n<head>\n<meta name=\"pypi:repository-version\" content=\"%s\">\n<title>Links for %s</title>\n</head>\n<body>\n<h1>Links for %s</h1>\n",
		simpleAPIVersion, html.EscapeString(name), html.EscapeString(name))
	for _, a := range as {
		fmt.Fprintf(&b, "<a href=\"%s#sha256=%s\"", html.EscapeString(fileHref(a)), a.SHA256)
		if a.RequiresPython != "" {
			fmt.Fprintf(&b, " data-requires-python=\"%s\"", html.EscapeString(a.RequiresPython))
		}
		if a.MetadataSHA256 != "" {
			fmt.Fprintf(&b, " data-dist-info-metadata=\"sha256=%s\" data-core-metadata=\"sha256=%s\"", a.MetadataSHA256, a.MetadataSHA256)
		}
		fmt.Fprintf(&b, ">%s</a><br/>\n", html.EscapeString(a.Filename))
	}
	b.WriteString("</body>\n</html>\n")
	return []byte(b.String()), nil
}

// fileHref is a's URL relative to its project page.
func fileHref(a Artifact) string {
	return "../../files/" + a.SHA256 + "/" + strings.ReplaceAll(urlPathEscape(a.Filename), "%2B", "+")
}

func urlPathEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~+!", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func (m *Mirror) servePipFile(w http.ResponseWriter, r *http.Request, rest string) {
	sum, fnEsc, ok := strings.Cut(rest, "/")
	fn, ok2 := unescape(fnEsc)
	if !ok || !ok2 || len(sum) != 64 || strings.Contains(fn, "/") {
		http.NotFound(w, r)
		return
	}
	wantMeta := false
	if base, cut := strings.CutSuffix(fn, ".metadata"); cut {
		fn, wantMeta = base, true
	}
	as, err := m.queryArtifacts(r.Context(), `WHERE manager='pip' AND sha256=? AND filename=? AND status='admitted'`, sum, fn)
	if err != nil {
		m.internalError(r.Context(), w, "pip file", err)
		return
	}
	if len(as) == 0 {
		http.NotFound(w, r)
		return
	}
	a := as[0]
	blob, name := a.SHA256, a.Filename
	if wantMeta {
		if a.MetadataSHA256 == "" {
			http.NotFound(w, r)
			return
		}
		blob, name = a.MetadataSHA256, a.Filename+".metadata"
	}
	m.serveBlob(w, r, blob, name, "application/octet-stream")
}

func (m *Mirror) serveBlob(w http.ResponseWriter, r *http.Request, sum, name, ct string) {
	f, err := m.blobs.open(sum)
	if err != nil {
		m.internalError(r.Context(), w, "blob "+sum, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		m.internalError(r.Context(), w, "blob "+sum, err)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("ETag", `"`+sum+`"`)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, st.ModTime(), f)
}

// sortedKeys returns m's keys in order (helper for deterministic output).
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
