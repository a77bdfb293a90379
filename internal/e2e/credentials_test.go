package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEgressCredentials: a session's credential reaches its host through
// the proxy, which terminates the sandbox's TLS with a certificate its
// clients verify (curl, Python requests, Node fetch, each with
// verification on and the session's own trust settings), and opens its
// own verified TLS upstream (egress.upstream_ca_file holds the fake
// internet's CA). Another allowed host gets no credential. The value is
// nowhere the sandbox can look, nor in replies, the log, the metrics, the
// audit or the data folder in the clear, and it survives a hibernation
// and a killed server. PATCH .../network removes, adds and replaces
// credentials of the running session and of a hibernated one.
func TestEgressCredentials(t *testing.T) {
	f := startFakeInternet(t)
	ee := newEgressEnv(t)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, f.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(ee.yaml(f), "egress:\n", "egress:\n  upstream_ca_file: "+caFile+"\n", 1)
	s := startServer(t, yaml)
	sweepAfter(t, s)
	ultra := s.key("ULTRA")

	// The secret is built from two halves so that no code sent to the
	// sandbox holds it whole.
	half1, half2 := "e2e-cred-"+randHex(6), randHex(6)+"-tail"
	secret := "Bearer " + half1 + half2
	r := s.do("POST", "/v1/sessions", ultra, map[string]any{"language": "bash", "network": map[string]any{
		"enabled": true, "allowed_domains": []string{"*.allowed.test"},
		"credentials": []map[string]string{{"host": "api.allowed.test", "header": "authorization", "value": secret}},
	}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), half1) || !strings.Contains(string(r.body), `{"host":"api.allowed.test","header":"Authorization"}`) {
		t.Fatalf("create reply: %s", r.body)
	}
	id := r.json(t)["id"].(string)
	credURL := "https://api.allowed.test/headers"
	hasCred := func(o string) bool { return strings.Contains(o, "Authorization: "+secret+"\n") }

	clients := map[string]string{
		"curl through CONNECT":     `curl -sS --fail --max-time 30 -H 'Authorization: from-the-sandbox' ` + credURL,
		"curl transparent":         `curl -sS --fail --max-time 30 --noproxy '*' ` + credURL,
		"python requests":          `python3 -c 'import requests; r = requests.get("` + credURL + `", timeout=30); r.raise_for_status(); print(r.text)'`,
		"node fetch (transparent)": `node -e 'fetch("` + credURL + `").then(r => r.text()).then(t => console.log(t), e => { console.error(e, e.cause); process.exit(1) })'`,
	}
	for name, code := range clients {
		t.Run(name, func(t *testing.T) {
			res := s.run(ultra, id, code, nil)
			o := res["stdout"].(string)
			if exitCode(res) != 0 || !hasCred(o) || strings.Count(o, "Authorization:") != 1 {
				t.Fatalf("%s", out(res))
			}
		})
	}
	t.Run("verification is on", func(t *testing.T) {
		res := s.run(ultra, id, `env | grep -E '^(SSL_CERT_FILE|REQUESTS_CA_BUNDLE|NODE_EXTRA_CA_CERTS|CURL_CA_BUNDLE|NODE_TLS_REJECT_UNAUTHORIZED|PYTHONHTTPSVERIFY)=' | sort; grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt`, nil)
		o := res["stdout"].(string)
		if strings.Contains(o, "REJECT_UNAUTHORIZED") || strings.Contains(o, "PYTHONHTTPSVERIFY") || !strings.Contains(o, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
			t.Fatalf("%s", out(res))
		}
		// The fake internet's own certificate is not trusted by the
		// sandbox: only the proxy's CA makes the credential host work.
		res = s.run(ultra, id, `curl -sS --max-time 30 https://www.allowed.test/ ; echo "rc=$?"`, nil)
		if !strings.Contains(res["stdout"].(string), "rc=60") {
			t.Fatalf("an untrusted upstream certificate was accepted: %s", out(res))
		}
	})
	t.Run("another allowed host gets no credential", func(t *testing.T) {
		s.installCA(ultra, id, f)
		res := s.run(ultra, id, `curl -sS --fail --max-time 30 -H 'Authorization: mine' https://www.allowed.test/headers`, caEnv)
		o := res["stdout"].(string)
		if exitCode(res) != 0 || strings.Contains(o, half1) || !strings.Contains(o, "Authorization: mine\n") {
			t.Fatalf("%s", out(res))
		}
	})
	t.Run("the sandbox cannot find the value", func(t *testing.T) {
		code := `import os
needle = (%q + %q).encode()
hits = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for f in ("environ", "cmdline"):
            try:
                if needle in open(f"/proc/{pid}/{f}", "rb").read():
                    hits.append(f"/proc/{pid}/{f}")
            except OSError:
                pass
for top in ("/etc", "/home", "/tmp", "/run", "/var", "/root", "/opt", "/srv"):
    for d, _, files in os.walk(top):
        for n in files:
            p = os.path.join(d, n)
            try:
                if os.path.isfile(p) and os.path.getsize(p) < 64 << 20 and needle in open(p, "rb").read():
                    hits.append(p)
            except OSError:
                pass
print("hits:", hits)
`
		res := s.run(ultra, id, "python3 - <<'EOF'\n"+fmt.Sprintf(code, half1, half2)+"EOF\n", nil)
		if exitCode(res) != 0 || strings.TrimSpace(res["stdout"].(string)) != "hits: []" {
			t.Fatalf("%s", out(res))
		}
	})
	t.Run("audit marks the credential, never its value", func(t *testing.T) {
		r := s.do("GET", "/v1/sessions/"+id+"/egress", ultra, nil)
		body := string(r.body)
		if r.status != 200 || strings.Contains(body, half1) || !strings.Contains(body, `"credential":true`) {
			t.Fatalf("egress: %d %s", r.status, body)
		}
		var used, other int
		for _, d := range r.json(t)["decisions"].([]any) {
			m := d.(map[string]any)
			switch {
			case m["host"] == "api.allowed.test" && m["credential"] == true && m["outcome"] == "allow":
				used++
			case m["host"] == "www.allowed.test" && m["credential"] == true:
				other++
			}
		}
		if used < len(clients) || other != 0 {
			t.Fatalf("%d decisions with the credential (want %d), %d for the other host: %s", used, len(clients), other, body)
		}
	})

	// Hibernate and resume: the credential comes back from the store.
	if r := s.do("POST", "/v1/sessions/"+id+"/hibernate", ultra, nil); r.status != 200 {
		t.Fatalf("hibernate: %d %s", r.status, r.body)
	}
	res := s.run(ultra, id, clients["curl through CONNECT"], nil)
	if exitCode(res) != 0 || !hasCred(res["stdout"].(string)) {
		t.Fatalf("after resume: %s", out(res))
	}
	// A killed server: the restarted one adopts the running session and
	// its proxy opens the credential from the egress state file again.
	s.kill()
	s.start()
	res = s.run(ultra, id, clients["python requests"], nil)
	if exitCode(res) != 0 || !hasCred(res["stdout"].(string)) {
		t.Fatalf("after a restart: %s", out(res))
	}

	// PATCH .../network changes the credentials of the running session
	// (the next request has the change) and of a hibernated one (its
	// resume has it), as it changes the allow-list.
	other1, other2 := "e2e-other-"+randHex(6), randHex(6)+"-end"
	otherSecret := other1 + other2
	patchCreds := func(creds ...map[string]string) reply {
		t.Helper()
		if creds == nil {
			creds = []map[string]string{}
		}
		r := s.do("PATCH", "/v1/sessions/"+id+"/network", ultra, map[string]any{
			"enabled": true, "allowed_domains": []string{"*.allowed.test"}, "credentials": creds})
		if r.status != http.StatusOK || strings.Contains(string(r.body), half1) || strings.Contains(string(r.body), other1) {
			t.Fatalf("PATCH credentials: %d %s", r.status, r.body)
		}
		return r
	}
	// headers runs curl to host's /headers; plain trusts only the fake
	// internet's CA (so it fails if the proxy terminates the TLS), else
	// the session's own trust store.
	headers := func(when, host string, plain bool) string {
		t.Helper()
		env := map[string]string(nil)
		if plain {
			env = caEnv
		}
		res := s.run(ultra, id, `curl -sS --fail --max-time 30 -H 'Authorization: mine' -H 'X-Api-Key: mine' https://`+host+`/headers`, env)
		if exitCode(res) != 0 {
			t.Fatalf("%s: curl %s: %s", when, host, out(res))
		}
		return res["stdout"].(string)
	}
	t.Run("PATCH on a running session", func(t *testing.T) {
		s.installCA(ultra, id, f)
		// Removed: api.allowed.test is tunnelled end to end again (its
		// own certificate, which only the fake CA verifies) and gets
		// what the sandbox sent.
		if r := patchCreds(); strings.Contains(string(r.body), `"credentials"`) {
			t.Fatalf("credentials still shown: %s", r.body)
		}
		if o := headers("removed", "api.allowed.test", true); strings.Contains(o, half1) || !strings.Contains(o, "Authorization: mine\n") {
			t.Fatalf("after removal: %s", o)
		}
		// Added for another host under another header: that host gets it
		// in place of the sandbox's value; api.allowed.test gets none.
		r := patchCreds(map[string]string{"host": "www.allowed.test", "header": "x-api-key", "value": otherSecret})
		if !strings.Contains(string(r.body), `"credentials":[{"host":"www.allowed.test","header":"X-Api-Key"}]`) {
			t.Fatalf("PATCH add reply: %s", r.body)
		}
		if o := headers("added", "www.allowed.test", false); !strings.Contains(o, "X-Api-Key: "+otherSecret+"\n") || strings.Count(o, "X-Api-Key:") != 1 || !strings.Contains(o, "Authorization: mine\n") {
			t.Fatalf("after adding: %s", o)
		}
		if o := headers("added", "api.allowed.test", true); strings.Contains(o, other1) || strings.Contains(o, half1) || !strings.Contains(o, "X-Api-Key: mine\n") {
			t.Fatalf("a host without a credential: %s", o)
		}
	})
	t.Run("PATCH on a hibernated session", func(t *testing.T) {
		if r := s.do("POST", "/v1/sessions/"+id+"/hibernate", ultra, nil); r.status != 200 {
			t.Fatalf("hibernate: %d %s", r.status, r.body)
		}
		r := patchCreds(map[string]string{"host": "api.allowed.test", "header": "Authorization", "value": secret})
		if !strings.Contains(string(r.body), `"state":"hibernated"`) || !strings.Contains(string(r.body), `"credentials":[{"host":"api.allowed.test","header":"Authorization"}]`) {
			t.Fatalf("PATCH a hibernated session: %s", r.body)
		}
		if o := headers("resumed", "api.allowed.test", false); !hasCred(o) || strings.Count(o, "Authorization:") != 1 {
			t.Fatalf("after resume: %s", o)
		}
		if o := headers("resumed", "www.allowed.test", true); strings.Contains(o, other1) || !strings.Contains(o, "X-Api-Key: mine\n") {
			t.Fatalf("a removed credential after resume: %s", o)
		}
	})

	for what, body := range map[string]string{
		"GET session":  string(s.do("GET", "/v1/sessions/"+id, ultra, nil).body),
		"session list": string(s.do("GET", "/v1/sessions", ultra, nil).body),
		"egress audit": string(s.do("GET", "/v1/sessions/"+id+"/egress", ultra, nil).body),
		"metrics":      string(s.do("GET", "/metrics", "", nil).body),
		"server log":   s.logs.String(),
	} {
		if what == "server log" && !strings.Contains(body, `"host":"api.allowed.test"`) || what == "server log" && !strings.Contains(body, `"credential":true`) {
			t.Errorf("the log has no decision with the credential marked")
		}
		for _, part := range []string{half1, half2, other1, other2} {
			if strings.Contains(body, part) {
				t.Errorf("%s holds a credential", what)
			}
		}
	}
	// At rest: nothing under the data folder holds the value in the clear
	// (the store, the egress state files, the bundles).
	_ = filepath.WalkDir(s.dataDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err != nil || fi.Size() > 256<<20 {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && (strings.Contains(string(b), half1+half2) || strings.Contains(string(b), otherSecret)) {
			t.Errorf("%s holds a credential in the clear", p)
		}
		return nil
	})
}
