package e2e

import (
	"net/http"
	"net/url"
	"strings"
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
