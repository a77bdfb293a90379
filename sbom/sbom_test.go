package sbom

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

func TestPURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Package
		want string
	}{
		{name: "pypi normalised", p: Package{Manager: "pip", Name: "Typing_Extensions", Version: "4.12.2"}, want: "pkg:pypi/typing-extensions@4.12.2"},
		{name: "pypi file", p: Package{Manager: "pip", Name: "six", Version: "1.16.0", Filename: "six-1.16.0-py2.py3-none-any.whl"},
			want: "pkg:pypi/six@1.16.0?file_name=six-1.16.0-py2.py3-none-any.whl"},
		{name: "pypi local version", p: Package{Manager: "pip", Name: "torch", Version: "2.1.0+cpu"}, want: "pkg:pypi/torch@2.1.0%2Bcpu"},
		{name: "npm", p: Package{Manager: "npm", Name: "ms", Version: "2.1.3", Filename: "ms-2.1.3.tgz"}, want: "pkg:npm/ms@2.1.3"},
		{name: "npm scoped", p: Package{Manager: "npm", Name: "@types/node", Version: "20.1.0"}, want: "pkg:npm/%40types/node@20.1.0"},
		{name: "hostile name", p: Package{Manager: "npm", Name: "a?b#c@d", Version: "1/2"}, want: "pkg:npm/a%3Fb%23c%40d@1%2F2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := PURL(tt.p); got != tt.want {
				t.Fatalf("PURL = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestEcosystem(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"pip": "pypi", "pypi": "pypi", "npm": "npm"} {
		if got := Ecosystem(in); got != want {
			t.Errorf("Ecosystem(%q) = %q, want %q", in, got, want)
		}
	}
}

// samplePackages covers every status, both ecosystems, shared and
// accepted advisories and a file listed twice.
func samplePackages() []Package {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return []Package{
		{Manager: "pip", Name: "six", Version: "1.16.0", Filename: "six-1.16.0-py2.py3-none-any.whl",
			SHA256: strings.Repeat("a", 64), URLPath: "/mirror/pypi/files/" + strings.Repeat("a", 64) + "/six-1.16.0-py2.py3-none-any.whl",
			Status: "admitted", OSVSnapshot: "snap1", InstalledSnapshot: "snap0", InstalledAt: at, Source: "/tmp/six.whl"},
		{Manager: "pip", Name: "requests", Version: "2.19.0", Filename: "requests-2.19.0-py2.py3-none-any.whl",
			SHA256: strings.Repeat("b", 64), Status: "refused", Reasons: []string{"GHSA-x84v-xcm2-53pg: requests leaks"},
			Advisories: []string{"GHSA-x84v-xcm2-53pg", "PYSEC-2018-28"}, OSVSnapshot: "snap1"},
		{Manager: "npm", Name: "@scope/left-pad", Version: "1.3.0", Filename: "left-pad-1.3.0.tgz",
			SHA256: strings.Repeat("c", 64), Integrity: "sha512-" + strings.Repeat("A", 86) + "==", Status: "quarantined",
			Stripped: []string{"scripts.postinstall", "dependencies"}, Advisories: []string{"GHSA-x84v-xcm2-53pg"}, OSVSnapshot: "snap1"},
		{Manager: "npm", Name: "ms", Version: "2.1.3", Filename: "ms-2.1.3.tgz", SHA256: strings.Repeat("d", 64),
			Status: "admitted", Advisories: []string{"GHSA-aaaa-bbbb-cccc"}, Accepted: []string{"GHSA-aaaa-bbbb-cccc"}},
		{Manager: "npm", Name: "ms", Version: "2.1.3", Filename: "ms-2.1.3.tgz", SHA256: strings.Repeat("d", 64), Status: "removed"},
	}
}

func TestBuild(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	bom := Build(Subject{Name: "session s1", Properties: [][2]string{{PropSession, "s1"}}}, Tool{Name: "sandboxapi", Version: "test"}, samplePackages(), time.Now())
	if err := Write(&buf, bom); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		SpecVersion string `json:"specVersion"`
		Schema      string `json:"$schema"`
		Components  []struct {
			Ref    string `json:"bom-ref"`
			PURL   string `json:"purl"`
			Hashes []struct {
				Alg, Content string
			} `json:"hashes"`
			Properties []struct{ Name, Value string } `json:"properties"`
		} `json:"components"`
		Vulnerabilities []struct {
			ID      string `json:"id"`
			Affects []struct {
				Ref string `json:"ref"`
			} `json:"affects"`
			Analysis *struct {
				Response []string `json:"response"`
			} `json:"analysis"`
		} `json:"vulnerabilities"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SpecVersion != "1.6" || !strings.Contains(doc.Schema, "1.6") {
		t.Fatalf("spec %q schema %q", doc.SpecVersion, doc.Schema)
	}
	if len(doc.Components) != 5 {
		t.Fatalf("%d components", len(doc.Components))
	}
	refs := map[string]bool{}
	for _, c := range doc.Components {
		if refs[c.Ref] {
			t.Fatalf("duplicate bom-ref %s", c.Ref)
		}
		refs[c.Ref] = true
	}
	if c := doc.Components[0]; len(c.Hashes) != 1 || c.Hashes[0].Alg != "SHA-256" || c.Hashes[0].Content != strings.Repeat("a", 64) {
		t.Fatalf("hashes %+v", c.Hashes)
	}
	if c := doc.Components[2]; len(c.Hashes) != 2 || c.Hashes[1].Alg != "SHA-512" || c.PURL != "pkg:npm/%40scope/left-pad@1.3.0" {
		t.Fatalf("npm component %+v", c)
	}
	props := map[string]string{}
	for _, p := range doc.Components[0].Properties {
		props[p.Name] = p.Value
	}
	if props[PropStatus] != "admitted" || props[PropOSVSnapshot] != "snap1" || props[PropInstalledOn] != "snap0" {
		t.Fatalf("properties %v", props)
	}
	var stripped []string
	for _, p := range doc.Components[2].Properties {
		if p.Name == PropStripped {
			stripped = append(stripped, p.Value)
		}
	}
	if strings.Join(stripped, ",") != "scripts.postinstall,dependencies" {
		t.Fatalf("stripped properties of the re-packed npm component: %v", stripped)
	}
	if len(doc.Vulnerabilities) != 3 {
		t.Fatalf("%d vulnerabilities", len(doc.Vulnerabilities))
	}
	for _, v := range doc.Vulnerabilities {
		switch v.ID {
		case "GHSA-x84v-xcm2-53pg":
			if len(v.Affects) != 2 {
				t.Fatalf("%s affects %v", v.ID, v.Affects)
			}
		case "GHSA-aaaa-bbbb-cccc":
			if v.Analysis == nil || len(v.Analysis.Response) != 1 || v.Analysis.Response[0] != "will_not_fix" {
				t.Fatalf("accepted advisory analysis %+v", v.Analysis)
			}
		}
	}
}

// TestValidatesWithCycloneDXLibrary checks the output with the CycloneDX
// project's own validator (@cyclonedx/cyclonedx-library, JSON schema 1.6,
// strict). scripts/test.sh installs it; SANDBOXAPI_CYCLONEDX_MODULES names
// its node_modules folder.
func TestValidatesWithCycloneDXLibrary(t *testing.T) {
	modules := testenv.CycloneDXModules(t)
	dir := t.TempDir()
	cases := map[string][]Package{"empty": nil, "sample": samplePackages()}
	var files []string
	for name, pkgs := range cases {
		var buf bytes.Buffer
		if err := Write(&buf, Build(Subject{Name: name, Version: "1"}, Tool{Name: "sandboxapi", Version: "test"}, pkgs, time.Now())); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name+".cdx.json")
		if err := os.WriteFile(f, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	testenv.ValidateWithCycloneDX(t, modules, files...)

	// The validator does reject: a document that breaks the schema fails.
	bad := filepath.Join(dir, "bad.cdx.json")
	os.WriteFile(bad, []byte(`{"bomFormat":"CycloneDX","specVersion":"1.6","version":1,"components":[{"type":"nonsense","name":"x"}]}`), 0o644)
	out, err := exec.Command("node", testenv.CycloneDXValidator(), modules, bad).CombinedOutput()
	if err == nil {
		t.Fatalf("the validator accepted a broken document: %s", out)
	}
}
