package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

func npmTarball(t *testing.T, name, version string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gw)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", fmt.Sprintf(`{"name":%q,"version":%q,"main":"index.js"}`, name, version)},
		{"package/index.js", "module.exports = 1;\n"},
	} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)})
		tw.Write([]byte(f.body))
	}
	tw.Close()
	gw.Close()
	return buf.Bytes()
}

func sri(b []byte) string {
	s := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(s[:])
}

// upstream is a loopback npm registry and PEP 691 index for `mirror add`.
type upstream struct {
	npm   map[string]map[string][]byte // name -> version -> tarball
	times map[string]string            // name@version -> publish time
	tags  map[string]string            // name -> latest
	pip   map[string][]byte            // wheel filename -> bytes
	srv   *httptest.Server
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{npm: map[string]map[string][]byte{}, times: map[string]string{}, tags: map[string]string{}, pip: map[string][]byte{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) addNPM(name, version string, tgz []byte, published string) {
	if u.npm[name] == nil {
		u.npm[name] = map[string][]byte{}
	}
	u.npm[name][version] = tgz
	u.times[name+"@"+version] = published
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/")
	if rest, ok := strings.CutPrefix(p, "simple/"); ok {
		proj := strings.TrimSuffix(rest, "/")
		var files []map[string]any
		for fn, b := range u.pip {
			if strings.HasPrefix(fn, strings.ReplaceAll(proj, "-", "_")+"-") {
				s := sha256.Sum256(b)
				files = append(files, map[string]any{"filename": fn, "url": "/files/" + fn, "hashes": map[string]string{"sha256": hex.EncodeToString(s[:])}})
			}
		}
		if files == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.pypi.simple.v1+json")
		json.NewEncoder(w).Encode(map[string]any{"meta": map[string]string{"api-version": "1.0"}, "files": files})
		return
	}
	if fn, ok := strings.CutPrefix(p, "files/"); ok {
		w.Write(u.pip[fn])
		return
	}
	if name, file, ok := strings.Cut(p, "/-/"); ok {
		for v, b := range u.npm[name] {
			if file == filepath.Base(name)+"-"+v+".tgz" {
				w.Write(b)
				return
			}
		}
		http.NotFound(w, r)
		return
	}
	vs, ok := u.npm[p]
	if !ok {
		http.NotFound(w, r)
		return
	}
	versions, times := map[string]any{}, map[string]string{}
	for v, b := range vs {
		s1 := sha1.Sum(b)
		versions[v] = map[string]any{"name": p, "version": v, "dist": map[string]string{
			"tarball": u.srv.URL + "/" + p + "/-/" + p + "-" + v + ".tgz", "integrity": sri(b), "shasum": hex.EncodeToString(s1[:])}}
		times[v] = u.times[p+"@"+v]
	}
	json.NewEncoder(w).Encode(map[string]any{"name": p, "dist-tags": map[string]string{"latest": u.tags[p]}, "versions": versions, "time": times})
}

// bulkEnv writes a config pointing the mirror at up and imports the test
// OSV records; it returns the state flags.
func bulkEnv(t *testing.T, pipIndex, npmRegistry string) []string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sandboxapi.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("version: v1\nmirror:\n  pip_index_url: %s\n  npm_registry_url: %s\n", pipIndex, npmRegistry)), 0o644)
	flags := []string{"--config", cfg, "--data-dir", filepath.Join(dir, "data")}
	mustCLI(t, append([]string{"mirror", "osv", "import", filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "osv")}, flags...)...)
	return flags
}

func noJSON(t *testing.T, stdout string) {
	t.Helper()
	for _, l := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "{") {
			t.Fatalf("a JSON log line on stdout: %s", l)
		}
	}
}

