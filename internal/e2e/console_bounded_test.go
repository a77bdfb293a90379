package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// TestInputCapsAndBoundedConsole runs the real binary on a server whose
// egress is off. An allowed_domains list over the cap is a 400
// invalid_allowed_domains there (not the 503 network_unavailable a valid
// list gets), and so is one far over it, in a body under the body cap.
// Then sessions holding long lists are put in its store (256-entry lists,
// what the API still takes, and 100,000-entry lists, rows written before
// the caps): the console's sessions page stays one small page with a link
// to the next, the pages together list every session once, and a
// session's own page cuts its list.
func TestInputCapsAndBoundedConsole(t *testing.T) {
	s := startServer(t, "")
	ultra := s.key("ULTRA")
	admin := strings.TrimSpace(s.cli("keys", "create", "--admin", "--name", "ops"))
	admin = admin[strings.LastIndexByte(admin, '\n')+1:]

	domains := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("host-%06d.example.com", i)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		n      int
		status int
		code   string
	}{
		{name: "within the cap", n: 3, status: 503, code: "network_unavailable"},
		{name: "just over the cap", n: sandbox.MaxAllowedDomains + 1, status: 400, code: "invalid_allowed_domains"},
		{name: "far over the cap", n: 100000, status: 400, code: "invalid_allowed_domains"},
	} {
		r := s.do("POST", "/v1/sessions", ultra, map[string]any{"language": "python3", "network": map[string]any{"enabled": true, "allowed_domains": domains(tc.n)}})
		if r.status != tc.status || r.errCode(t) != tc.code {
			t.Fatalf("%s: %d %.300s, want %d %s", tc.name, r.status, r.body, tc.status, tc.code)
		}
		if len(r.body) > 2048 {
			t.Fatalf("%s: a %d-byte error reply", tc.name, len(r.body))
		}
	}

	// Sessions with long lists, beside the running server.
	st, err := store.OpenURL(context.Background(), s.storeURL, filepath.Join(s.dataDir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var keyID string
	keys, err := st.ListKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.Plan == "ULTRA" {
			keyID = k.ID
		}
	}
	netJSON := func(n int) string {
		b, _ := json.Marshal(map[string]any{"enabled": true, "allowed_domains": domains(n)})
		return string(b)
	}
	capped, huge := netJSON(sandbox.MaxAllowedDomains), netJSON(100000)
	const total = 60
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i := range total {
		nw := capped
		if i%30 == 0 {
			nw = huge
		}
		id := fmt.Sprintf("sess_bounded%04d", i)
		if err := st.InsertSession(t.Context(), store.SessionRow{ID: id, KeyID: keyID, Language: "python3", State: "running", Network: nw,
			CreatedAt: now.Add(-time.Duration(i) * time.Second), LastUsedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := st.SetSessionState(t.Context(), id, "ended", "deleted", true); err != nil {
			t.Fatal(err)
		}
	}

	seen := map[string]int{}
	path := "/console/sessions"
	for pages := 0; path != ""; pages++ {
		if pages > total {
			t.Fatal("the pages do not end")
		}
		r := s.do("GET", path, admin, nil)
		if r.status != 200 {
			t.Fatalf("GET %s: %d %.300s", path, r.status, r.body)
		}
		t.Logf("GET %s: %d bytes", path, len(r.body))
		if len(r.body) > 128<<10 {
			t.Fatalf("GET %s: a %d-byte page", path, len(r.body))
		}
		body := string(r.body)
		for _, part := range strings.Split(body, `href="/console/sessions/`)[1:] {
			seen[part[:strings.IndexByte(part, '"')]]++
		}
		path = ""
		if _, rest, ok := strings.Cut(body, `rel="next" href="`); ok {
			path = strings.ReplaceAll(rest[:strings.IndexByte(rest, '"')], "&amp;", "&")
		}
	}
	for i := range total {
		if id := fmt.Sprintf("sess_bounded%04d", i); seen[id] != 1 {
			t.Fatalf("%s listed %d times", id, seen[id])
		}
	}
	r := s.do("GET", "/console/sessions/sess_bounded0030", admin, nil)
	if r.status != 200 || len(r.body) > 64<<10 || !strings.Contains(string(r.body), "more</span>") {
		t.Fatalf("session page: %d, %d bytes", r.status, len(r.body))
	}
	t.Logf("session page with 100,000 domains: %d bytes", len(r.body))
	if r := s.do("GET", "/console/sessions?page=0", admin, nil); r.status != 400 {
		t.Fatalf("page=0: %d", r.status)
	}
}

// TestAllowedDomainsDedupedWithEgress runs the real binary with egress on:
// repeated allowed_domains entries (case, trailing dot, the same
// wildcard) are stored once, first spelling first, as the create reply and
// GET show; the kept list still decides (a name it allows is reached
// through the proxy, one it does not is refused); a list over the cap is a
// 400 here too.
func TestAllowedDomainsDedupedWithEgress(t *testing.T) {
	f := startFakeInternet(t)
	ee := newEgressEnv(t)
	s := startServer(t, ee.yaml(f))
	sweepAfter(t, s)
	ultra := s.key("ULTRA")

	over := make([]string, sandbox.MaxAllowedDomains+1)
	for i := range over {
		over[i] = fmt.Sprintf("h%d.allowed.test", i)
	}
	if r := s.do("POST", "/v1/sessions", ultra, map[string]any{"language": "bash", "network": map[string]any{"enabled": true, "allowed_domains": over}}); r.status != 400 || r.errCode(t) != "invalid_allowed_domains" {
		t.Fatalf("over the cap: %d %.300s", r.status, r.body)
	}

	sent := []string{"WWW.allowed.test", "www.allowed.test.", "*.other.test", "www.ALLOWED.test", "*.OTHER.test."}
	want := `["WWW.allowed.test","*.other.test"]`
	r := s.do("POST", "/v1/sessions", ultra, map[string]any{"language": "bash", "network": map[string]any{"enabled": true, "allowed_domains": sent}})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sess struct {
		ID      string
		Network struct {
			AllowedDomains json.RawMessage `json:"allowed_domains"`
		}
	}
	if err := json.Unmarshal(r.body, &sess); err != nil || string(sess.Network.AllowedDomains) != want {
		t.Fatalf("create reply allowed_domains %s (%v), want %s", sess.Network.AllowedDomains, err, want)
	}
	g := s.do("GET", "/v1/sessions/"+sess.ID, ultra, nil)
	if !strings.Contains(string(g.body), `"allowed_domains":`+want) {
		t.Fatalf("GET: %s", g.body)
	}
	s.installCA(ultra, sess.ID, f)
	res := s.run(ultra, sess.ID, `curl -sS --max-time 30 https://www.allowed.test/`, caEnv)
	if exitCode(res) != 0 || !strings.Contains(res["stdout"].(string), "hello www.allowed.test") {
		t.Fatalf("allowed name: %s", out(res))
	}
	res = s.run(ultra, sess.ID, `curl -sS --max-time 30 https://api.allowed.test/; echo "rc=$?"`, caEnv)
	if o := res["stdout"].(string) + res["stderr"].(string); strings.Contains(o, "hello") || !strings.Contains(o, "403") {
		t.Fatalf("a name the list does not hold: %s", out(res))
	}
}
