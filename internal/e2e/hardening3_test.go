package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// TestConsoleLoginRefusesNullOrigin posts an admin key to the real
// server's console sign-in: "Origin: null" (a sandboxed frame, a data: or
// file: page) and another site's origin get 403 and no cookie; the
// console's own origin signs in, and its pages ask for the same-origin
// referrer policy, under which a browser sends that origin.
func TestConsoleLoginRefusesNullOrigin(t *testing.T) {
	s := startServer(t, "")
	admin := strings.TrimSpace(s.cli("keys", "create", "--admin", "--name", "ops"))
	admin = admin[strings.LastIndexByte(admin, '\n')+1:]
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(origin string) *http.Response {
		req, _ := http.NewRequest("POST", s.url("/console/login"), strings.NewReader(url.Values{"key": {admin}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, o := range []string{"null", "http://attacker.test"} {
		if r := login(o); r.StatusCode != http.StatusForbidden || len(r.Cookies()) != 0 {
			t.Errorf("sign-in with Origin %s: %d, cookies %v; want 403 and none", o, r.StatusCode, r.Cookies())
		}
	}
	r := login("http://" + s.addr)
	if r.StatusCode != http.StatusSeeOther || len(r.Cookies()) != 1 {
		t.Errorf("sign-in from the console's own origin: %d, cookies %v", r.StatusCode, r.Cookies())
	}
	if got := r.Header.Get("Referrer-Policy"); got != "same-origin" {
		t.Errorf("Referrer-Policy %q, want same-origin", got)
	}
}

// TestResumedHeaderOnEveryWaitingCall hibernates a session of the real
// server and sends it six calls at once, three JSON and three streamed:
// one resumes it, the others wait for that resume, and every reply
// carries X-Sandbox-Resumed (and a JSON result resumed_ms). The next call,
// on the running session, carries none.
func TestResumedHeaderOnEveryWaitingCall(t *testing.T) {
	s := startServer(t, "")
	key := s.key("PRO")
	id := s.session(key, "bash")
	if r := s.do("POST", "/v1/sessions/"+id+"/hibernate", key, nil); r.status != 200 {
		t.Fatalf("hibernate: %d %s", r.status, r.body)
	}
	const n = 6
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := map[string]any{"code": fmt.Sprintf("sleep 0.2; echo %d", i), "stream": i%2 == 1}
			replies[i] = s.do("POST", "/v1/sessions/"+id+"/execute", key, body)
		}()
	}
	wg.Wait()
	for i, r := range replies {
		if r.status != 200 || !strings.Contains(string(r.body), fmt.Sprintf(`"stdout":"%d\n"`, i)) {
			t.Errorf("call %d: %d %s", i, r.status, r.body)
			continue
		}
		if r.header.Get("X-Sandbox-Resumed") == "" {
			t.Errorf("call %d (stream %v) waited for the resume and has no X-Sandbox-Resumed: %s", i, i%2 == 1, r.body)
		}
		if !strings.Contains(string(r.body), `"resumed_ms":`) {
			t.Errorf("call %d: result without resumed_ms: %s", i, r.body)
		}
	}
	if r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": "true"}); r.status != 200 || r.header.Get("X-Sandbox-Resumed") != "" {
		t.Errorf("call on the running session: %d resumed %q", r.status, r.header.Get("X-Sandbox-Resumed"))
	}
}
