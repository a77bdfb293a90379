package cli

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// systemWheel returns the setuptools wheel shipped with the machine's
// Python (Debian's python3-setuptools-whl): a real wheel for an index.
func systemWheel(t *testing.T) (string, []byte) {
	t.Helper()
	paths, _ := filepath.Glob("/usr/share/python-wheels/setuptools-*-py3-none-any.whl")
	if len(paths) == 0 {
		testenv.Skip(t, "no setuptools wheel in /usr/share/python-wheels (Debian's python3-setuptools-whl)")
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Base(paths[0]), b
}

// withUserinfo puts user:pass into an http URL.
func withUserinfo(u, user, pass string) string {
	return strings.Replace(u, "http://", "http://"+user+":"+pass+"@", 1)
}

// TestConfiguredSecretsStayHidden plants a unique secret in every config
// value that can hold one (index URLs' userinfo and query, the PostgreSQL
// store URL's password and query, the gateway and cluster secrets, TLS and
// cluster URLs) and runs every command an operator or script reads the
// output of, against a real loopback index (with a real wheel), real
// SQLite, and an unreachable PostgreSQL on loopback: no secret appears on
// stdout or stderr (logs included), whether the command succeeds or
// fails. (The server's own surfaces, with the real binary, are
// TestSecretsStayHiddenServe in internal/e2e.)
func TestConfiguredSecretsStayHidden(t *testing.T) {
	wname, wheel := systemWheel(t)
	up := newUpstream(t)
	up.pip[wname] = wheel
	up.addNPM("is-number", "7.0.0", npmTarball(t, "is-number", "7.0.0"), "2020-01-01T00:00:00Z")
	up.tags["is-number"] = "7.0.0"
	closed := httptest.NewServer(nil)
	closed.Close()
	version := strings.SplitN(strings.TrimSuffix(wname, "-py3-none-any.whl"), "-", 2)[1]
	accept := []string{"--accept", "GHSA-5rjg-fvgr-3xxf", "--accept", "GHSA-cx63-2mw6-8hw5"}
	mirrorCmds := [][]string{
		append([]string{"mirror", "add", "pip", "setuptools==" + version}, accept...),
		{"mirror", "add", "npm", "is-number@7.0.0"},
		{"mirror", "add", "npm", "is-number@9.9.9"},
		{"mirror", "add", "npm", "absent@1.0.0", "is-number@7.0.0"},
		{"mirror", "add", "pip", "absent==1.0"},
		{"mirror", "list"},
		{"mirror", "list", "--json"},
		{"mirror", "sbom"},
		{"mirror", "verify"},
		{"mirror", "osv", "status"},
	}
	opsCmds := [][]string{{"validate"}, {"readiness", "check"}, {"doctor"}, {"keys", "list"}, {"mirror", "list"}}
	tests := []struct {
		name    string
		yaml    string // %[1]s .. %[n]s are the secrets, in order
		secrets []string
		cmds    [][]string
		env     map[string]string
	}{
		{
			name: "index URLs with userinfo",
			yaml: "mirror:\n  pip_index_url: " + withUserinfo(up.srv.URL, "pipuser", "%[1]s") + "/simple/\n" +
				"  npm_registry_url: " + withUserinfo(up.srv.URL, "npmuser", "%[2]s") + "/\n",
			secrets: []string{"PIPPASSa1b2", "NPMPASSe5f6"},
			cmds:    append(mirrorCmds, opsCmds...),
		},
		{
			name: "unreachable index with userinfo and a token",
			yaml: "mirror:\n  pip_index_url: " + withUserinfo(closed.URL, "u", "%[1]s") + "/simple/?token=%[3]s\n" +
				"  npm_registry_url: " + withUserinfo(closed.URL, "u", "%[2]s") + "/?token=%[4]s\n",
			secrets: []string{"DEADPIPg7h8", "DEADNPMi9j0", "DEADPIPTOKk1", "DEADNPMTOKk2"},
			cmds:    [][]string{{"mirror", "add", "pip", "x==1"}, {"mirror", "add", "npm", "x@1.0.0"}, {"mirror", "add", "npm", "x@1.0.0", "y@1.0.0"}},
		},
		{
			name:    "PostgreSQL store URL that does not answer",
			yaml:    "store:\n  url: postgres://app:%[1]s@127.0.0.1:1/sb?connect_timeout=1&password=%[2]s\n",
			secrets: []string{"PGPASSk1l2", "PGQUERYm3n4"},
			cmds:    opsCmds,
		},
		{
			name:    "PostgreSQL store URL that does not parse",
			yaml:    "store:\n  url: postgres://app:%[1]s@127.0.0.1:port/sb?password=%[2]s\n",
			secrets: []string{"PGBADPASSq1r2", "PGBADQUERYs3t4"},
			cmds:    opsCmds,
		},
		{
			name:    "PostgreSQL store URL from the environment",
			secrets: []string{"PGENVPASSo5p6"},
			env:     map[string]string{"SANDBOXAPI_STORE_URL": "postgres://app:%[1]s@127.0.0.1:1/sb?connect_timeout=1"},
			cmds:    opsCmds,
		},
		{
			name: "URLs that do not validate",
			yaml: "mirror:\n  pip_index_url: ftp://u:%[1]s@h/simple/\n  npm_registry_url: http://u:%[2]s@h:bad/\n  serve_url: http://u:%[3]s@127.0.0.1:1/x?t=%[4]s\n" +
				"tls:\n  mode: acme\n  domains: [sandbox.example.com]\n  acme_directory: http://u:%[5]s@ca.example.com/dir\n" +
				"store:\n  url: postgres://app:%[6]s@127.0.0.1:1/sb\n" +
				"cluster:\n  node: n1\n  advertise_url: http://u:%[7]s@127.0.0.1:1\n  secret: %[8]s\n",
			secrets: []string{"BADPIPq7r8", "BADNPMs9t0", "BADSERVEu1v2", "BADSERVEQw3x4", "BADACMEy5z6", "BADPGz7", "BADADVERTa8", "BADCLUSTERb9-0123456789abcdef0123456789"},
			cmds:    opsCmds,
		},
		{
			name:    "secrets of the wrong type",
			yaml:    "cluster:\n  previous_secrets: %[1]s\napi:\n  gateway_secret: [%[2]s]\nstore:\n  url: {u: %[3]s}\n",
			secrets: []string{"WRONGTYPEk9-0123456789abcdef0123456789", "WRGATEm1", "WRPGURLn2"},
			cmds:    opsCmds,
		},
		{
			name: "gateway and cluster secrets",
			yaml: "api:\n  gateway_secret: %[1]s\nstore:\n  url: postgres://app:%[2]s@127.0.0.1:1/sb?connect_timeout=1\n" +
				"cluster:\n  node: n1\n  advertise_url: http://127.0.0.1:1\n  secret: %[3]s\n  previous_secrets: [%[4]s]\n",
			secrets: []string{"GATEWAYa7b8", "CLUSTERPGc9d0", "CLUSTERSECRETg3h4-0123456789abcdef0123456789", "CLUSTEROLDi5j6-0123456789abcdef0123456789"},
			cmds:    opsCmds,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "sandboxapi.yaml")
			args := make([]any, len(tt.secrets))
			for i, s := range tt.secrets {
				args[i] = s
			}
			yaml := "version: v1\n"
			if tt.yaml != "" {
				yaml += fmt.Sprintf(tt.yaml, args...)
			}
			if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.env {
				t.Setenv(k, fmt.Sprintf(v, args...))
			}
			// An existing data dir: doctor then opens the store.
			if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
				t.Fatal(err)
			}
			flags := []string{"--config", cfg, "--data-dir", filepath.Join(dir, "data")}
			if tt.name == "index URLs with userinfo" {
				mustCLI(t, append([]string{"mirror", "osv", "import", filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "osv")}, flags...)...)
			}
			for _, cmd := range tt.cmds {
				code, stdout, stderr := runCLI(t, append(append([]string{}, cmd...), flags...)...)
				for _, s := range tt.secrets {
					// yaml.v3 quotes the first 7 bytes of a value.
					for _, part := range []string{s, s[:6]} {
						if strings.Contains(stdout, part) || strings.Contains(stderr, part) {
							t.Errorf("%s (exit %d) shows secret %q:\nstdout:\n%s\nstderr:\n%s", strings.Join(cmd, " "), code, part, stdout, stderr)
						}
					}
				}
				if testing.Verbose() {
					t.Logf("%s: exit %d\n%s%s", strings.Join(cmd, " "), code, stdout, stderr)
				}
			}
		})
	}
}
