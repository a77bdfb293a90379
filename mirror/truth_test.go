package mirror

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// regVersion is one version a test registry serves.
type regVersion struct {
	tarball    []byte
	time       string // upstream publish time (RFC 3339)
	deprecated string
}

// npmRegistry serves packuments and tarballs on loopback, shaped like
// registry.npmjs.org's (dist.integrity and shasum computed from the bytes).
type npmRegistry struct {
	*httptest.Server
	mu   sync.Mutex
	pkgs map[string]map[string]regVersion
	tags map[string]string // name -> latest
}

func newNPMRegistry(t testing.TB) *npmRegistry {
	t.Helper()
	r := &npmRegistry{pkgs: map[string]map[string]regVersion{}, tags: map[string]string{}}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *npmRegistry) add(name, version string, v regVersion) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pkgs[name] == nil {
		r.pkgs[name] = map[string]regVersion{}
	}
	r.pkgs[name][version] = v
}

// addRecorded serves testdata/npm/NAME-VERSION.tgz with its recorded
// publish time from testdata/npm/registry.json.
func (r *npmRegistry) addRecorded(t testing.TB, name, version string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "npm", name+"-"+version+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Packuments map[string]struct {
			Time map[string]string `json:"time"`
		} `json:"packuments"`
	}
	b, _ := os.ReadFile("testdata/npm/registry.json")
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	r.add(name, version, regVersion{tarball: data, time: rec.Packuments[name].Time[version]})
	return data
}

func (r *npmRegistry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := strings.TrimPrefix(req.URL.Path, "/")
	if name, file, ok := strings.Cut(p, "/-/"); ok {
		for v, rv := range r.pkgs[name] {
			if file == npmTarballName(name, v) {
				w.Write(rv.tarball)
				return
			}
		}
		http.NotFound(w, req)
		return
	}
	name := strings.Replace(p, "%2f", "/", 1)
	vs, ok := r.pkgs[name]
	if !ok {
		http.NotFound(w, req)
		return
	}
	versions, times := map[string]any{}, map[string]string{}
	latest, tagged := r.tags[name], r.tags[name] != ""
	for v, rv := range vs {
		integ, shasum := npmDigests(rv.tarball)
		doc := map[string]any{"name": name, "version": v,
			"dist": map[string]string{"tarball": r.URL + "/" + name + "/-/" + npmTarballName(name, v), "integrity": integ, "shasum": shasum}}
		if rv.deprecated != "" {
			doc["deprecated"] = rv.deprecated
		}
		versions[v] = doc
		times[v] = rv.time
		if !tagged && (latest == "" || newerSemver(v, latest)) {
			if !strings.Contains(v, "-") {
				latest = v
			}
		}
	}
	json.NewEncoder(w).Encode(map[string]any{"name": name, "dist-tags": map[string]string{"latest": latest}, "versions": versions, "time": times})
}

// mustDigest is the registry integrity of testdata/npm/file.
func mustDigest(t testing.TB, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "npm", file))
	if err != nil {
		t.Fatal(err)
	}
	integ, _ := npmDigests(b)
	return integ
}

func newerSemver(a, b string) bool {
	as := []Artifact{{Version: a}, {Version: b}}
	sortByVersion(NPM, as)
	return as[1].Version == a && a != b
}

