package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// domainList is n distinct allowed_domains entries.
func domainList(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("h%d.example.com", i)
	}
	return out
}

func envOf(n int) map[string]string {
	out := make(map[string]string, n)
	for i := range n {
		out[fmt.Sprintf("V%d", i)] = "x"
	}
	return out
}

func filesOf(n int) []wire.File {
	out := make([]wire.File, n)
	for i := range out {
		out[i] = wire.File{Path: fmt.Sprintf("f%d.txt", i), Content: "x"}
	}
	return out
}

func packagesOf(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("p%d==1.0", i)
	}
	return out
}

// TestInputCaps sends each list and string a client can store at its cap
// and just over it, on every route that takes it: at the cap is accepted,
// over it is a 400 with the field's code, and the reply is small whatever
// was sent (client input is quoted short).
func TestInputCaps(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	network := func(domains []string) map[string]any {
		return map[string]any{"enabled": true, "allowed_domains": domains}
	}
	longDomain := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60) + ".com"
	cases := []struct {
		name   string
		route  string // create, fork, execute, sexec, install, check
		body   any
		status int
		code   string
	}{
		{name: "allowed_domains at the cap", route: "create", body: map[string]any{"language": "python3", "network": network(domainList(sandbox.MaxAllowedDomains))}, status: 201},
		{name: "allowed_domains over the cap", route: "create", body: map[string]any{"language": "python3", "network": network(domainList(sandbox.MaxAllowedDomains + 1))}, status: 400, code: "invalid_allowed_domains"},
		{name: "allowed_domains far over the cap", route: "create", body: map[string]any{"language": "python3", "network": network(domainList(20000))}, status: 400, code: "invalid_allowed_domains"},
		{name: "allowed_domains over the cap on fork", route: "fork", body: map[string]any{"network": network(domainList(sandbox.MaxAllowedDomains + 1))}, status: 400, code: "invalid_allowed_domains"},
		{name: "allowed_domains at the cap on fork", route: "fork", body: map[string]any{"network": network(domainList(sandbox.MaxAllowedDomains))}, status: 201},
		{name: "allowed_domains entry of the longest name", route: "create", body: map[string]any{"language": "python3", "network": network([]string{"*." + longDomain})}, status: 201},
		{name: "allowed_domains entry over its cap", route: "create", body: map[string]any{"language": "python3", "network": network([]string{long(sandbox.MaxDomainEntryBytes+1) + ".com"})}, status: 400, code: "invalid_allowed_domains"},
		{name: "allowed_domains with many bad entries", route: "create", body: map[string]any{"language": "python3", "network": network(slices.Repeat([]string{"*", long(10000)}, 100))}, status: 400, code: "invalid_allowed_domains"},
		{name: "allowed_domains duplicates count toward the cap", route: "create", body: map[string]any{"language": "python3", "network": network(slices.Repeat([]string{"a.example.com"}, sandbox.MaxAllowedDomains+1))}, status: 400, code: "invalid_allowed_domains"},
		{name: "language over its cap", route: "create", body: map[string]any{"language": long(100000)}, status: 400, code: "unknown_language"},
		{name: "language over its cap on execute", route: "execute", body: map[string]any{"language": long(100000), "code": "x"}, status: 400, code: "unknown_language"},
		{name: "language over its cap on fork", route: "fork", body: map[string]any{"language": long(100000)}, status: 400, code: "unknown_language"},
		{name: "env at the cap", route: "sexec", body: map[string]any{"code": "x", "env": envOf(sandbox.MaxEnvVars)}, status: 200},
		{name: "env over the cap", route: "sexec", body: map[string]any{"code": "x", "env": envOf(sandbox.MaxEnvVars + 1)}, status: 400, code: "invalid_request"},
		{name: "env over the cap, stateless", route: "execute", body: map[string]any{"language": "python3", "code": "x", "env": envOf(sandbox.MaxEnvVars + 1)}, status: 400, code: "invalid_request"},
		{name: "env name at its cap", route: "sexec", body: map[string]any{"code": "x", "env": map[string]string{"A" + long(sandbox.MaxEnvNameBytes-1): "x"}}, status: 200},
		{name: "env name over its cap", route: "sexec", body: map[string]any{"code": "x", "env": map[string]string{long(100000): "x"}}, status: 400, code: "invalid_request"},
		{name: "env bytes at the cap", route: "sexec", body: map[string]any{"code": "x", "env": map[string]string{"A": long(sandbox.MaxEnvBytes - 1)}}, status: 200},
		{name: "env bytes over the cap", route: "sexec", body: map[string]any{"code": "x", "env": map[string]string{"A": long(sandbox.MaxEnvBytes)}}, status: 400, code: "invalid_request"},
		{name: "files at the cap", route: "execute", body: map[string]any{"language": "python3", "code": "x", "files": filesOf(sandbox.MaxFiles)}, status: 200},
		{name: "files over the cap", route: "execute", body: map[string]any{"language": "python3", "code": "x", "files": filesOf(sandbox.MaxFiles + 1)}, status: 400, code: "invalid_request"},
		{name: "file path at its cap", route: "execute", body: map[string]any{"language": "python3", "code": "x", "files": []wire.File{{Path: long(sandbox.MaxFilePathBytes)}}}, status: 200},
		{name: "file path over its cap", route: "execute", body: map[string]any{"language": "python3", "code": "x", "files": []wire.File{{Path: long(100000)}}}, status: 400, code: "invalid_request"},
		{name: "install packages at the cap", route: "install", body: map[string]any{"manager": "pip", "packages": packagesOf(sandbox.MaxPackages)}, status: 200},
		{name: "install packages over the cap", route: "install", body: map[string]any{"manager": "pip", "packages": packagesOf(sandbox.MaxPackages + 1)}, status: 400, code: "invalid_request"},
		{name: "install spec at its cap", route: "install", body: map[string]any{"manager": "pip", "packages": []string{long(sandbox.MaxPackageSpecBytes-4) + "==1"}}, status: 200},
		{name: "install spec over its cap", route: "install", body: map[string]any{"manager": "pip", "packages": []string{long(100000)}}, status: 400, code: "invalid_request"},
		{name: "install a lockfile", route: "install", body: map[string]any{"manager": "npm", "lockfile": map[string]any{"lockfileVersion": 3}}, status: 200},
		{name: "install a lockfile with pip", route: "install", body: map[string]any{"manager": "pip", "lockfile": map[string]any{"lockfileVersion": 3}}, status: 400, code: "invalid_request"},
		{name: "install a lockfile and packages", route: "install", body: map[string]any{"manager": "npm", "packages": []string{"ms"}, "lockfile": map[string]any{}}, status: 400, code: "invalid_request"},
		{name: "install a lockfile that is not an object", route: "install", body: map[string]any{"manager": "npm", "lockfile": []string{"x"}}, status: 400, code: "invalid_lockfile"},
		{name: "install neither packages nor lockfile", route: "install", body: map[string]any{"manager": "npm", "lockfile": nil}, status: 400, code: "invalid_request"},
		{name: "check packages over the cap", route: "check", body: map[string]any{"manager": "pip", "packages": packagesOf(sandbox.MaxPackages + 1)}, status: 400, code: "invalid_request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lc := &fakeLifecycle{}
			srv, sb := newFakeServerDeps(t, func(c *Config) { c.MaxBodyBytes = 4 << 20 }, func(d *Deps) {
				d.Lifecycle, d.Installer, d.Gate, d.Packages = lc, fakeInstaller{}, &fakeGate{}, fakePackages{}
			})
			lc.sb = sb
			h := map[string]string{"X-API-Key": "key-ULTRA"}
			rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, h)
			if rec.Code != 201 {
				t.Fatalf("session: %d %s", rec.Code, rec.Body)
			}
			var s struct{ ID string }
			_ = json.Unmarshal(rec.Body.Bytes(), &s)
			path := map[string]string{"create": "/v1/sessions", "fork": "/v1/sessions/" + s.ID + "/fork", "execute": "/v1/execute",
				"sexec": "/v1/sessions/" + s.ID + "/execute", "install": "/v1/sessions/" + s.ID + "/install", "check": "/v1/packages/check"}[tc.route]
			rec = send(t, srv, "POST", path, mustJSON(tc.body), h)
			if rec.Code != tc.status {
				t.Fatalf("POST %s: %d, want %d: %.500s", path, rec.Code, tc.status, rec.Body)
			}
			if tc.code != "" {
				var doc struct {
					Error struct{ Code, Message string }
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.Error.Code != tc.code {
					t.Fatalf("POST %s: code %q, want %q: %.500s", path, doc.Error.Code, tc.code, rec.Body)
				}
				if rec.Body.Len() > 2048 {
					t.Fatalf("POST %s: a %d-byte error reply quotes too much of the request: %.300s", path, rec.Body.Len(), rec.Body)
				}
			}
		})
	}
}

