package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// authIndex is a PEP 691 index on loopback that answers only requests
// carrying user:pass (as a company proxy is configured) and lists its
// wheel by a relative URL; everything else is 404.
func authIndex(t *testing.T, user, pass, wheelName string, wheel []byte) *httptest.Server {
	t.Helper()
	project := strings.SplitN(wheelName, "-", 2)[0]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		switch {
		case r.URL.Path == "/simple/"+project+"/":
			s := sha256.Sum256(wheel)
			w.Header().Set("Content-Type", "application/vnd.pypi.simple.v1+json")
			json.NewEncoder(w).Encode(map[string]any{"meta": map[string]string{"api-version": "1.0"}, "name": project,
				"files": []map[string]any{{"filename": wheelName, "url": "../../files/" + wheelName,
					"hashes": map[string]string{"sha256": hex.EncodeToString(s[:])}}}})
		case r.URL.Path == "/files/"+wheelName:
			w.Write(wheel)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestSecretsStayHiddenServe: with index URLs that carry a credential, a
// real wheel (setuptools, as shipped with the machine's Python) is added
// through them, and a wheel from a file on the host, and both are
// installed into a session by the real installer; the client's SBOM
// through the real server names the mirror's URL of each, and
// no surface of the running server (SBOM, /readyz, /metrics, /healthz,
// the console's pages, the server log) nor the CLI's (mirror list --json,
// mirror sbom, a failed mirror add npm) shows the credential or a host
// path. (Each CLI command against every secret-bearing setting is
// TestConfiguredSecretsStayHidden in internal/cli.)
func TestSecretsStayHiddenServe(t *testing.T) {
	t.Parallel()
	const user, pipPass, npmPass = "e2eidxuser", "E2EPIPPASSx1y2", "E2ENPMPASSz3w4"
	paths, _ := filepath.Glob("/usr/share/python-wheels/setuptools-*-py3-none-any.whl")
	if len(paths) == 0 {
		t.Fatal("no setuptools wheel in /usr/share/python-wheels (Debian's python3-setuptools-whl)")
	}
	wheel, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	wname := filepath.Base(paths[0])
	version := strings.SplitN(strings.TrimSuffix(wname, "-py3-none-any.whl"), "-", 2)[1]
	up := authIndex(t, user, pipPass, wname, wheel)
	cred := func(pass, path string) string {
		return strings.Replace(up.URL, "http://", "http://"+user+":"+pass+"@", 1) + path
	}
	s, _, _ := installServer(t, "mirror:\n  pip_index_url: "+cred(pipPass, "/simple/")+"\n  npm_registry_url: "+cred(npmPass, "/npm/")+"\n")
	secrets := []string{user, pipPass, npmPass}
	check := func(where, text string) {
		t.Helper()
		for _, sec := range secrets {
			if strings.Contains(text, sec) {
				t.Errorf("%s shows %q:\n%s", where, sec, tail(text, 4000))
			}
		}
	}
	s.importOSV()
	// The test OSV records know two advisories for this setuptools: an
	// operator accepts them.
	s.cliArgs([]string{"mirror", "add", "pip", "setuptools==" + version}, "--accept", "GHSA-5rjg-fvgr-3xxf", "--accept", "GHSA-cx63-2mw6-8hw5")
	// One added from a file on the host, whose path clients must not see.
	s.cliArgs([]string{"mirror", "add"}, writeWheel(t, t.TempDir(), "alpha-pkg", "1.0.0"))
	out, err := exec.Command(s.bin, "mirror", "add", "npm", "absent@1.0.0", "is-number@7.0.0", "--config", s.config, "--data-dir", s.dataDir).CombinedOutput()
	if err == nil {
		t.Fatalf("mirror add npm of absent packages succeeded: %s", out)
	}
	check("a failed mirror add npm", string(out))
	check("mirror list --json", s.cli("mirror", "list", "--json"))
	check("mirror sbom", s.cli("mirror", "sbom"))

	client := s.key("PRO")
	admin := strings.TrimSpace(s.cli("keys", "create", "--admin", "--name", "ops"))
	admin = admin[strings.LastIndexByte(admin, '\n')+1:]
	sess := s.session(client, "python3")
	s.waitReadyz(200, 90*time.Second)
	if r := s.install(client, sess, "pip", "setuptools=="+version, "alpha-pkg==1.0.0"); r.status != 200 {
		t.Fatalf("install: %d %s", r.status, r.body)
	}
	r := s.do("GET", "/v1/sessions/"+sess+"/sbom", client, nil)
	if r.status != 200 {
		t.Fatalf("sbom: %d %s", r.status, r.body)
	}
	check("the session SBOM", string(r.body))
	if strings.Contains(string(r.body), "file:") || strings.Contains(string(r.body), up.URL) {
		t.Errorf("the session SBOM names a host path or the upstream:\n%s", r.body)
	}
	var doc struct {
		Components []struct {
			Name       string
			Properties []struct{ Name, Value string }
		}
	}
	if err := json.Unmarshal(r.body, &doc); err != nil || len(doc.Components) != 2 {
		t.Fatalf("sbom: %v %s", err, r.body)
	}
	for _, c := range doc.Components {
		for _, p := range c.Properties {
			if p.Name == "sandboxapi:mirror:source" && !strings.HasPrefix(p.Value, "/mirror/pypi/files/") {
				t.Errorf("session SBOM source of %s %q: want the mirror's URL", c.Name, p.Value)
			}
		}
	}
	for _, p := range []struct{ path, key string }{
		{"/readyz", ""}, {"/readyz?refresh=1", ""}, {"/healthz", ""}, {"/metrics", ""},
		{"/console", admin}, {"/console/mirror", admin}, {"/console/mirror?status=admitted", admin},
		{"/console/sessions/" + sess, admin},
	} {
		r := s.do("GET", p.path, p.key, nil)
		check(p.path, string(r.body))
	}
	check("the server log", s.logs.String())
}