// TestNPMCIWithPublicLockfile: a lockfile made by the real npm against
// registry.npmjs.org (testdata/npm/lock-ms) installs with `npm ci` from the
// mirror. ms@2.1.3 has nothing to strip, so the mirror serves the published
// bytes and their integrity; before, the re-pack made npm ci fail with
// EINTEGRITY.
func TestNPMCIWithPublicLockfile(t *testing.T) {
	t.Parallel()
	npm := needTool(t, "npm")
	node := needTool(t, "node")
	ctx := context.Background()
	reg := newNPMRegistry(t)
	reg.addRecorded(t, "ms", "2.1.3")
	m := newTestMirror(t, true)
	m.cfg.NPMRegistryURL = reg.URL
	a, err := m.AddNPM(ctx, Spec{Manager: NPM, Name: "ms", Version: "2.1.3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Stripped) != 0 || a.SHA256 != a.UpstreamSHA256 {
		t.Fatalf("ms@2.1.3 changed: stripped %v", a.Stripped)
	}
	srv := serveMirror(t, m)
	home := t.TempDir()
	proj := filepath.Join(home, "proj")
	os.MkdirAll(proj, 0o755)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "npm", "lock-ms", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(proj, f), b, 0o644)
	}
	out, err := run(t, proj, clientEnv(home), npm, "ci", "--registry", srv.URL+"/mirror/npm/", "--cache", filepath.Join(home, "cache"),
		"--no-audit", "--no-fund")
	if err != nil {
		t.Fatalf("npm ci with a public lockfile: %v\n%s", err, out)
	}
	got, err := run(t, proj, clientEnv(home), node, "-e", "console.log(require('ms')('1d'))")
	if err != nil || strings.TrimSpace(got) != "86400000" {
		t.Errorf("require('ms') = %q, %v", got, err)
	}
}

// TestAddNPMKeepsDependenciesAndPublishTime: debug@4.3.7 as published
// depends on ms@^2.1.3. The mirror serves it as published (the registry's
// integrity), the catalogue and the packument list the dependency, and the
// packument's time is upstream's publish time, not the admission time.
func TestAddNPMKeepsDependenciesAndPublishTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := newNPMRegistry(t)
	reg.addRecorded(t, "debug", "4.3.7")
	m := newTestMirror(t, true)
	m.cfg.NPMRegistryURL = reg.URL
	a, err := m.AddNPM(ctx, Spec{Manager: NPM, Name: "debug", Version: "4.3.7"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Dependencies["ms"] != "^2.1.3" || len(a.Dependencies) != 1 || len(a.Stripped) != 0 || a.SHA256 != a.UpstreamSHA256 {
		t.Fatalf("dependencies %v, stripped %v", a.Dependencies, a.Stripped)
	}
	published := time.Date(2024, 9, 12, 19, 26, 2, 94e6, time.UTC)
	if !a.PublishedAt.Equal(published) {
		t.Errorf("PublishedAt = %v, want %v", a.PublishedAt, published)
	}
	// Read back from the store.
	l, err := m.Lookup(ctx, NPM, "debug", "4.3.7")
	if err != nil || l.Dependencies["ms"] != "^2.1.3" || !l.PublishedAt.Equal(published) || len(l.Stripped) != 0 {
		t.Fatalf("stored: %+v, %v", l, err)
	}
	srv := serveMirror(t, m)
	resp, err := http.Get(srv.URL + "/mirror/npm/debug")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Time     map[string]string
		Versions map[string]map[string]any
	}
	json.NewDecoder(resp.Body).Decode(&doc)
	if doc.Time["4.3.7"] != published.Format(time.RFC3339Nano) {
		t.Errorf("packument time %q, want upstream's %s", doc.Time["4.3.7"], published.Format(time.RFC3339Nano))
	}
	if deps, _ := doc.Versions["4.3.7"]["dependencies"].(map[string]any); deps["ms"] != "^2.1.3" || len(deps) != 1 {
		t.Errorf("packument dependencies: %v", doc.Versions["4.3.7"])
	}
	if dist, _ := doc.Versions["4.3.7"]["dist"].(map[string]any); dist["integrity"] != a.Integrity || a.Integrity != mustDigest(t, "debug-4.3.7.tgz") {
		t.Errorf("integrity %v, want the published file's %s", dist["integrity"], a.Integrity)
	}
	admitted, known, err := m.Satisfying(ctx, "debug", "^4.3.0")
	if err != nil || strings.Join(admitted, ",") != "4.3.7" || strings.Join(known, ",") != "4.3.7" {
		t.Errorf("Satisfying = %v %v %v", admitted, known, err)
	}
	if _, _, err := m.Satisfying(ctx, "debug", "github:debug-js/debug"); !errors.Is(err, ErrRange) {
		t.Errorf("git range err = %v", err)
	}
}