// TestAllowedDomainsDeduped checks that repeated allowed_domains entries
// (ignoring case and a trailing dot) are stored once, first spelling
// first, in the order sent; the session, the executor and the list agree.
func TestAllowedDomainsDeduped(t *testing.T) {
	t.Parallel()
	srv, sb := newFakeServer(t)
	h := map[string]string{"X-API-Key": "key-ULTRA"}
	sent := []string{"API.example.com", "*.example.com", "api.example.com.", "b.example.com", "*.EXAMPLE.com", "api.EXAMPLE.com", "b.example.com."}
	want := []string{"API.example.com", "*.example.com", "b.example.com"}
	rec := send(t, srv, "POST", "/v1/sessions", mustJSON(map[string]any{"language": "python3", "network": map[string]any{"enabled": true, "allowed_domains": sent}}), h)
	if rec.Code != 201 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	var got wire.Session
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Network.AllowedDomains, want) {
		t.Fatalf("reply allowed_domains = %q, want %q", got.Network.AllowedDomains, want)
	}
	stored, err := sb.GetSession(t.Context(), "id-ULTRA", got.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored.Network.AllowedDomains, want) {
		t.Fatalf("executor got allowed_domains = %q, want %q", stored.Network.AllowedDomains, want)
	}
	// A list of one name repeated up to the cap is one entry.
	rec = send(t, srv, "POST", "/v1/sessions", mustJSON(map[string]any{"language": "python3", "network": map[string]any{"enabled": true,
		"allowed_domains": slices.Repeat([]string{"a.example.com", "A.EXAMPLE.COM."}, sandbox.MaxAllowedDomains/2)}}), h)
	if rec.Code != 201 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || !slices.Equal(got.Network.AllowedDomains, []string{"a.example.com"}) {
		t.Fatalf("reply allowed_domains = %q (%v), want [a.example.com]", got.Network.AllowedDomains, err)
	}
}

