package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

type cdxDoc struct {
	SpecVersion string `json:"specVersion"`
	Components  []struct {
		Name       string                          `json:"name"`
		Version    string                          `json:"version"`
		PURL       string                          `json:"purl"`
		Hashes     []struct{ Alg, Content string } `json:"hashes"`
		Properties []struct{ Name, Value string }  `json:"properties"`
		ExtRefs    []struct{ URL, Type string }    `json:"externalReferences"`
	} `json:"components"`
	Vulnerabilities []struct {
		ID string `json:"id"`
	} `json:"vulnerabilities"`
}

func (d cdxDoc) prop(i int, name string) string {
	for _, p := range d.Components[i].Properties {
		if p.Name == name {
			return p.Value
		}
	}
	return ""
}

// TestCatalogueSBOM: `mirror sbom` lists the whole catalogue with statuses
// and the advisories behind a refusal, and validates with the CycloneDX
// project's own validator (schema 1.6). Real SQLite, real mirror, real
// OSV import. (A session's SBOM is TestSBOMs in internal/app.)
func TestCatalogueSBOM(t *testing.T) {
	modules := testenv.CycloneDXModules(t)
	td := filepath.Join(testenv.ModuleRoot(), "mirror", "testdata")
	dd := t.TempDir()
	mustCLI(t, "mirror", "osv", "import", filepath.Join(td, "osv"), "--data-dir", dd)
	mustCLI(t, "mirror", "add", filepath.Join(td, "wheels", "wheel-0.43.0-py3-none-any.whl"), "--data-dir", dd)
	mustCLI(t, "mirror", "add", filepath.Join(td, "npm", "is-number-7.0.0.tgz"), "--data-dir", dd)
	fn, data := testenv.BuildWheel(t, "requests", "2.30.0")
	bad := filepath.Join(t.TempDir(), fn)
	if err := os.WriteFile(bad, data, 0o644); err != nil {
		t.Fatal(err)
	}
	runCLI(t, "mirror", "add", bad, "--data-dir", dd) // refused: exits non-zero

	out := filepath.Join(t.TempDir(), "catalogue.cdx.json")
	mustCLI(t, "mirror", "sbom", "-o", out, "--data-dir", dd)
	stdout := mustCLI(t, "mirror", "sbom", "--data-dir", dd)
	var cat cdxDoc
	if err := json.Unmarshal([]byte(stdout), &cat); err != nil {
		t.Fatalf("stdout is not the document alone: %v\n%s", err, stdout)
	}
	statuses := map[string]string{}
	for i, c := range cat.Components {
		statuses[c.Name+"@"+c.Version] = cat.prop(i, "sandboxapi:mirror:status")
	}
	if statuses["wheel@0.43.0"] != "admitted" || statuses["is-number@7.0.0"] != "admitted" || statuses["requests@2.30.0"] != "refused" {
		t.Fatalf("catalogue statuses %v", statuses)
	}
	if len(cat.Vulnerabilities) == 0 {
		t.Fatal("the refusal's advisories are not in the catalogue SBOM")
	}

	testenv.ValidateWithCycloneDX(t, modules, out)
}
