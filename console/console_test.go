package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type fakeAdmins struct{}

func (fakeAdmins) Admin(ctx context.Context, secret string) (string, error) {
	switch secret {
	case "sk_admin":
		return "ops", nil
	case "sk_client":
		return "", ErrNotAdmin
	case "sk_store_down":
		return "", fmt.Errorf("looking up key: %w", store.ErrUnavailable)
	}
	return "", ErrUnknownKey
}

type fakeReadiness struct{}

func (fakeReadiness) Checks(context.Context) (bool, []Check) {
	return false, []Check{{Name: "osv", Status: "pass", Detail: "snapshot s1", LastRun: now}, {Name: "firewall", Status: "fail", Detail: "no nft"}}
}

type fakeCatalogue struct{}

func (fakeCatalogue) Artifacts(context.Context) ([]Artifact, error) {
	return []Artifact{
		{Manager: "pip", Name: "six", Version: "1.16.0", Filename: "six-1.16.0-py2.py3-none-any.whl", Status: "admitted", OSVSnapshot: "s1"},
		{Manager: "pip", Name: "requests", Version: "2.30.0", Filename: "requests-2.30.0-py3-none-any.whl", Status: "refused",
			Advisories: []string{"GHSA-9wx4-h78v-vm56"}, Reasons: []string{"GHSA-9wx4-h78v-vm56: <script>alert(1)</script>"}},
		{Manager: "npm", Name: "ms", Version: "2.1.3", Filename: "ms-2.1.3.tgz", Status: "quarantined", Advisories: []string{"GHSA-xxxx"}, Stripped: []string{"dependencies"}},
	}, nil
}

func (fakeCatalogue) OSV(context.Context) OSV {
	return OSV{SnapshotID: "s1", ImportedAt: now.Add(-88 * 24 * time.Hour), Records: 48, Stale: true}
}

type fakeSessions struct{}

func (fakeSessions) Sessions(context.Context, int, int) ([]Session, error) {
	return []Session{
		{ID: "sess_b", KeyID: "key_2", KeyName: "bob", Language: "python3", State: "running", NetworkEnabled: true, AllowedDomains: []string{"api.example.com"}, CreatedAt: now,
			DiskUsed: 3 << 20, DiskSize: 64 << 20},
		{ID: "sess_a", KeyID: "key_1", KeyName: "alice", Language: "bash", State: "ended", EndReason: "deleted", CreatedAt: now, EndedAt: now},
	}, nil
}

func (fakeSessions) Session(_ context.Context, id string) (Session, error) {
	if id != "sess_b" {
		return Session{}, ErrNotFound
	}
	return Session{ID: "sess_b", KeyID: "key_2", KeyName: "bob", State: "running"}, nil
}

func (fakeSessions) Egress(context.Context, string, int) ([]Decision, error) {
	return []Decision{{Time: now, Mode: "connect", Host: "api.example.com", Port: 443, Outcome: "allow", Count: 1},
		{Time: now, Mode: "connect", Host: "evil.test", Port: 443, Outcome: "deny", Reason: "not_allowed", Count: 3}}, nil
}

type fakeUsage struct{}

func (fakeUsage) Usage(context.Context, time.Time) ([]UsageRow, error) {
	return []UsageRow{{KeyID: "key_1", KeyName: "alice", Day: "2026-11-30", Requests: 40}, {KeyID: "key_2", Day: "2026-12-01", Requests: 10, Errors: 2}}, nil
}

type fakePackages struct{}

func (fakePackages) Package(_ context.Context, manager, key string, _, _, _ int) (Package, error) {
	if manager != "pip" || key != "six" {
		return Package{}, ErrNotFound
	}
	return Package{Names: []string{"six"}, TotalVersions: 1, Versions: []PackageVersion{{Version: "1.16.0", Status: "admitted"}},
		Installs: []Install{{SessionID: "sess_b", Version: "1.16.0"}}}, nil
}

func newTestConsole() *Console {
	return New(Deps{Admins: fakeAdmins{}, Readiness: fakeReadiness{}, Catalogue: fakeCatalogue{}, Sessions: fakeSessions{}, Usage: fakeUsage{},
		Packages: fakePackages{}, Now: func() time.Time { return now }}, nil)
}

func get(t *testing.T, h http.Handler, path, key string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result(), rec.Body.String()
}

