package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeDepsTarball writes an npm package name@version whose package.json
// lists deps under "dependencies".
func writeDepsTarball(t *testing.T, dir, name, version string, deps map[string]string) string {
	t.Helper()
	pj, err := json.Marshal(map[string]any{"name": name, "version": version, "main": "index.js", "license": "MIT", "dependencies": deps})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	gw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gw)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", string(pj)},
		{"package/index.js", fmt.Sprintf("module.exports = %q;\n", name+" "+version)},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg, ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name+"-"+version+".tgz")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// depName is the k-th dependency of the test packages: a name as long as
// real ones (side-channel-map), so three of them overflowed the old
// 300-byte reading of the job's report.
func depName(k int) string { return fmt.Sprintf("missing-dependency-%02d", k) }

// libDeps returns dependencies from ... to-1 (depName), each at ^1.0.0.
func libDeps(from, to int) map[string]string {
	d := map[string]string{}
	for k := from; k < to; k++ {
		d[depName(k)] = "^1.0.0"
	}
	return d
}

// TestInstallNPMMissingDependenciesNamed: through the real server and
// runsc, an npm package missing 1, 3 or 20 dependencies (neither in the
// request nor in the session) is 422 naming every one with its range and
// the mirror's versions (the job's report used to be read from the last
// 300 bytes of its output, so three or more answered 500 install_failed);
// one the session already holds is left out; with all of them listed the
// install goes through. Hostile metadata (a 60 KB range, 20,000
// dependencies) is refused by `mirror add` with the limit named in
// `mirror list`, and installing it is a 422, not a 500.
func TestInstallNPMMissingDependenciesNamed(t *testing.T) {
	t.Parallel()
	s, _, _ := installServer(t, "")
	s.importOSV()
	dir := t.TempDir()
	// The mirror holds dependencies 0 to 9 at 1.0.0; 10 to 19 not at all.
	for k := range 10 {
		s.cliArgs([]string{"mirror", "add"}, writeDepsTarball(t, dir, depName(k), "1.0.0", nil))
	}
	want := map[string]map[string]string{"needs-one": libDeps(0, 1), "needs-three": libDeps(0, 3), "needs-twenty": libDeps(0, 20)}
	for name, deps := range want {
		s.cliArgs([]string{"mirror", "add"}, writeDepsTarball(t, dir, name, "1.0.0", deps))
	}
	key := s.key("PRO")
	js := s.session(key, "javascript")
	s.waitReadyz(200, 90*time.Second)

	var twenty []string
	for k := range 20 {
		twenty = append(twenty, depName(k))
	}
	check := func(pkg string, want []string) {
		t.Helper()
		r := s.install(key, js, "npm", pkg)
		if r.status != 422 {
			t.Fatalf("%s: %d %s", pkg, r.status, r.body)
		}
		pkgs := r.json(t)["error"].(map[string]any)["details"].(map[string]any)["packages"].([]any)
		p := pkgs[0].(map[string]any)
		md, _ := p["missing_dependencies"].([]any)
		if len(pkgs) != 1 || p["package"] != pkg || p["status"] != "missing_dependencies" || len(md) != len(want) {
			t.Fatalf("%s: want %d missing: %s", pkg, len(want), r.body)
		}
		for k, name := range want {
			d := md[k].(map[string]any)
			mv, _ := d["mirror_versions"].([]any)
			inMirror := name < depName(10)
			if d["name"] != name || d["range"] != "^1.0.0" || (inMirror && (len(mv) != 1 || mv[0] != "1.0.0")) || (!inMirror && len(mv) != 0) {
				t.Fatalf("%s: dependency %d: %v", pkg, k, d)
			}
		}
	}
	check("needs-one@1.0.0", twenty[:1])
	check("needs-three@1.0.0", twenty[:3])
	check("needs-twenty@1.0.0", twenty)
	// Once the session holds the second, needs-three misses the other two.
	if r := s.install(key, js, "npm", twenty[1]+"@1.0.0"); r.status != 200 {
		t.Fatalf("%s: %d %s", twenty[1], r.status, r.body)
	}
	check("needs-three@1.0.0", []string{twenty[0], twenty[2]})
	// Listing all of them installs.
	req := []string{"needs-three@1.0.0", twenty[0] + "@1.0.0", twenty[2] + "@1.0.0"}
	if r := s.install(key, js, "npm", req...); r.status != 200 {
		t.Fatalf("needs-three with its dependencies: %d %s", r.status, r.body)
	}
	res := s.exec(key, js, "console.log(require('needs-three'), require('"+twenty[1]+"'))")
	if strings.TrimSpace(res["stdout"].(string)) != "needs-three 1.0.0 "+twenty[1]+" 1.0.0" {
		t.Fatalf("require: %v", res)
	}
	// Hostile metadata: refused at admission, with the limit as reason.
	orRange := strings.TrimSuffix(strings.Repeat("1 || ", 12000), " || ")
	many := map[string]string{}
	for k := range 20000 {
		many[fmt.Sprintf("dep-%d", k)] = "^1.0.0"
	}
	for _, h := range []struct{ file, want string }{
		{writeDepsTarball(t, dir, "long-range", "1.0.0", map[string]string{depName(0): orRange}), "mirror.limits.max_range_bytes"},
		{writeDepsTarball(t, dir, "many-deps", "1.0.0", many), "mirror.limits.max_dependencies"},
	} {
		out, err := exec.Command(s.bin, "mirror", "add", "--config", s.config, "--data-dir", s.dataDir, h.file).CombinedOutput()
		if err == nil || !strings.Contains(string(out), h.want) {
			t.Fatalf("mirror add %s: %v\n%s", filepath.Base(h.file), err, out)
		}
	}
	if out := s.cli("mirror", "list"); strings.Count(out, "mirror.limits.max_") != 2 {
		t.Errorf("mirror list does not show both refusals:\n%s", out)
	}

	// The hostile packages were never admitted: a 422 naming them.
	for _, pkg := range []string{"long-range@1.0.0", "many-deps@1.0.0"} {
		if r := s.install(key, js, "npm", pkg); r.status != 422 || !strings.Contains(string(r.body), pkg) {
			t.Fatalf("%s: %d %s", pkg, r.status, r.body)
		}
	}
}