// TestMirrorAddLockfile curates a package-lock.json: every registry
// package is fetched, checked against the lockfile's integrity and judged;
// the table tells admitted, refused (with the fixed version), failed,
// skipped and, on a second run, already present; anything refused or
// failed makes the exit non-zero. A mistyped path records nothing.
func TestMirrorAddLockfile(t *testing.T) {
	td := filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "npm")
	up := newUpstream(t)
	ms, _ := os.ReadFile(filepath.Join(td, "ms-2.1.3.tgz"))
	debug, _ := os.ReadFile(filepath.Join(td, "debug-4.3.7.tgz"))
	axios := npmTarball(t, "axios", "1.6.0")
	up.addNPM("ms", "2.1.3", ms, "2020-12-08T20:52:44.283Z")
	up.addNPM("debug", "4.3.7", debug, "2024-09-12T19:26:02.094Z")
	up.addNPM("axios", "1.6.0", axios, "2023-10-26T10:00:00Z")
	up.addNPM("qs", "6.10.2", npmTarball(t, "qs", "6.10.2"), "2021-12-06T00:00:00Z")
	up.addNPM("qs", "6.9.7", npmTarball(t, "qs", "6.9.7"), "2022-01-11T00:00:00Z")
	up.tags["qs"] = "6.10.2"
	flags := bulkEnv(t, up.srv.URL+"/simple/", up.srv.URL)
	lock := map[string]any{"name": "app", "lockfileVersion": 3, "packages": map[string]any{
		"":                               map[string]any{"name": "app"},
		"node_modules/debug":             map[string]any{"version": "4.3.7", "resolved": "https://registry.npmjs.org/debug/-/debug-4.3.7.tgz", "integrity": sri(debug)},
		"node_modules/ms":                map[string]any{"version": "2.1.3", "resolved": "https://registry.npmjs.org/ms/-/ms-2.1.3.tgz", "integrity": sri(ms)},
		"node_modules/x/node_modules/ms": map[string]any{"version": "2.1.3", "integrity": sri(ms)},
		"node_modules/axios":             map[string]any{"version": "1.6.0", "resolved": "https://registry.npmjs.org/axios/-/axios-1.6.0.tgz", "integrity": sri(axios)},
		"node_modules/mine":              map[string]any{"resolved": "packages/mine", "link": true},
		"node_modules/fromgit":           map[string]any{"version": "1.0.0", "resolved": "git+ssh://git@github.com/a/fromgit.git#abc"},
	}}
	dir := t.TempDir()
	lf := filepath.Join(dir, "package-lock.json")
	b, _ := json.Marshal(lock)
	os.WriteFile(lf, b, 0o644)

	code, out, errOut := runCLI(t, append([]string{"mirror", "add", "--lockfile", lf}, flags...)...)
	if code == 0 {
		t.Fatalf("exit 0 with a refusal:\n%s%s", out, errOut)
	}
	noJSON(t, out)
	for _, want := range []string{
		"admitted  npm      ms",
		"served as published",
		"installs need ms@^2.1.3",
		"GHSA-4hjh-wcwx-xvwj (fixed 1.12.0)",
		"GHSA-8hc4-vh64-cxmj (fixed 1.7.4)",
		"not from a registry (git+ssh://",
		"skipped   npm      mine",
		"2 admitted, 1 refused, 0 already present, 1 failed, 1 skipped",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "1 refused, 1 failed") {
		t.Errorf("stderr: %s", errOut)
	}
	// An exception is for one package, never a whole list.
	if code, out, errOut := runCLI(t, append([]string{"mirror", "add", "--lockfile", lf, "--accept", "GHSA-4hjh-wcwx-xvwj"}, flags...)...); code == 0 || !strings.Contains(errOut, "--accept applies to one package") {
		t.Errorf("--accept with a lockfile: exit %d\n%s%s", code, out, errOut)
	}
	// Again: what is admitted is not fetched again.
	_, out, _ = runCLI(t, append([]string{"mirror", "add", "--lockfile", lf}, flags...)...)
	if !strings.Contains(out, "0 admitted, 1 refused, 2 already present") {
		t.Errorf("second run:\n%s", out)
	}
	// A bare name takes the newest version with no open advisory.
	out = mustCLI(t, append([]string{"mirror", "add", "npm", "qs"}, flags...)...)
	if !strings.Contains(out, "6.9.7") || !strings.Contains(out, "skipped 6.10.2 (GHSA-hrpp-h998-j3pp; fixed in 6.10.3)") {
		t.Errorf("bare qs:\n%s", out)
	}
	// Mistyped paths are errors, and nothing is recorded for them.
	before := mustCLI(t, append([]string{"mirror", "list", "--json"}, flags...)...)
	for _, args := range [][]string{{"--lockfile", filepath.Join(dir, "package-lock.jsn")}, {filepath.Join(dir, "package-lock.json")}, {filepath.Join(dir, "nothere.whl")}} {
		if code, out, errOut := runCLI(t, append(append([]string{"mirror", "add"}, args...), flags...)...); code == 0 || strings.Contains(out, "refused") {
			t.Errorf("mirror add %v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	if after := mustCLI(t, append([]string{"mirror", "list", "--json"}, flags...)...); after != before {
		t.Errorf("a mistyped path changed the catalogue:\n%s\n%s", before, after)
	}
	// list filters by name, ecosystem and status, and prints ages.
	out = mustCLI(t, append([]string{"mirror", "list", "--name", "DEB", "--ecosystem", "npm", "--status", "admitted"}, flags...)...)
	if !strings.Contains(out, "debug") || strings.Contains(out, "axios") || strings.Contains(out, " ms ") || !strings.Contains(out, " days ago") {
		t.Errorf("filtered list:\n%s", out)
	}
	out = mustCLI(t, append([]string{"mirror", "list", "--status", "refused"}, flags...)...)
	if !strings.Contains(out, "axios") || strings.Contains(out, "debug") {
		t.Errorf("refused list:\n%s", out)
	}
	if out := mustCLI(t, append([]string{"mirror", "list", "--ecosystem", "pypi"}, flags...)...); strings.Contains(out, "npm") {
		t.Errorf("pypi list:\n%s", out)
	}
	if code, _, _ := runCLI(t, append([]string{"mirror", "list", "--status", "gone"}, flags...)...); code == 0 {
		t.Error("--status gone accepted")
	}
}

// TestMirrorAddRequirements curates a requirements file against a PEP 691
// index: pinned lines with --hash admit only wheels with those hashes,
// anything unpinned is a failure, and an unreachable index says which
// setting to change.
func TestMirrorAddRequirements(t *testing.T) {
	up := newUpstream(t)
	fn1, w1 := testenv.BuildWheel(t, "demo", "1.0")
	fn2, w2 := testenv.BuildWheel(t, "demo", "2.0")
	fn3, w3 := testenv.BuildWheel(t, "other", "1.0")
	up.pip[fn1], up.pip[fn2], up.pip[fn3] = w1, w2, w3
	flags := bulkEnv(t, up.srv.URL+"/simple/", up.srv.URL)
	s1 := sha256.Sum256(w1)
	req := fmt.Sprintf("# app requirements\ndemo==1.0 \\\n    --hash=sha256:%s\nother==1.0 --hash=sha256:%s  # wrong hash\nloose>=1.0\n\n",
		hex.EncodeToString(s1[:]), strings.Repeat("ab", 32))
	rf := filepath.Join(t.TempDir(), "requirements.txt")
	os.WriteFile(rf, []byte(req), 0o644)
	code, out, errOut := runCLI(t, append([]string{"mirror", "add", "-r", rf}, flags...)...)
	if code == 0 {
		t.Fatalf("exit 0:\n%s%s", out, errOut)
	}
	noJSON(t, out)
	for _, want := range []string{"admitted  pip      demo", "no wheel matches the requirement's --hash values", "not pinned", "1 admitted, 0 refused, 0 already present, 2 failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// A bare pip name resolves against the index too.
	if out := mustCLI(t, append([]string{"mirror", "add", "pip", "demo"}, flags...)...); !strings.Contains(out, "demo-2.0-py3-none-any.whl") {
		t.Errorf("bare demo:\n%s", out)
	}
	// An unreachable index: an error that names the setting.
	flags2 := bulkEnv(t, "http://127.0.0.1:1/simple/", up.srv.URL)
	code, out, _ = runCLI(t, append([]string{"mirror", "add", "pip", "demo==1.0"}, flags2...)...)
	if code == 0 || !strings.Contains(out, "pip_index_url") || !strings.Contains(out, "mirror add FILE.whl") {
		t.Errorf("unreachable index: exit %d\n%s", code, out)
	}
}

// TestMirrorAddLockfileFromRegistry curates a real lockfile (express and
// friends, made by npm against registry.npmjs.org) from the npm registry.
// It leaves loopback, so it runs only with SANDBOXAPI_ONLINE_TESTS=1.
func TestMirrorAddLockfileFromRegistry(t *testing.T) {
	if os.Getenv("SANDBOXAPI_ONLINE_TESTS") != "1" {
		t.Skip("leaves loopback: set SANDBOXAPI_ONLINE_TESTS=1 to fetch from the npm registry")
	}
	flags := bulkEnv(t, "https://pypi.org/simple/", "https://registry.npmjs.org")
	lf := filepath.Join("testdata", "lock-express", "package-lock.json")
	start := time.Now()
	code, out, errOut := runCLI(t, append([]string{"mirror", "add", "--lockfile", lf}, flags...)...)
	took := time.Since(start)
	noJSON(t, out)
	admitted, refused := strings.Count(out, "\nadmitted "), strings.Count(out, "\nrefused ")
	t.Logf("curated %s in %s: %d admitted, %d refused\n%s", lf, took.Round(time.Millisecond), admitted, refused, out)
	if code == 0 || admitted < 20 || refused != 2 || !strings.Contains(out, "axios") || !strings.Contains(out, "minimist") ||
		!strings.Contains(out, "GHSA-xvch-5gv4-984h (fixed 1.2.6)") {
		t.Fatalf("exit %d, %d admitted, %d refused\n%s%s", code, admitted, refused, out, errOut)
	}
	if strings.Count(out, "served as published") < 10 {
		t.Errorf("few packages served as published:\n%s", out)
	}
}
