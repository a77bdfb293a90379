package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// installServer starts a server whose installer network (table, prefix,
// pool) is its own, with fast readiness checks.
func installServer(t *testing.T, extra string) (*server, string, string) {
	t.Helper()
	n := testenv.NewNet(t, 'e')
	cfg := fmt.Sprintf(`readiness:
  interval: 1s
  timeout: 30s
  stale_after: 10s
  min_refresh: 0s
  topology_interval: 20s
installer:
  pool: %s
  table: %s
  prefix: %s
`, n.Pool, n.Table, n.Prefix) + extra
	// Registered after NewNet's cleanup, so it runs first: the server stops
	// before its table goes (a probe in flight would make a new network).
	s := startServer(t, cfg)
	return s, n.Table, n.Prefix
}

// writeWheel writes a pure wheel for module name (VERSION = version) into dir.
func writeWheel(t *testing.T, dir, name, version string) string {
	return writeWheelTB(t, dir, name, version)
}

func writeWheelTB(t testing.TB, dir, name, version string) string {
	t.Helper()
	fn, b := testenv.BuildWheel(t, name, version)
	p := filepath.Join(dir, fn)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeTarball writes an npm package whose main returns "hello from NAME".
func writeTarball(t *testing.T, dir, name, version string) string {
	t.Helper()
	var buf bytes.Buffer
	gw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gw)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", fmt.Sprintf(`{"name":%q,"version":%q,"main":"index.js","scripts":{"postinstall":"touch /home/sandbox/pwned"},"license":"MIT"}`, name, version)},
		{"package/index.js", fmt.Sprintf("module.exports = () => 'hello from %s';\n", name)},
	} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg, ModTime: time.Now()})
		io.WriteString(tw, f.body)
	}
	tw.Close()
	gw.Close()
	p := filepath.Join(dir, name+"-"+version+".tgz")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// importOSV imports the test OSV records as a fresh dump: a copy whose
// newest record was modified just now (the readiness check fails a dump
// whose newest record is older than osv_max_age, and the stored records
// only grow older).
func (s *server) importOSV() {
	s.t.Helper()
	s.cliArgs([]string{"mirror", "osv", "import"}, freshOSV(s.t, time.Now()))
}

// importOldOSV imports the test OSV records as they are stored (their
// newest record was modified months ago).
func (s *server) importOldOSV() {
	s.t.Helper()
	s.cliArgs([]string{"mirror", "osv", "import"}, filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "osv"))
}

var modifiedField = regexp.MustCompile(`"modified":\s*"[^"]*"`)

// freshOSV copies the test OSV records into a new folder, with the first
// record's modified time set to at.
func freshOSV(t testing.TB, at time.Time) string {
	t.Helper()
	src := filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "osv")
	dst := t.TempDir()
	bumped := false
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bumped && strings.HasSuffix(p, ".json") && modifiedField.Match(b) {
			b = modifiedField.ReplaceAll(b, []byte(`"modified": "`+at.UTC().Format(time.RFC3339Nano)+`"`))
			bumped = true
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil || !bumped {
		t.Fatalf("copying the OSV records: %v (bumped %v)", err, bumped)
	}
	return dst
}

// waitReadyz polls /readyz until it answers want, and returns the body.
func (s *server) waitReadyz(want int, within time.Duration) reply {
	s.t.Helper()
	deadline := time.Now().Add(within)
	var r reply
	for time.Now().Before(deadline) {
		r = s.do("GET", "/readyz", "", nil)
		if r.status == want {
			return r
		}
		time.Sleep(250 * time.Millisecond)
	}
	s.t.Fatalf("/readyz did not become %d within %s: %d %s", want, within, r.status, r.body)
	return r
}

func failingChecks(t *testing.T, r reply) []string {
	t.Helper()
	var names []string
	checks, _ := r.json(t)["checks"].([]any)
	if d, ok := r.json(t)["error"].(map[string]any); ok {
		checks, _ = d["details"].(map[string]any)["checks"].([]any)
	}
	for _, c := range checks {
		m := c.(map[string]any)
		if m["status"] != "pass" {
			names = append(names, m["name"].(string))
		}
	}
	sort.Strings(names)
	return names
}

func (s *server) install(key, id, manager string, pkgs ...string) reply {
	s.t.Helper()
	return s.do("POST", "/v1/sessions/"+id+"/install", key, map[string]any{"manager": manager, "packages": pkgs})
}

