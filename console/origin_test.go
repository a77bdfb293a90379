package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// loginFrom posts the admin key to the sign-in form on host example.com
// with the given Origin header ("" for none).
func loginFrom(c *Console, origin string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "http://example.com/console/login", strings.NewReader(url.Values{"key": {"sk_admin"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	return rec
}

// TestConsoleLoginOrigins: the sign-in takes the console's own origin and
// clients that send none; every other Origin, "null" (a sandboxed frame,
// a data: or file: page) included, is refused with no cookie.
func TestConsoleLoginOrigins(t *testing.T) {
	t.Parallel()
	c := newTestConsole()
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{origin: "", ok: true},
		{origin: "http://example.com", ok: true},
		{origin: "https://EXAMPLE.com", ok: true},
		{origin: "null"},
		{origin: "NULL"},
		{origin: " null"},
		{origin: "null://example.com"},
		{origin: "file://example.com"},
		{origin: "data://example.com"},
		{origin: "http://attacker.test"},
		{origin: "http://example.com.attacker.test"},
		{origin: "http://example.com:8080"},
		{origin: "http://attacker.test/example.com"},
		{origin: "example.com"},
		{origin: "://example.com"},
		{origin: "http://"},
	} {
		t.Run(tc.origin, func(t *testing.T) {
			rec := loginFrom(c, tc.origin)
			got := rec.Code == http.StatusSeeOther && len(rec.Result().Cookies()) == 1
			if got != tc.ok {
				t.Fatalf("Origin %q: status %d, cookies %v; want accepted=%v", tc.origin, rec.Code, rec.Result().Cookies(), tc.ok)
			}
			if !tc.ok && (rec.Code != http.StatusForbidden || len(rec.Result().Cookies()) != 0) {
				t.Fatalf("Origin %q: status %d, cookies %v; want 403 and no cookie", tc.origin, rec.Code, rec.Result().Cookies())
			}
		})
	}
}

// TestConsoleReferrerPolicy: the console's pages ask for the same-origin
// referrer policy (header and meta tag), under which a browser sends the
// real Origin with the console's own sign-in form; under no-referrer it
// sends "null", which the sign-in refuses.
func TestConsoleReferrerPolicy(t *testing.T) {
	t.Parallel()
	c := newTestConsole()
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest("GET", "/console/login", nil))
	if got := rec.Header().Get("Referrer-Policy"); got != "same-origin" {
		t.Errorf("Referrer-Policy %q, want same-origin", got)
	}
	if body := rec.Body.String(); !strings.Contains(body, `<meta name="referrer" content="same-origin">`) || strings.Contains(body, "no-referrer") {
		t.Errorf("login page's referrer meta: %s", body)
	}
}

// FuzzSameOrigin: an Origin the sign-in accepts names the request's host
// with an http or https scheme, and nothing else.
func FuzzSameOrigin(f *testing.F) {
	for _, s := range [][2]string{
		{"null", "example.com"}, {"http://example.com", "example.com"}, {"https://a.b:8443", "a.b:8443"},
		{"file://", ""}, {"http://", ""}, {"null://h", "h"}, {"http://h/x", "h"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, origin, host string) {
		r := &http.Request{Host: host}
		if !sameOrigin(origin, r) {
			return
		}
		if host == "" || !strings.EqualFold(origin, "http://"+host) && !strings.EqualFold(origin, "https://"+host) {
			t.Fatalf("origin %q accepted for host %q", origin, host)
		}
	})
}