func TestConsoleAuth(t *testing.T) {
	t.Parallel()
	c := newTestConsole()
	tests := []struct {
		name, key string
		status    int
	}{
		{"admin", "sk_admin", 200},
		{"client key", "sk_client", 403},
		{"unknown key", "sk_nope", 401},
		{"no key", "", 401},
		{"huge key", strings.Repeat("k", 10000), 401},
		{"store unavailable", "sk_store_down", 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, p := range []string{"/console", "/console/mirror", "/console/sessions", "/console/sessions/sess_b", "/console/usage", "/console/mirror/pip/six"} {
				resp, body := get(t, c, p, tt.key)
				if resp.StatusCode != tt.status {
					t.Fatalf("%s: %d, want %d", p, resp.StatusCode, tt.status)
				}
				if tt.status != 200 && (strings.Contains(body, "sess_b") || strings.Contains(body, "requests")) {
					t.Fatalf("%s leaked data to a %s: %s", p, tt.name, body)
				}
				csp := resp.Header.Get("Content-Security-Policy")
				if !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe") {
					t.Fatalf("CSP %q", csp)
				}
			}
		})
	}
}

func TestConsolePages(t *testing.T) {
	t.Parallel()
	c := newTestConsole()
	tests := []struct {
		path      string
		status    int
		want, not []string
	}{
		{"/console", 200, []string{"not ready", "firewall", "no nft", "88 days", "s1"}, nil},
		{"/console/mirror", 200, []string{`<a href="/console/mirror/pip/six">six</a>`, `href="/console/mirror/npm/ms"`, "requests", "ms-2.1.3.tgz", "GHSA-9wx4-h78v-vm56", "stripped: dependencies", "3 of 3"}, []string{"<script>alert"}},
		{"/console/mirror?q=REQ", 200, []string{"requests", "1 of 3"}, []string{">six<"}},
		{"/console/mirror?q=ghsa-xxxx", 200, []string{">ms<"}, []string{">six<", ">requests<"}},
		{"/console/mirror?status=admitted", 200, []string{">six<"}, []string{">requests<", ">ms<"}},
		{"/console/mirror?manager=npm", 200, []string{">ms<"}, []string{">six<"}},
		{"/console/mirror?status=bogus", 400, []string{"bad filter"}, nil},
		{"/console/sessions", 200, []string{"alice", "bob", "api.example.com", "sess_a", "deleted", "3.0 MiB of 64.0 MiB"}, nil},
		{"/console/sessions/sess_b", 200, []string{"evil.test", "1 allowed, 3 denied"}, nil},
		{"/console/sessions/nope", 404, nil, nil},
		{"/console/usage", 200, []string{"<svg", "2026-11-30", "alice", "<rect class=\"bar\""}, nil},
		{"/console/elsewhere", 404, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			resp, body := get(t, c, tt.path, "sk_admin")
			if resp.StatusCode != tt.status {
				t.Fatalf("%d, want %d\n%s", resp.StatusCode, tt.status, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("missing %q", w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(body, n) {
					t.Errorf("unexpected %q", n)
				}
			}
			if strings.Contains(body, "<script") || strings.Contains(body, "http://") || strings.Contains(body, "src=\"http") {
				t.Errorf("page has a script or an external asset")
			}
		})
	}
}

func TestConsoleLogin(t *testing.T) {
	t.Parallel()
	c := newTestConsole()
	post := func(key, origin string) *http.Response {
		req := httptest.NewRequest("POST", "/console/login", strings.NewReader(url.Values{"key": {key}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec.Result()
	}
	resp := post("sk_admin", "http://example.com")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("admin login: %d", resp.StatusCode)
	}
	ck := resp.Cookies()
	if len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Path != "/console" {
		t.Fatalf("cookie %+v", ck)
	}
	req := httptest.NewRequest("GET", "/console/usage", nil)
	req.AddCookie(ck[0])
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("with the cookie: %d", rec.Code)
	}
	if r := post("sk_client", ""); r.StatusCode != http.StatusForbidden || len(r.Cookies()) != 0 {
		t.Fatalf("client key login: %d %v", r.StatusCode, r.Cookies())
	}
	if r := post("sk_admin", "http://attacker.test"); r.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin login: %d", r.StatusCode)
	}
	req = httptest.NewRequest("DELETE", "/console", nil)
	req.Header.Set("Authorization", "Bearer sk_admin")
	rec = httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE: %d", rec.Code)
	}
}

func TestAge(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0 seconds", time.Second: "1 second", 90 * time.Second: "1 minute", 5 * time.Hour: "5 hours",
		47 * time.Hour: "47 hours", 88 * 24 * time.Hour: "88 days", -time.Hour: "0 seconds",
	} {
		if got := Age(d); got != want {
			t.Errorf("Age(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestChart(t *testing.T) {
	t.Parallel()
	since := now.AddDate(0, 0, -29).Truncate(24 * time.Hour)
	bars, peak := Chart([]UsageRow{{Day: "2026-12-01", Requests: 10}, {Day: "2026-12-01", Requests: 30}, {Day: "2026-11-20", Requests: 20}}, since, now, 720, 160)
	if len(bars) != 30 || peak != 40 {
		t.Fatalf("%d bars, peak %d", len(bars), peak)
	}
	last := bars[len(bars)-1]
	if last.Day != "2026-12-01" || last.H != 140 || last.Y != 0 {
		t.Fatalf("last bar %+v", last)
	}
}
