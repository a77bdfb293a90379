package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// TestInstallPipMissingRequirementsNamed: through the API with the real
// binary and runsc, a wheel whose Requires-Dist names a requirement the
// request does not bring (and the session does not hold) is 422
// missing_dependencies naming it, its specifier and the mirror's
// versions, in the npm side's shape; requirements for another platform,
// an old Python or an extra are not demanded. With it, 200 and both
// import.
func TestInstallPipMissingRequirementsNamed(t *testing.T) {
	t.Parallel()
	s, _, _ := installServer(t, "")
	s.importOSV()
	dir := t.TempDir()
	for _, w := range []struct {
		name, version string
		requires      []string
	}{
		{"needs-req", "2.0", []string{"req-one>=1.5", "req-two (<2,>=1.0)", `winonly; sys_platform == "win32"`, `oldpy>=1; python_version < "3.10"`, `docs-x; extra == "docs"`}},
		{"req-one", "1.6", nil},
		{"req-two", "1.1", nil},
	} {
		fn, b := testenv.BuildWheelRequires(t, w.name, w.version, w.requires...)
		p := filepath.Join(dir, fn)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s.cliArgs([]string{"mirror", "add"}, p)
	}
	key := s.key("PRO")
	py := s.session(key, "python3")
	s.waitReadyz(200, 90*time.Second)

	r := s.install(key, py, "pip", "needs-req==2.0")
	if r.status != 422 {
		t.Fatalf("needs-req alone: %d %s", r.status, r.body)
	}
	e := r.json(t)["error"].(map[string]any)
	pkgs := e["details"].(map[string]any)["packages"].([]any)
	p := pkgs[0].(map[string]any)
	md, _ := p["missing_dependencies"].([]any)
	if e["code"] != "packages_rejected" || len(pkgs) != 1 || p["package"] != "needs-req==2.0" || p["status"] != "missing_dependencies" || len(md) != 2 {
		t.Fatalf("needs-req alone: %s", r.body)
	}
	for k, want := range []struct{ name, rng, version string }{{"req-one", ">=1.5", "1.6"}, {"req-two", "<2,>=1.0", "1.1"}} {
		d := md[k].(map[string]any)
		mv, _ := d["mirror_versions"].([]any)
		if d["name"] != want.name || d["range"] != want.rng || len(mv) != 1 || mv[0] != want.version {
			t.Errorf("missing %d: %v", k, d)
		}
	}
	if reason, _ := p["reason"].(string); !strings.Contains(reason, "req-one>=1.5") || strings.Contains(reason, "winonly") || strings.Contains(reason, "docs-x") || strings.Contains(reason, "oldpy") {
		t.Errorf("reason: %q", reason)
	}
	if r := s.install(key, py, "pip", "needs-req==2.0", "req-one==1.6", "req-two==1.1"); r.status != 200 {
		t.Fatalf("needs-req with its requirements: %d %s", r.status, r.body)
	}
	res := s.exec(key, py, "import needs_req, req_one, req_two; print(needs_req.VERSION, req_one.VERSION, req_two.VERSION)")
	if strings.TrimSpace(res["stdout"].(string)) != "2.0 1.6 1.1" {
		t.Fatalf("import: %v", res)
	}
}
