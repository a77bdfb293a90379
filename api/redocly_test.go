package api

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenAPIPublicRoutesAndServers: every operation states its security
// (public ones `security: []`, so generators and linters do not guess),
// and no server address is fixed in the document (a deployment is
// reached at its own address).
func TestOpenAPIPublicRoutesAndServers(t *testing.T) {
	t.Parallel()
	var doc struct {
		Servers []struct{ URL string } `json:"servers"`
		Paths   map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for _, s := range doc.Servers {
		if strings.Contains(s.URL, "://") {
			t.Errorf("servers has a fixed address %q", s.URL)
		}
	}
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			if method == "parameters" {
				continue
			}
			var op struct {
				Security *[]map[string][]string `json:"security"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			public := !strings.HasPrefix(path, "/v1/")
			switch {
			case op.Security == nil:
				t.Errorf("%s %s: no security stated", method, path)
			case public && len(*op.Security) != 0:
				t.Errorf("%s %s: a public route with security %v", method, path, *op.Security)
			case !public && len(*op.Security) == 0:
				t.Errorf("%s %s: an authenticated route with security []", method, path)
			}
		}
	}
}

// TestOpenAPIRedoclyLint runs Redocly's linter with its recommended rules
// (`redocly lint --extends=recommended`) on api/openapi.json: errors fail,
// warnings are logged. scripts/test.sh installs @redocly/cli into the
// tools cache; SANDBOXAPI_REDOCLY names the binary.
func TestOpenAPIRedoclyLint(t *testing.T) {
	bin := os.Getenv("SANDBOXAPI_REDOCLY")
	if bin == "" {
		bin = "/var/cache/sandboxapi/testtools/redocly/node_modules/.bin/redocly"
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("SANDBOXAPI_REQUIRE_CLIENTS") == "1" {
			t.Fatalf("redocly missing (%v): scripts/test.sh installs @redocly/cli", err)
		}
		t.Skipf("redocly missing: %v", err)
	}
	abs, _ := filepath.Abs("openapi.json")
	cmd := exec.Command(bin, "lint", "--extends=recommended", "--format=summary", abs)
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redocly lint: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
