package mirror

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/mirror/osvdb"
)

// admitVulnerableAxios admits axios 1.5.0 through the operator's
// exception path (accepting exactly the testdata snapshot's advisories
// that affect it) and returns it with those advisories.
func admitVulnerableAxios(t *testing.T, m *Mirror) (Artifact, []string) {
	t.Helper()
	ctx := context.Background()
	data := plainNPM(t, "axios", "1.5.0", `, "description": "Promise based HTTP client", "keywords": ["xhr", "http"]`)
	_, err := m.AddNPMTarball(ctx, data, "test", nil)
	re, ok := err.(*RefusedError)
	if !ok || len(re.Advisories) == 0 {
		t.Fatalf("axios 1.5.0 not refused for advisories: %v", err)
	}
	a, err := m.AddNPMTarball(ctx, data, "test", re.Advisories)
	if err != nil {
		t.Fatalf("admitting axios 1.5.0 with its advisories accepted: %v", err)
	}
	return a, re.Advisories
}

// TestRealNPMAuditAndSearch: the real npm client's audit (the bulk
// advisory endpoint) reports what the mirror's OSV snapshot says of a
// lockfile, and its search lists the catalogue.
func TestRealNPMAuditAndSearch(t *testing.T) {
	t.Parallel()
	npm := needTool(t, "npm")
	ctx := context.Background()
	m := newTestMirror(t, true)
	a, ids := admitVulnerableAxios(t, m)
	data, err := os.ReadFile("testdata/npm/is-number-7.0.0.tgz")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddNPMTarball(ctx, data, "testdata", nil); err != nil {
		t.Fatal(err)
	}
	srv := serveMirror(t, m)
	registry := srv.URL + "/mirror/npm/"
	home := t.TempDir()
	env := clientEnv(home)
	proj := filepath.Join(home, "proj")
	os.MkdirAll(proj, 0o755)
	isInteg, _ := npmDigests(data)
	lock := fmt.Sprintf(`{"name": "auditproj", "version": "1.0.0", "lockfileVersion": 3, "requires": true, "packages": {
  "": {"name": "auditproj", "version": "1.0.0", "dependencies": {"axios": "1.5.0", "is-number": "7.0.0"}},
  "node_modules/axios": {"version": "1.5.0", "resolved": "%[1]saxios/-/axios-1.5.0.tgz", "integrity": %[2]q},
  "node_modules/is-number": {"version": "7.0.0", "resolved": "%[1]sis-number/-/is-number-7.0.0.tgz", "integrity": %[3]q}}}`, registry, a.Integrity, isInteg)
	os.WriteFile(filepath.Join(proj, "package.json"), []byte(`{"name":"auditproj","version":"1.0.0","dependencies":{"axios":"1.5.0","is-number":"7.0.0"}}`), 0o644)
	os.WriteFile(filepath.Join(proj, "package-lock.json"), []byte(lock), 0o644)
	out, err := run(t, proj, env, npm, "audit", "--json", "--registry", registry, "--cache", filepath.Join(home, "cache"))
	if err == nil {
		t.Fatalf("npm audit found nothing:\n%s", out)
	}
	var rep struct {
		Vulnerabilities map[string]struct {
			Severity string `json:"severity"`
			Via      []json.RawMessage
		} `json:"vulnerabilities"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &rep); err != nil {
		t.Fatalf("npm audit --json: %v\n%s", err, out)
	}
	v, ok := rep.Vulnerabilities["axios"]
	if !ok || len(rep.Vulnerabilities) != 1 {
		t.Fatalf("npm audit: %s", out)
	}
	for _, id := range ids {
		if !strings.Contains(out, "https://osv.dev/vulnerability/"+id) {
			t.Errorf("npm audit does not name %s:\n%s", id, out)
		}
	}
	if v.Severity == "" || len(v.Via) != len(ids) {
		t.Errorf("axios: severity %q, %d advisories, want %d", v.Severity, len(v.Via), len(ids))
	}

	out, err = run(t, proj, env, npm, "search", "--json", "--registry", registry, "--cache", filepath.Join(home, "cache"), "http client")
	if err != nil {
		t.Fatalf("npm search: %v\n%s", err, out)
	}
	var found []struct{ Name, Version, Description string }
	if err := json.Unmarshal([]byte(out[strings.Index(out, "["):]), &found); err != nil || len(found) != 1 || found[0].Name != "axios" || found[0].Version != "1.5.0" {
		t.Errorf("npm search http client = %+v, %v\n%s", found, err, out)
	}
	out, err = run(t, proj, env, npm, "search", "--json", "--registry", registry, "--cache", filepath.Join(home, "cache"), "is-number")
	if err != nil || !strings.Contains(out, `"is-number"`) || strings.Contains(out, "axios") {
		t.Errorf("npm search is-number: %v\n%s", err, out)
	}
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// TestNPMAuditHostile: the bulk advisory endpoint bounds what it reads
// and answers every bad request with a JSON error and the right status.
func TestNPMAuditHostile(t *testing.T) {
	t.Parallel()
	m := newTestMirror(t, true)
	srv := serveMirror(t, m)
	url := srv.URL + "/mirror/npm/" + npmBulkPath
	manyNames := map[string][]string{}
	for i := range maxAuditNames + 1 {
		manyNames[fmt.Sprintf("p%d", i)] = nil
	}
	manyNamesJSON, _ := json.Marshal(manyNames)
	manyVersions, _ := json.Marshal(map[string][]string{"axios": make([]string, maxAuditVersions+1)})
	bomb := gz(bytes.Repeat([]byte(" "), maxAuditJSON+10))
	tests := []struct {
		name   string
		method string
		enc    string
		body   []byte
		code   int
		want   string // in the body
	}{
		{name: "vulnerable", body: []byte(`{"axios": ["1.5.0", "1.6.0"]}`), code: 200, want: `"vulnerable_versions"`},
		{name: "gzip", enc: "gzip", body: gz([]byte(`{"axios": ["1.5.0"]}`)), code: 200, want: `"axios"`},
		{name: "clean version", body: []byte(`{"axios": ["99.0.0"]}`), code: 200, want: `{}`},
		{name: "unknown package", body: []byte(`{"left-pad": ["1.0.0"]}`), code: 200, want: `{}`},
		{name: "bad names and versions skipped", body: []byte(`{"../etc/passwd": ["1.0.0"], "axios": ["not a version", "` + strings.Repeat("1", 300) + `"]}`), code: 200, want: `{}`},
		{name: "GET", method: http.MethodGet, code: 405},
		{name: "not json", body: []byte(`{"axios": `), code: 400},
		{name: "array", body: []byte(`["axios"]`), code: 400},
		{name: "versions not strings", body: []byte(`{"axios": [1, 2]}`), code: 400},
		{name: "bad gzip", enc: "gzip", body: []byte("not gzip"), code: 400},
		{name: "other encoding", enc: "br", body: []byte(`{}`), code: 400},
		{name: "gzip bomb", enc: "gzip", body: bomb, code: 413},
		{name: "body too big", body: bytes.Repeat([]byte(" "), maxAuditBody+1), code: 413},
		{name: "too many names", body: manyNamesJSON, code: 413},
		{name: "too many versions", body: manyVersions, code: 413},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req, _ := http.NewRequest(method, url, bytes.NewReader(tc.body))
			if tc.enc != "" {
				req.Header.Set("Content-Encoding", tc.enc)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			buf.ReadFrom(resp.Body)
			if resp.StatusCode != tc.code || !json.Valid(buf.Bytes()) || !strings.Contains(buf.String(), tc.want) {
				t.Errorf("%d %s, want %d with %q", resp.StatusCode, buf.String()[:min(buf.Len(), 300)], tc.code, tc.want)
			}
		})
	}
}

// TestNPMAuditRanges: OSV ranges become npm ranges that npm's semver
// reads the way the OSV matcher does.
func TestNPMAuditRanges(t *testing.T) {
	t.Parallel()
	ev := func(kv ...string) []osvdb.Event {
		var out []osvdb.Event
		for i := 0; i < len(kv); i += 2 {
			switch kv[i] {
			case "i":
				out = append(out, osvdb.Event{Introduced: kv[i+1]})
			case "f":
				out = append(out, osvdb.Event{Fixed: kv[i+1]})
			case "l":
				out = append(out, osvdb.Event{LastAffected: kv[i+1]})
			}
		}
		return out
	}
	rec := func(a ...osvdb.Affected) *osvdb.Record { return &osvdb.Record{ID: "X", Affected: a} }
	pkg := osvdb.Package{Ecosystem: "npm", Name: "p"}
	tests := []struct {
		name string
		rec  *osvdb.Record
		want string
	}{
		{"from zero", rec(osvdb.Affected{Package: pkg, Ranges: []osvdb.Range{{Type: "SEMVER", Events: ev("i", "0", "f", "1.2.3")}}}), "<1.2.3"},
		{"two windows", rec(osvdb.Affected{Package: pkg, Ranges: []osvdb.Range{{Type: "ECOSYSTEM", Events: ev("i", "1.0.0", "f", "1.0.5", "i", "2.0.0", "l", "2.1.0")}}}), ">=1.0.0 <1.0.5 || >=2.0.0 <=2.1.0"},
		{"open ended", rec(osvdb.Affected{Package: pkg, Ranges: []osvdb.Range{{Type: "SEMVER", Events: ev("i", "3.0.0")}}}), ">=3.0.0"},
		{"all versions", rec(osvdb.Affected{Package: pkg}), "*"},
		{"versions list", rec(osvdb.Affected{Package: pkg, Versions: []string{"1.0.0", "1.0.1", "bad version"}}), "1.0.0 || 1.0.1"},
		{"git range ignored", rec(osvdb.Affected{Package: pkg, Ranges: []osvdb.Range{{Type: "GIT", Events: ev("i", "abc")}, {Type: "SEMVER", Events: ev("i", "0", "f", "2.0.0")}}}), "<2.0.0"},
		{"other package", rec(osvdb.Affected{Package: osvdb.Package{Ecosystem: "npm", Name: "q"}}, osvdb.Affected{Package: pkg, Versions: []string{"1.0.0"}}), "1.0.0"},
	}
	for _, tc := range tests {
		if got := npmRangeOf(tc.rec, "p"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if r := npmRangeOf(tc.rec, "p"); r != "*" {
			if _, err := ParseNPMRange(r); err != nil {
				t.Errorf("%s: %q is not an npm range: %v", tc.name, r, err)
			}
		}
	}
}

// TestNPMSearchHostile: search parameters are bounded.
func TestNPMSearchHostile(t *testing.T) {
	t.Parallel()
	m := newTestMirror(t, true)
	if _, err := m.AddNPMTarball(context.Background(), plainNPM(t, "alpha", "1.0.0", `, "description": "first", "keywords": "one, two"`), "t", nil); err != nil {
		t.Fatal(err)
	}
	srv := serveMirror(t, m)
	base := srv.URL + "/mirror/npm/" + npmSearchPath
	tests := []struct {
		query string
		code  int
		total int
	}{
		{"?text=alpha", 200, 1},
		{"?text=TWO", 200, 1},
		{"?text=first+alpha", 200, 1},
		{"?text=beta", 200, 0},
		{"?text=", 200, 1},
		{"?text=alpha&size=100000", 200, 1},
		{"?text=alpha&from=5", 200, 1},
		{"?text=" + strings.Repeat("a", maxSearchText+1), 400, 0},
		{"?text=a&size=0", 400, 0},
		{"?text=a&size=x", 400, 0},
		{"?text=a&from=-1", 400, 0},
		{"?text=a&from=99999999", 400, 0},
	}
	for _, tc := range tests {
		resp, err := http.Get(base + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Objects []json.RawMessage `json:"objects"`
			Total   int               `json:"total"`
			Error   string            `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if resp.StatusCode != tc.code || err != nil || (tc.code == 200 && doc.Total != tc.total) || (tc.code != 200 && doc.Error == "") {
			t.Errorf("%s: %d %+v %v", tc.query, resp.StatusCode, doc, err)
		}
	}
	resp, err := http.Post(base, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("POST search = %d", resp.StatusCode)
	}
}

// FuzzNPMAudit: no body makes the bulk advisory endpoint fail other than
// with a JSON answer of status 200, 400 or 413.
func FuzzNPMAudit(f *testing.F) {
	m := newTestMirror(f, true)
	h := m.Handler()
	f.Add([]byte(`{"axios": ["1.5.0"]}`), false)
	f.Add(gz([]byte(`{"axios": ["0.8.1", "1.6.0"], "lodash": ["4.17.20"]}`)), true)
	f.Add([]byte(`{"a": null}`), false)
	f.Fuzz(func(t *testing.T, body []byte, gzipped bool) {
		req := httptest.NewRequest(http.MethodPost, "/mirror/npm/"+npmBulkPath, bytes.NewReader(body))
		if gzipped {
			req.Header.Set("Content-Encoding", "gzip")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 413:
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("not JSON: %s", rec.Body)
		}
	})
}
