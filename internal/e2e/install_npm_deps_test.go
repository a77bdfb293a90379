package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// TestInstallNPMNeedsDependencies: through the API, an npm package whose
// dependencies are neither in the request nor in the session is 422 with
// the missing names, ranges and the mirror's versions; with them listed it
// installs, and the reply says what the mirror stripped.
func TestInstallNPMNeedsDependencies(t *testing.T) {
	t.Parallel()
	s, _, _ := installServer(t, "")
	s.importOSV()
	td := filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "npm")
	s.cliArgs([]string{"mirror", "add"}, filepath.Join(td, "debug-4.3.7.tgz"))
	s.cliArgs([]string{"mirror", "add"}, filepath.Join(td, "ms-2.1.3.tgz"))
	key := s.key("PRO")
	js := s.session(key, "javascript")
	s.waitReadyz(200, 90*time.Second)

	r := s.install(key, js, "npm", "debug@4.3.7")
	if r.status != 422 {
		t.Fatalf("debug alone: %d %s", r.status, r.body)
	}
	p := r.json(t)["error"].(map[string]any)["details"].(map[string]any)["packages"].([]any)[0].(map[string]any)
	md, _ := p["missing_dependencies"].([]any)
	if p["status"] != "missing_dependencies" || len(md) != 1 {
		t.Fatalf("details: %s", r.body)
	}
	d := md[0].(map[string]any)
	if d["name"] != "ms" || d["range"] != "^2.1.3" || len(d["mirror_versions"].([]any)) != 1 || d["mirror_versions"].([]any)[0] != "2.1.3" {
		t.Fatalf("missing dependency: %s", r.body)
	}
	r = s.install(key, js, "npm", "debug@4.3.7", "ms@2.1.3")
	if r.status != 200 {
		t.Fatalf("debug with ms: %d %s", r.status, r.body)
	}
	inst := r.json(t)["installed"].([]any)
	// The mirror serves both as published; extraction into the session
	// takes debug's dependency fields out of its package.json.
	if inst[0].(map[string]any)["stripped"] != nil || inst[1].(map[string]any)["stripped"] != nil {
		t.Errorf("stripped in the reply: %s", r.body)
	}
	res := s.exec(key, js, "console.log(require('debug').humanize(60000), require('debug/package.json').dependencies === undefined)")
	if strings.TrimSpace(res["stdout"].(string)) != "1m true" {
		t.Fatalf("require('debug'): %v", res)
	}
}
