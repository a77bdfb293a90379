package mirror

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type resp struct {
	code int
	ct   string
	body string
}

func get(t testing.TB, u, accept string) resp {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return resp{r.StatusCode, r.Header.Get("Content-Type"), string(b)}
}

func TestSimpleIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	a, err := m.AddFile(ctx, "testdata/wheels/wheel-0.43.0-py3-none-any.whl", nil)
	if err != nil {
		t.Fatal(err)
	}
	fn, data := buildWheel(t, wheelSpec{name: "pip", version: "24.2"})
	m.AddWheel(ctx, fn, data, "test", nil) // refused: must not appear
	srv := serveMirror(t, m)
	pipAccept := "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01"

	root := get(t, srv.URL+"/mirror/pypi/simple/", "")
	if root.code != 200 || root.ct != "text/html" || !strings.Contains(root.body, `<a href="wheel/">wheel</a>`) || strings.Contains(root.body, "pip") {
		t.Errorf("root html = %+v", root)
	}
	rj := get(t, srv.URL+"/mirror/pypi/simple/", pipAccept)
	if rj.ct != simpleJSON || !strings.Contains(rj.body, `"projects":[{"name":"wheel"}]`) {
		t.Errorf("root json = %+v", rj)
	}
	html := get(t, srv.URL+"/mirror/pypi/simple/wheel/", "text/html")
	wantLink := `<a href="../../files/` + a.SHA256 + `/wheel-0.43.0-py3-none-any.whl#sha256=` + a.SHA256 + `"`
	if html.code != 200 || !strings.Contains(html.body, wantLink) || !strings.Contains(html.body, `data-core-metadata="sha256=`+a.MetadataSHA256) ||
		!strings.Contains(html.body, `data-dist-info-metadata="sha256=`) || !strings.Contains(html.body, `data-requires-python="&gt;=3.8"`) {
		t.Errorf("project html = %s", html.body)
	}
	js := get(t, srv.URL+"/mirror/pypi/simple/wheel/", pipAccept)
	var doc struct {
		Meta  map[string]string `json:"meta"`
		Files []struct {
			Filename     string            `json:"filename"`
			URL          string            `json:"url"`
			Hashes       map[string]string `json:"hashes"`
			CoreMetadata map[string]string `json:"core-metadata"`
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(js.body), &doc); err != nil || js.ct != simpleJSON || len(doc.Files) != 1 ||
		doc.Files[0].Hashes["sha256"] != a.SHA256 || doc.Files[0].CoreMetadata["sha256"] != a.MetadataSHA256 {
		t.Errorf("project json = %+v (%v)", js, err)
	}
	if strings.Contains(js.body, "dist-info-metadata") {
		t.Errorf("project json has the pre-PEP 714 key pip 23.0 cannot read: %s", js.body)
	}
	// Non-normalised names redirect; refused projects are 404.
	if r := get(t, srv.URL+"/mirror/pypi/simple/Wheel/", ""); r.code != http.StatusMovedPermanently {
		t.Errorf("redirect = %d", r.code)
	}
	if r := get(t, srv.URL+"/mirror/pypi/simple/pip/", ""); r.code != 404 {
		t.Errorf("refused project = %d", r.code)
	}
	if r := get(t, srv.URL+"/mirror/pypi/simple/wheel/", "image/png"); r.code != http.StatusNotAcceptable {
		t.Errorf("406 = %d", r.code)
	}
	// Files and PEP 658 metadata.
	f := get(t, srv.URL+a.URLPath, "")
	if f.code != 200 || len(f.body) != int(a.Size) {
		t.Errorf("file = %d %d", f.code, len(f.body))
	}
	md := get(t, srv.URL+a.URLPath+".metadata", "")
	if md.code != 200 || !strings.HasPrefix(md.body, "Metadata-Version") {
		t.Errorf("metadata = %+v", md)
	}
	if r := get(t, srv.URL+"/mirror/pypi/files/"+strings.Repeat("0", 64)+"/wheel-0.43.0-py3-none-any.whl", ""); r.code != 404 {
		t.Errorf("wrong hash served: %d", r.code)
	}
}