// TestSanitizeNPMNative: packages that cannot work without building native
// code at install time are refused with the reason; an install script that
// builds nothing is only stripped.
func TestSanitizeNPMNative(t *testing.T) {
	t.Parallel()
	l := DefaultConfig().Limits
	tests := []struct {
		name  string
		extra string
		gyp   bool
		want  string // "" = admitted
	}{
		{name: "binding.gyp", gyp: true, want: "binding.gyp"},
		{name: "gypfile", extra: `, "gypfile": true`, want: `"gypfile": true`},
		{name: "node-pre-gyp install", extra: `, "scripts": {"install": "node-pre-gyp install --fallback-to-build"}`, want: "scripts.install runs node-pre-gyp"},
		{name: "bcrypt-like", extra: `, "dependencies": {"@mapbox/node-pre-gyp": "^1.0.11"}, "binary": {"module_name": "bcrypt_lib", "module_path": "./lib/binding/napi-v{napi_build_version}"}`, want: "depends on @mapbox/node-pre-gyp"},
		{name: "prebuild-install", extra: `, "scripts": {"install": "prebuild-install || node-gyp rebuild"}`, want: "prebuild-install"},
		{name: "postinstall make", extra: `, "scripts": {"postinstall": "cd src && make"}`, want: "scripts.postinstall runs make"},
		{name: "preinstall local node-gyp", extra: `, "scripts": {"preinstall": "./node_modules/.bin/node-gyp configure"}`, want: "runs node-gyp"},
		{name: "postinstall that builds nothing", extra: `, "scripts": {"postinstall": "node ./print-thanks.js"}`},
		{name: "make in a test script", extra: `, "scripts": {"test": "make test"}`},
		{name: "word containing cc", extra: `, "scripts": {"postinstall": "node success.js"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pj := fmt.Sprintf(`{"name": "native-x", "version": "1.0.0"%s}`, tc.extra)
			entries := []tarEntry{{name: "package/package.json", body: pj}, {name: "package/index.js", body: "1"}}
			if tc.gyp {
				entries = append(entries, tarEntry{name: "package/binding.gyp", body: "{}"})
			}
			_, err := SanitizeNPM(buildTarball(t, entries), l)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !IsArchiveProblem(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "native build") {
				t.Fatalf("err = %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
}

// TestSanitizeNPMByteForByte: nothing to strip keeps the file as
// published; anything the checks did not read forces a re-pack.
func TestSanitizeNPMByteForByte(t *testing.T) {
	t.Parallel()
	l := DefaultConfig().Limits
	plain := plainNPM(t, "plain", "1.0.0", `, "devDependencies": {"mocha": "*"}, "scripts": {"test": "mocha", "prepare": "tsc"}`)
	var twoMembers bytes.Buffer
	twoMembers.Write(plain)
	gw := gzip.NewWriter(&twoMembers)
	gw.Write([]byte("hidden second member"))
	gw.Close()
	afterTar := func() []byte {
		var b bytes.Buffer
		zr, _ := gzip.NewReader(bytes.NewReader(plain))
		raw := new(bytes.Buffer)
		raw.ReadFrom(zr)
		gw := gzip.NewWriter(&b)
		gw.Write(raw.Bytes())
		gw.Write([]byte("hidden after the end of the archive"))
		gw.Close()
		return b.Bytes()
	}()
	setuid := buildTarball(t, []tarEntry{{name: "package/package.json", body: `{"name":"s","version":"1.0.0"}`}, {name: "package/x", body: "x", mode: 0o4755}})
	tests := []struct {
		name    string
		data    []byte
		same    bool
		removed string
	}{
		{name: "plain", data: plain, same: true},
		{name: "second gzip member", data: twoMembers.Bytes(), removed: "data after the gzip stream"},
		{name: "data after the tar end", data: afterTar, removed: "data after the end of the tar archive"},
		{name: "setuid bit", data: setuid, removed: "mode 4755 of x"},
		{name: "dependencies", data: plainNPM(t, "d", "1.0.0", `, "dependencies": {"ms": "^2.1.3"}`), same: true},
		{name: "install script", data: plainNPM(t, "d", "1.0.0", `, "scripts": {"postinstall": "node thanks.js"}`), same: true},
		{name: "types top folder", data: buildTarball(t, []tarEntry{{name: "node/package.json", body: `{"name":"@types/node","version":"1.0.0"}`}, {name: "node/index.d.ts", body: "export {};"}}), same: true},
		{name: "two top folders", data: buildTarball(t, []tarEntry{{name: "node/package.json", body: `{"name":"@types/node","version":"1.0.0"}`}, {name: "package/index.d.ts", body: "x"}}), removed: "not the archive's one plain top folder"},
		{name: "dot slash", data: buildTarball(t, []tarEntry{{name: "./package/package.json", body: `{"name":"dot","version":"1.0.0"}`}}), removed: "not the archive's one plain top folder"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := SanitizeNPM(tc.data, l)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Equal(p.Tarball, tc.data); got != tc.same {
				t.Fatalf("kept as published = %v, want %v (removed %v)", got, tc.same, p.Removed)
			}
			if tc.removed != "" && !strings.Contains(strings.Join(p.Removed, ";"), tc.removed) {
				t.Errorf("Removed = %v, want %q", p.Removed, tc.removed)
			}
			if tc.same && len(p.Removed) != 0 {
				t.Errorf("Removed = %v for an unchanged file", p.Removed)
			}
		})
	}
}

func TestNPMRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rng     string
		yes, no []string
		bad     bool
	}{
		{rng: "^2.1.3", yes: []string{"2.1.3", "2.9.0"}, no: []string{"2.1.2", "3.0.0", "2.2.0-beta.1"}},
		{rng: "^0.2.3", yes: []string{"0.2.3", "0.2.9"}, no: []string{"0.3.0", "0.2.2"}},
		{rng: "^0.0.3", yes: []string{"0.0.3"}, no: []string{"0.0.4"}},
		{rng: "~1.2.3", yes: []string{"1.2.3", "1.2.9"}, no: []string{"1.3.0"}},
		{rng: "~1", yes: []string{"1.0.0", "1.9.9"}, no: []string{"2.0.0"}},
		{rng: "1.x", yes: []string{"1.0.0", "1.5.2"}, no: []string{"2.0.0", "0.9.0"}},
		{rng: "1.2.x", yes: []string{"1.2.0"}, no: []string{"1.3.0"}},
		{rng: ">=1.2.0 <3", yes: []string{"1.2.0", "2.99.0"}, no: []string{"3.0.0", "1.1.0"}},
		{rng: ">= 1.2.0 < 3", yes: []string{"2.0.0"}, no: []string{"3.0.0"}},
		{rng: "1.0.0 - 2.0.0", yes: []string{"1.0.0", "2.0.0"}, no: []string{"2.0.1"}},
		{rng: "^1.0.0 || ^2.0.0", yes: []string{"1.1.0", "2.1.0"}, no: []string{"3.0.0"}},
		{rng: "2.1.3", yes: []string{"2.1.3"}, no: []string{"2.1.4"}},
		{rng: "=2.1.3", yes: []string{"2.1.3"}, no: []string{"2.1.4"}},
		{rng: "v2.1.3", yes: []string{"2.1.3"}, no: []string{"2.1.4"}},
		{rng: "*", yes: []string{"0.0.1", "9.9.9"}, no: []string{"1.0.0-rc.1"}},
		{rng: "", yes: []string{"1.0.0"}},
		{rng: "latest", yes: []string{"1.0.0"}},
		{rng: "^1.0.0-beta.2", yes: []string{"1.0.0-beta.3", "1.0.0"}, no: []string{"1.0.0-alpha.1"}},
		{rng: "github:debug-js/debug", bad: true},
		{rng: "git+https://github.com/x/y.git", bad: true},
		{rng: "file:../x", bad: true},
		{rng: "npm:other@^1", bad: true},
		{rng: "next", bad: true},
		{rng: "^1.0.0 <<< 2", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.rng, func(t *testing.T) {
			t.Parallel()
			r, err := ParseNPMRange(tc.rng)
			if tc.bad {
				if !errors.Is(err, ErrRange) {
					t.Fatalf("ParseNPMRange(%q) = %v, want ErrRange", tc.rng, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range tc.yes {
				if !r.Contains(v) {
					t.Errorf("%q does not contain %s", tc.rng, v)
				}
			}
			for _, v := range tc.no {
				if r.Contains(v) {
					t.Errorf("%q contains %s", tc.rng, v)
				}
			}
		})
	}
	if (NPMRange{}).Contains("1.0.0") {
		t.Error("the zero range matches")
	}
}

// FuzzNPMRange: ranges come from published package.json files.
func FuzzNPMRange(f *testing.F) {
	for _, s := range []string{"^2.1.3", ">= 1 < 2 || 3.x", "1.0.0 - 2", "github:a/b", "~> 1.2", "*", "^1.0.0-beta.2", "> = 1"} {
		f.Add(s, "1.2.3")
	}
	f.Fuzz(func(t *testing.T, rng, v string) {
		r, err := ParseNPMRange(rng)
		if err != nil {
			if !errors.Is(err, ErrRange) {
				t.Fatalf("error without ErrRange: %v", err)
			}
			return
		}
		_ = r.Contains(v)
		_ = r.Contains("1.0.0")
	})
}

// TestRealNPMInstallsDependenciesListed: the real npm client installs
// debug@4.3.7 (served as published) together with ms@2.1.3 from the
// mirror, and debug finds ms at run time.
func TestRealNPMInstallsDependenciesListed(t *testing.T) {
	t.Parallel()
	npm := needTool(t, "npm")
	node := needTool(t, "node")
	ctx := context.Background()
	reg := newNPMRegistry(t)
	reg.addRecorded(t, "ms", "2.1.3")
	reg.addRecorded(t, "debug", "4.3.7")
	m := newTestMirror(t, true)
	m.cfg.NPMRegistryURL = reg.URL
	for _, n := range []string{"ms", "debug"} {
		if _, err := m.AddNPM(ctx, Spec{Manager: NPM, Name: n, Version: map[string]string{"ms": "2.1.3", "debug": "4.3.7"}[n]}, nil); err != nil {
			t.Fatal(err)
		}
	}
	srv := serveMirror(t, m)
	home := t.TempDir()
	proj := filepath.Join(home, "proj")
	os.MkdirAll(proj, 0o755)
	os.WriteFile(filepath.Join(proj, "package.json"), []byte(`{"name":"proj","version":"1.0.0","private":true}`), 0o644)
	out, err := run(t, proj, clientEnv(home), npm, "install", "--registry", srv.URL+"/mirror/npm/", "--cache", filepath.Join(home, "cache"),
		"--no-audit", "--no-fund", "debug@4.3.7", "ms@2.1.3")
	if err != nil {
		t.Fatalf("npm install: %v\n%s", err, out)
	}
	got, err := run(t, proj, clientEnv(home), node, "-e", "const d = require('debug'); console.log(d.humanize(7200000))")
	if err != nil || strings.TrimSpace(got) != "2h" {
		t.Errorf("debug with ms = %q, %v", got, err)
	}
}
