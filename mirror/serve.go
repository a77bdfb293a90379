package mirror

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Prefix is the path under which Handler expects to be mounted.
const Prefix = "/mirror/"

// Handler serves the mirror read-only, without authentication, for paths
// under Prefix (mount it at "/mirror/" without stripping):
//
//	/mirror/pypi/simple/                       PEP 503 HTML / PEP 691 JSON root
//	/mirror/pypi/simple/<project>/             project page (PEP 658/714 metadata)
//	/mirror/pypi/files/<sha256>/<file>[.metadata]
//	/mirror/npm/<name>, /mirror/npm/@scope%2fname   packument (full or abbreviated)
//	/mirror/npm/<name>/-/<file>.tgz            tarball
//	/mirror/npm/-/v1/search?text=              npm search, from the catalogue
//	/mirror/npm/-/npm/v1/security/advisories/bulk   npm audit (POST), from the OSV snapshot
//
// Only admitted artifacts appear anywhere. Safe for concurrent use.
func (m *Mirror) Handler() http.Handler {
	return http.HandlerFunc(m.serveHTTP)
}

func (m *Mirror) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), Prefix+"npm/"); ok && m.serveNPMAPI(w, r, rest) {
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.EscapedPath()
	rest, ok := strings.CutPrefix(p, Prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	switch {
	case rest == "pypi/simple" || rest == "pypi":
		http.Redirect(w, r, Prefix+"pypi/simple/", http.StatusMovedPermanently)
	case rest == "pypi/simple/":
		m.serveSimpleRoot(w, r)
	case strings.HasPrefix(rest, "pypi/simple/"):
		m.serveSimpleProject(w, r, strings.TrimPrefix(rest, "pypi/simple/"))
	case strings.HasPrefix(rest, "pypi/files/"):
		m.servePipFile(w, r, strings.TrimPrefix(rest, "pypi/files/"))
	case strings.HasPrefix(rest, "npm/"):
		m.serveNPM(w, r, strings.TrimPrefix(rest, "npm/"))
	default:
		http.NotFound(w, r)
	}
}

func (m *Mirror) internalError(ctx context.Context, w http.ResponseWriter, what string, err error) {
	m.log.ErrorContext(ctx, "mirror serving failed", "what", what, "err", err)
	http.Error(w, "internal error", http.StatusInternalServerError)
}

// mediaRange is one entry of an Accept header.
type mediaRange struct {
	typ string
	q   float64
}

// parseAccept parses an Accept header into media ranges with q-values
// (default 1). Malformed q-values count as 0.
func parseAccept(h string) []mediaRange {
	var out []mediaRange
	for _, part := range strings.Split(h, ",") {
		fields := strings.Split(part, ";")
		typ := strings.ToLower(strings.TrimSpace(fields[0]))
		if typ == "" {
			continue
		}
		q := 1.0
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
			if strings.EqualFold(strings.TrimSpace(k), "q") {
				var err error
				if q, err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil || q < 0 || q > 1 {
					q = 0
				}
			}
		}
		out = append(out, mediaRange{typ, q})
	}
	return out
}

// negotiate picks the best of offers (in server preference order) for an
// Accept header, as PEP 691 describes: highest q wins, ties go to the
// server's order; wildcards match any offer. "" means nothing acceptable.
// An empty header accepts the first offer.
func negotiate(accept string, offers []string) string {
	if strings.TrimSpace(accept) == "" {
		return offers[0]
	}
	ranges := parseAccept(accept)
	best, bestQ := "", 0.0
	for _, o := range offers {
		q, spec := 0.0, -1
		for _, mr := range ranges {
			s := -1
			switch {
			case mr.typ == o:
				s = 2
			case strings.HasSuffix(mr.typ, "/*") && strings.HasPrefix(o, strings.TrimSuffix(mr.typ, "*")):
				s = 1
			case mr.typ == "*/*":
				s = 0
			}
			if s > spec {
				spec, q = s, mr.q
			}
		}
		if spec >= 0 && q > bestQ {
			best, bestQ = o, q
		}
	}
	return best
}

func requestBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func unescape(s string) (string, bool) {
	u, err := url.PathUnescape(s)
	return u, err == nil
}