func TestInstallWheelAndNPMIntoSession(t *testing.T) {
	t.Parallel()
	s, _, _ := installServer(t, "")
	dir := t.TempDir()
	s.importOSV()
	for _, f := range []string{
		writeWheel(t, dir, "alpha-pkg", "1.0.0"), writeWheel(t, dir, "alpha-pkg", "1.2.0"), writeWheel(t, dir, "beta", "0.1"),
		writeTarball(t, dir, "hello-npm", "1.0.0"),
		filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "wheels", "example-21.12-py3-none-any.whl"),
	} {
		s.cliArgs([]string{"mirror", "add"}, f)
	}
	key := s.key("PRO")
	py := s.session(key, "python3")
	s.waitReadyz(200, 90*time.Second)

	r := s.install(key, py, "pip", "alpha-pkg", "example==21.12")
	if r.status != 200 {
		t.Fatalf("install: %d %s", r.status, r.body)
	}
	inst := r.json(t)["installed"].([]any)
	first := inst[0].(map[string]any)
	if first["version"] != "1.2.0" || first["resolved"] != true || len(first["sha256"].(string)) != 64 {
		t.Fatalf("reply does not say which version: %s", r.body)
	}
	res := s.exec(key, py, "import alpha_pkg, example; print(alpha_pkg.VERSION)")
	if res["stdout"] != "1.2.0\n" {
		t.Fatalf("import in the next execute: %v", res)
	}

	js := s.session(key, "javascript")
	if r := s.install(key, js, "npm", "hello-npm@1.0.0"); r.status != 200 {
		t.Fatalf("npm install: %d %s", r.status, r.body)
	}
	res = s.exec(key, js, "console.log(require('hello-npm')(), require('fs').existsSync('/home/sandbox/pwned'))")
	if res["stdout"] != "hello from hello-npm false\n" {
		t.Fatalf("require in the next execute: %v", res)
	}

	// The installers' fetches count as mirror hits.
	m := string(s.do("GET", "/metrics", "", nil).body)
	for _, want := range []string{`sandboxapi_mirror_hits_total{ecosystem="pypi"}`, `sandboxapi_mirror_hits_total{ecosystem="npm"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Another key's session is not found.
	other := s.key("PRO")
	if r := s.install(other, py, "pip", "beta"); r.status != 404 {
		t.Fatalf("other key: %d %s", r.status, r.body)
	}
}

func TestInstallRefusalsAreAllOrNothing(t *testing.T) {
	t.Parallel()
	s, _, _ := installServer(t, "")
	dir := t.TempDir()
	s.importOSV()
	for _, f := range []string{writeWheel(t, dir, "one", "1.0"), writeWheel(t, dir, "two", "1.0"), writeWheel(t, dir, "gone", "1.0"), writeWheel(t, dir, "bad", "1.0")} {
		s.cliArgs([]string{"mirror", "add"}, f)
	}
	s.cliArgs([]string{"mirror", "remove"}, "pip", "gone==1.0")
	// A stored file altered behind the mirror's back is quarantined by verify.
	blobs, _ := filepath.Glob(filepath.Join(s.dataDir, "mirror", "blobs", "sha256", "*", "*"))
	list := s.cli("mirror", "list", "--json")
	sum := regexp.MustCompile(`"filename":\s*"bad-1.0-py3-none-any.whl"[^}]*?"sha256":\s*"([0-9a-f]{64})"`).FindStringSubmatch(list)
	if sum == nil {
		t.Fatalf("no sha256 for bad in %s", list)
	}
	for _, b := range blobs {
		if strings.Contains(b, sum[1]) {
			os.Chmod(b, 0o644)
			if err := os.WriteFile(b, []byte("tampered"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// verify exits non-zero when it quarantined something (timers fail).
	if out, err := exec.Command(s.bin, "mirror", "verify", "--config", s.config, "--data-dir", s.dataDir).CombinedOutput(); err == nil || !strings.Contains(string(out), "1 artifact(s) quarantined") {
		t.Fatalf("mirror verify of a tampered file: %v %s", err, out)
	}
	// A wheel an OSV record in the test data names (MAL-2024-4920: every
	// colorama-py 0.6 is malicious) is refused at admission.
	vuln := writeWheel(t, dir, "colorama-py", "0.6")
	if out, err := exec.Command(s.bin, "mirror", "add", "--config", s.config, "--data-dir", s.dataDir, vuln).CombinedOutput(); err == nil {
		t.Fatalf("mirror add of an OSV-affected wheel passed: %s", out)
	}
	if list := s.cli("mirror", "list", "--json"); !regexp.MustCompile(`"filename":\s*"colorama_py-0.6-py3-none-any.whl"[^}]*"status":\s*"refused"|"status":\s*"refused"[^}]*"filename":\s*"colorama_py-0.6-py3-none-any.whl"`).MatchString(list) {
		t.Fatalf("colorama-py 0.6 not recorded as refused: %s", list)
	}
	key := s.key("PRO")
	id := s.session(key, "python3")
	s.waitReadyz(200, 90*time.Second)

	cases := []struct {
		name   string
		mgr    string
		pkgs   []string
		status int
		bad    string // the package the reply must name
		why    string
		reason string // the reason must hold this
	}{
		{"missing", "pip", []string{"nope==1.0"}, 422, "nope==1.0", "missing", ""},
		{"unknown version", "pip", []string{"one==9.9"}, 422, "one==9.9", "missing", ""},
		{"removed", "pip", []string{"gone==1.0"}, 422, "gone==1.0", "removed", ""},
		{"quarantined", "pip", []string{"bad"}, 422, "bad", "quarantined", ""},
		{"range", "pip", []string{"one>=1.0"}, 422, "one>=1.0", "invalid", ""},
		{"url", "pip", []string{"https://example.com/x.whl"}, 422, "https://example.com/x.whl", "invalid", ""},
		{"npm range", "npm", []string{"hello@^1.0.0"}, 422, "hello@^1.0.0", "invalid", ""},
		{"npm missing", "npm", []string{"left-pad@1.3.0"}, 422, "left-pad@1.3.0", "missing", ""},
		{"osv refused", "pip", []string{"colorama-py==0.6"}, 422, "colorama-py==0.6", "refused", "MAL-2024-4920"},
		{"one of three refused", "pip", []string{"one==1.0", "nope", "two"}, 422, "nope", "missing", ""},
		{"one of three osv-refused", "pip", []string{"one==1.0", "colorama_py==0.6", "two"}, 422, "colorama_py==0.6", "refused", "MAL-2024-4920"},
		{"bad manager", "gem", []string{"x"}, 400, "", "", ""},
		{"no packages", "pip", []string{}, 400, "", "", ""},
	}
	for _, tc := range cases {
		r := s.install(key, id, tc.mgr, tc.pkgs...)
		if r.status != tc.status {
			t.Errorf("%s: got %d %s, want %d", tc.name, r.status, r.body, tc.status)
			continue
		}
		if tc.status != 422 {
			continue
		}
		det := r.json(t)["error"].(map[string]any)["details"].(map[string]any)["packages"].([]any)
		reason, _ := det[0].(map[string]any)["reason"].(string)
		if len(det) != 1 || det[0].(map[string]any)["package"] != tc.bad || det[0].(map[string]any)["status"] != tc.why || reason == "" || !strings.Contains(reason, tc.reason) {
			t.Errorf("%s: details %s", tc.name, r.body)
		}
	}
	res := s.exec(key, id, "import importlib.util as u; print(u.find_spec('one') is None, u.find_spec('two') is None, u.find_spec('colorama_py') is None)")
	if res["stdout"] != "True True True\n" {
		t.Fatalf("a refused request installed something: %v", res)
	}
}

func TestInstallGateFailsClosed(t *testing.T) {
	t.Parallel()
	s, table, prefix := installServer(t, "mirror:\n  osv_max_age: 50s\n  osv_max_record_age: 720h\n")
	dir := t.TempDir()
	s.importOSV()
	s.cliArgs([]string{"mirror", "add"}, writeWheel(t, dir, "one", "1.0"))
	key := s.key("PRO")
	id := s.session(key, "python3")
	s.waitReadyz(200, 90*time.Second)
	if out := s.cli("readiness", "check", "--url", "http://"+s.addr); !strings.Contains(out, "status: ready") {
		t.Fatalf("readiness check: %s", out)
	}
	gated := func(want ...string) {
		t.Helper()
		r := s.waitReadyz(503, 15*time.Second)
		if got := failingChecks(t, r); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("failing checks %v, want %v: %s", got, want, r.body)
		}
		ir := s.install(key, id, "pip", "one")
		if ir.status != 503 || ir.errCode(t) != "not_ready" || strings.Join(failingChecks(t, ir), ",") != strings.Join(want, ",") {
			t.Fatalf("install while not ready: %d %s", ir.status, ir.body)
		}
		cmd := exec.Command(s.bin, "readiness", "check", "--url", "http://"+s.addr, "--config", s.config, "--data-dir", s.dataDir)
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Fatalf("readiness check passed while not ready: %s", out)
		}
	}

	// The mirror stops serving its files. (Each phase starts with a fresh
	// OSV import, so only the last phase sees it grow old.)
	s.importOSV()
	blobs := filepath.Join(s.dataDir, "mirror", "blobs")
	if err := os.Rename(blobs, blobs+".off"); err != nil {
		t.Fatal(err)
	}
	gated("mirror")
	os.Rename(blobs+".off", blobs)
	s.waitReadyz(200, 15*time.Second)

	// A firewall rule disappears (each of two rules): the gate closes, the
	// server rebuilds the table and opens the gate again once it has
	// verified the rebuilt rules, without the operator.
	for _, rule := range []string{`iifname vmap @sessions # handle (\d+)`, `iifname "` + prefix + `h\*" drop # handle (\d+)`} {
		s.importOSV()
		out, err := exec.Command("nft", "-a", "list", "chain", "inet", table, "input").Output()
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(rule).FindSubmatch(out)
		if m == nil {
			t.Fatalf("no rule %s in %s", rule, out)
		}
		if out, err := exec.Command("nft", "delete", "rule", "inet", table, "input", "handle", string(m[1])).CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		r := s.waitReadyz(503, 15*time.Second)
		// The check that rebuilt fails firewall and topology at once; the
		// firewall check may already have verified the rebuilt rules by
		// the time /readyz is read (the topology canary takes longer).
		got := failingChecks(t, r)
		onlyFence := len(got) > 0
		for _, c := range got {
			onlyFence = onlyFence && (c == "firewall" || c == "topology")
		}
		if !onlyFence || !strings.Contains(string(r.body), "rebuilt") {
			t.Fatalf("failing checks %v, want firewall or topology (rebuilt): %s", got, r.body)
		}
		// An install re-runs the failing checks on demand: it goes ahead
		// only once they have verified the rebuilt rule, else it is 503.
		switch ir := s.install(key, id, "pip", "one"); {
		case ir.status == 200:
			out, err := exec.Command("nft", "-a", "list", "chain", "inet", table, "input").Output()
			if err != nil || !regexp.MustCompile(rule).Match(out) {
				t.Fatalf("install went ahead before rule %s was rebuilt: %v %s", rule, err, out)
			}
		case ir.status != 503 || ir.errCode(t) != "not_ready":
			t.Fatalf("install while the rebuilt rules are not verified: %d %s", ir.status, ir.body)
		}
		s.waitReadyz(200, 30*time.Second)
		out, err = exec.Command("nft", "-a", "list", "chain", "inet", table, "input").Output()
		if err != nil || !regexp.MustCompile(rule).Match(out) {
			t.Fatalf("rule %s not rebuilt: %v %s", rule, err, out)
		}
	}
	s.waitReadyz(200, 15*time.Second)
	if r := s.install(key, id, "pip", "one"); r.status != 200 {
		t.Fatalf("install when ready again: %d %s", r.status, r.body)
	}

	// A dump imported just now whose newest record is months old is old
	// data: the gate closes until a fresh dump is imported.
	s.importOldOSV()
	r := s.waitReadyz(503, 15*time.Second)
	if got := failingChecks(t, r); strings.Join(got, ",") != "osv" || !strings.Contains(string(r.body), "newest record was modified more than") {
		t.Fatalf("old dump: failing checks %v: %s", got, r.body)
	}
	if ir := s.install(key, id, "pip", "one"); ir.status != 503 {
		t.Fatalf("install with an old dump: %d %s", ir.status, ir.body)
	}
	s.importOSV()
	s.waitReadyz(200, 15*time.Second)

	// The OSV database grows too old, then is refreshed.
	r = s.waitReadyz(503, 90*time.Second)
	if got := failingChecks(t, r); strings.Join(got, ",") != "osv" {
		t.Fatalf("failing checks %v: %s", got, r.body)
	}
	if ir := s.install(key, id, "pip", "one"); ir.status != 503 {
		t.Fatalf("install with old OSV: %d %s", ir.status, ir.body)
	}
	s.importOSV()
	s.waitReadyz(200, 15*time.Second)
	if res := s.exec(key, id, "import one; print(one.VERSION)"); res["stdout"] != "1.0\n" {
		t.Fatalf("import: %v", res)
	}
	_ = http.StatusOK
}