// TestOverCapBeforePlanAndEgress checks the order of the checks: a
// malformed or over-cap network block is a 400 on a server whose egress is
// off (not 503 network_unavailable) and on a plan without network or
// allowed_domains (not 403), for create and fork alike.
func TestOverCapBeforePlanAndEgress(t *testing.T) {
	t.Parallel()
	over := map[string]any{"enabled": true, "allowed_domains": domainList(sandbox.MaxAllowedDomains + 1)}
	bad := map[string]any{"enabled": true, "allowed_domains": []string{"*"}}
	cases := []struct {
		name      string
		plan      string
		noNetwork bool
		network   map[string]any
		status    int
		code      string
	}{
		{name: "over the cap, egress off", plan: "ULTRA", noNetwork: true, network: over, status: 400, code: "invalid_allowed_domains"},
		{name: "malformed, egress off", plan: "ULTRA", noNetwork: true, network: bad, status: 400, code: "invalid_allowed_domains"},
		{name: "over the cap, plan without allowed_domains", plan: "PRO", network: over, status: 400, code: "invalid_allowed_domains"},
		{name: "over the cap, plan without network or sessions", plan: "BASIC", network: over, status: 400, code: "invalid_allowed_domains"},
		{name: "within the cap, egress off", plan: "ULTRA", noNetwork: true, network: map[string]any{"enabled": true, "allowed_domains": domainList(3)}, status: 503, code: "network_unavailable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lc := &fakeLifecycle{}
			srv, sb := newFakeServerDeps(t, nil, func(d *Deps) { d.Lifecycle = lc })
			lc.sb = sb
			h := map[string]string{"X-API-Key": "key-" + tc.plan}
			paths := []string{"/v1/sessions"}
			if tc.plan != "BASIC" {
				rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, h)
				var s struct{ ID string }
				if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || rec.Code != 201 {
					t.Fatalf("session: %d %s", rec.Code, rec.Body)
				}
				paths = append(paths, "/v1/sessions/"+s.ID+"/fork")
			}
			sb.mu.Lock()
			sb.noNetwork = tc.noNetwork
			sb.mu.Unlock()
			for _, path := range paths {
				rec := send(t, srv, "POST", path, mustJSON(map[string]any{"language": "python3", "network": tc.network}), h)
				var doc struct{ Error struct{ Code string } }
				_ = json.Unmarshal(rec.Body.Bytes(), &doc)
				if rec.Code != tc.status || doc.Error.Code != tc.code {
					t.Fatalf("POST %s: %d %q, want %d %q: %.300s", path, rec.Code, doc.Error.Code, tc.status, tc.code, rec.Body)
				}
			}
		})
	}
}

// TestInstallBadInputBeforePlan: an install's malformed package list is a
// 400 on a plan without sessions too (the body is checked first).
func TestInstallBadInputBeforePlan(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.Installer, d.Gate = fakeInstaller{}, &fakeGate{} })
	rec := send(t, srv, "POST", "/v1/sessions/x/install", mustJSON(map[string]any{"manager": "pip", "packages": packagesOf(sandbox.MaxPackages + 1)}),
		map[string]string{"X-API-Key": "key-BASIC"})
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("install: %d %s", rec.Code, rec.Body)
	}
}

// TestIdleTTLCheckedBeforePlan: a bad idle_ttl is a 400 on a plan without
// sessions too, like the rest of the body.
func TestIdleTTLCheckedBeforePlan(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServer(t)
	for _, ttl := range []string{"-1", "1e12"} {
		rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3","idle_ttl":`+ttl+`}`, map[string]string{"X-API-Key": "key-BASIC"})
		if rec.Code != http.StatusBadRequest {
			t.Fatalf("idle_ttl %s on BASIC: %d %s", ttl, rec.Code, rec.Body)
		}
	}
}