func TestPackument(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	a, err := m.AddNPMTarball(ctx, npmFixture(t, "@acme/hello", "1.0.0"), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddNPMTarball(ctx, npmFixture(t, "@acme/hello", "1.1.0-beta.1"), "test", nil); err != nil {
		t.Fatal(err)
	}
	srv := serveMirror(t, m)
	for _, p := range []string{"/mirror/npm/@acme%2fhello", "/mirror/npm/@acme%2Fhello", "/mirror/npm/@acme/hello"} {
		full := get(t, srv.URL+p, "application/json")
		var doc struct {
			Name     string                     `json:"name"`
			DistTags map[string]string          `json:"dist-tags"`
			Versions map[string]json.RawMessage `json:"versions"`
		}
		if err := json.Unmarshal([]byte(full.body), &doc); err != nil || doc.Name != "@acme/hello" || doc.DistTags["latest"] != "1.0.0" || len(doc.Versions) != 2 {
			t.Errorf("%s: %+v %v", p, full, err)
		}
		// As published: the full packument holds every field of
		// package.json, scripts and dependency fields included, and
		// flags the install scripts as the public registry does.
		var v map[string]json.RawMessage
		json.Unmarshal(doc.Versions["1.0.0"], &v)
		for _, f := range []string{"scripts", "dependencies", "optionalDependencies", "peerDependencies", "bundleDependencies", "devDependencies"} {
			if v[f] == nil {
				t.Errorf("%s: packument lacks %s: %s", p, f, doc.Versions["1.0.0"])
			}
		}
		if string(v["hasInstallScript"]) != "true" || string(v["dependencies"]) != `{"left-pad": "^1.0.0"}` && string(v["dependencies"]) != `{"left-pad":"^1.0.0"}` {
			t.Errorf("%s: hasInstallScript %s, dependencies %s", p, v["hasInstallScript"], v["dependencies"])
		}
		if !strings.Contains(full.body, `"tarball":"`+srv.URL+`/mirror/npm/@acme/hello/-/hello-1.0.0.tgz"`) || !strings.Contains(full.body, a.Integrity) {
			t.Errorf("dist missing: %s", full.body)
		}
	}
	ab := get(t, srv.URL+"/mirror/npm/@acme%2fhello", "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*")
	if ab.ct != npmAbbreviated || strings.Contains(ab.body, `"readme"`) || strings.Contains(ab.body, `"scripts"`) || !strings.Contains(ab.body, `"bin"`) ||
		!strings.Contains(ab.body, `"dependencies":{"left-pad":"^1.0.0"}`) || !strings.Contains(ab.body, `"peerDependencies":{"react":"*"}`) ||
		!strings.Contains(ab.body, `"hasInstallScript":true`) {
		t.Errorf("abbreviated = %+v", ab)
	}
	tb := get(t, srv.URL+a.URLPath, "")
	if tb.code != 200 || int64(len(tb.body)) != a.Size || tb.body != string(npmFixture(t, "@acme/hello", "1.0.0")) {
		t.Errorf("tarball = %d, not the published bytes", tb.code)
	}
	if r := get(t, srv.URL+"/mirror/npm/left-pad", ""); r.code != 404 {
		t.Errorf("unknown = %d", r.code)
	}
	if _, err := m.Remove(ctx, NPM, "@acme/hello", ""); err != nil {
		t.Fatal(err)
	}
	if r := get(t, srv.URL+a.URLPath, ""); r.code != 404 {
		t.Errorf("removed tarball = %d", r.code)
	}
	if r := get(t, srv.URL+"/mirror/npm/@acme%2fhello", ""); r.code != 404 {
		t.Errorf("removed packument = %d", r.code)
	}
}

// TestCacheSeesOtherProcessWrites: a second Mirror on its own connection
// pool (as the CLI is while the server runs) removes a package; the
// serving Mirror's cached pages must not outlive that.
func TestCacheSeesOtherProcessWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	a, err := m.AddFile(ctx, "testdata/wheels/example-21.12-py3-none-any.whl", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveMirror(t, m)
	for i := 0; i < 2; i++ {
		if r := get(t, srv.URL+"/mirror/pypi/simple/example/", ""); r.code != 200 || !strings.Contains(r.body, a.SHA256) {
			t.Fatalf("before: %+v", r)
		}
	}
	st := reopenTestStore(t, m)
	other, err := New(ctx, m.cfg, st.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Remove(ctx, Pip, "example", ""); err != nil {
		t.Fatal(err)
	}
	if r := get(t, srv.URL+"/mirror/pypi/simple/example/", ""); r.code != 404 {
		t.Errorf("after removal elsewhere: %d %s", r.code, r.body)
	}
	if r := get(t, srv.URL+"/mirror/pypi/simple/", ""); strings.Contains(r.body, "example") {
		t.Errorf("root still lists example: %s", r.body)
	}
}

// TestQuarantinedVanishesFromEndpoints: once Recheck quarantines a wheel
// and an npm version, their files, the wheel's PEP 658 metadata file and
// their entries in the PEP 691 JSON, PEP 503 HTML and abbreviated
// packument are gone, while their siblings stay.
func TestQuarantinedVanishesFromEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	fn1, w1 := buildWheel(t, wheelSpec{name: "demo", version: "1.0"})
	fn2, w2 := buildWheel(t, wheelSpec{name: "demo", version: "2.0"})
	bad, err := m.AddWheel(ctx, fn1, w1, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	good, err := m.AddWheel(ctx, fn2, w2, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	badNPM, err := m.AddNPMTarball(ctx, npmFixture(t, "tiny-pkg", "1.0.0"), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	goodNPM, err := m.AddNPMTarball(ctx, npmFixture(t, "tiny-pkg", "1.1.0"), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveMirror(t, m)
	pipJSON := "application/vnd.pypi.simple.v1+json"
	check := func(when string, quarantined bool) {
		t.Helper()
		want := 200
		if quarantined {
			want = 404
		}
		for _, u := range []string{bad.URLPath, bad.URLPath + ".metadata", badNPM.URLPath} {
			if r := get(t, srv.URL+u, ""); r.code != want {
				t.Errorf("%s: GET %s = %d, want %d", when, u, r.code, want)
			}
		}
		for _, u := range []string{good.URLPath, good.URLPath + ".metadata", goodNPM.URLPath} {
			if r := get(t, srv.URL+u, ""); r.code != 200 {
				t.Errorf("%s: sibling GET %s = %d", when, u, r.code)
			}
		}
		js := get(t, srv.URL+"/mirror/pypi/simple/demo/", pipJSON)
		html := get(t, srv.URL+"/mirror/pypi/simple/demo/", "text/html")
		ab := get(t, srv.URL+"/mirror/npm/tiny-pkg", npmAbbreviated)
		if js.code != 200 || html.code != 200 || ab.code != 200 || ab.ct != npmAbbreviated {
			t.Fatalf("%s: index codes json %d html %d packument %d (%s)", when, js.code, html.code, ab.code, ab.ct)
		}
		for _, page := range []struct{ name, body, gone, kept string }{
			{"pep 691 json", js.body, fn1, fn2},
			{"pep 503 html", html.body, fn1, fn2},
			{"abbreviated packument", ab.body, `"1.0.0"`, `"1.1.0"`},
		} {
			if strings.Contains(page.body, page.gone) == quarantined || !strings.Contains(page.body, page.kept) {
				t.Errorf("%s: %s lists %s: %v, want %v; body %s", when, page.name, page.gone, !quarantined, !quarantined, page.body)
			}
		}
	}
	check("before recheck", false)
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("testdata/osv")); err != nil {
		t.Fatal(err)
	}
	for name, rec := range map[string]string{
		"PyPI/TEST-DEMO.json": `{"id":"TEST-DEMO","modified":"2026-10-01T00:00:00Z","affected":[{"package":{"ecosystem":"PyPI","name":"demo"},"versions":["1.0"]}]}`,
		"npm/TEST-TINY.json":  `{"id":"TEST-TINY","modified":"2026-10-01T00:00:00Z","affected":[{"package":{"ecosystem":"npm","name":"tiny-pkg"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.1.0"}]}]}]}`,
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(rec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.ImportOSV(ctx, src); err != nil {
		t.Fatal(err)
	}
	res, err := m.Recheck(ctx)
	if err != nil || len(res.Quarantined) != 2 {
		t.Fatalf("recheck = %+v, %v", res, err)
	}
	check("after recheck", true)
}
