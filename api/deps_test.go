package api

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestDepsMountRoutes: New mounts the routes of each optional dependency
// it is given, and leaves them out (the /v1/ catch-all's 404 no_route, or
// the mux's 404) when the dependency is nil.
func TestDepsMountRoutes(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	cases := []struct {
		name   string
		set    func(*Deps)
		routes []string
	}{
		{"usage", func(d *Deps) { d.Usage = fakeUsage{} }, []string{"GET /v1/usage"}},
		{"files", func(d *Deps) { d.Files = &fakeFiles{files: map[string][]byte{}, max: 1 << 20} },
			[]string{"PUT /v1/sessions/{id}/files", "GET /v1/sessions/{id}/files"}},
		{"lifecycle", func(d *Deps) { d.Lifecycle = &fakeLifecycle{} },
			[]string{"POST /v1/sessions/{id}/hibernate", "POST /v1/sessions/{id}/fork"}},
		{"sbom", func(d *Deps) { d.SBOMs = fakeSBOMs{asked: new([]string)} }, []string{"GET /v1/sessions/{id}/sbom"}},
		{"installer", func(d *Deps) { d.Installer, d.Gate = fakeInstaller{}, &fakeGate{} }, []string{"POST /v1/sessions/{id}/install"}},
		{"packages", func(d *Deps) { d.Packages = fakePackages{} }, []string{"POST /v1/packages/check"}},
		{"mirror", func(d *Deps) { d.Mirror = ok }, []string{"/mirror/"}},
		{"metrics", func(d *Deps) { d.Metrics = ok }, []string{"GET /metrics"}},
		{"console", func(d *Deps) { d.Console = ok }, []string{"/console", "/console/"}},
		{"mcp", func(d *Deps) { d.MCP = func(http.Handler) http.Handler { return ok } }, []string{"/mcp"}},
		{"e2b", func(d *Deps) { d.E2B = func(http.Handler) http.Handler { return ok } }, []string{"/e2b/"}},
	}
	bare, _ := newFakeServer(t)
	for _, c := range cases {
		srv, _ := newFakeServerDeps(t, nil, c.set)
		for _, r := range c.routes {
			if slices.Contains(bare.Routes(), r) {
				t.Errorf("%s: %s mounted without the dependency", c.name, r)
			}
			if !slices.Contains(srv.Routes(), r) {
				t.Errorf("%s: %s not mounted with the dependency", c.name, r)
			}
		}
	}
	// Unmounted, a route is what any unknown path is.
	for _, x := range []struct{ method, path, code string }{
		{"GET", "/v1/usage", "no_route"},
		{"POST", "/v1/packages/check", "no_route"},
	} {
		rec := send(t, bare, x.method, x.path, `{}`, map[string]string{"X-API-Key": "key-PRO"})
		if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"`+x.code+`"`) {
			t.Errorf("%s %s without its dependency: %d %s", x.method, x.path, rec.Code, rec.Body)
		}
	}
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.Metrics = ok })
	if rec := send(t, srv, "GET", "/metrics", "", nil); rec.Code != http.StatusTeapot {
		t.Errorf("GET /metrics: %d, want the mounted handler's %d", rec.Code, http.StatusTeapot)
	}
}
