package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/metrics"
)

type fakeReadiness struct{}

func (fakeReadiness) Checks(ctx context.Context, refresh bool) (bool, []CheckResult) {
	return false, []CheckResult{{Name: "mirror", Status: "pass"}, {Name: "osv", Status: "stale"}}
}

// switchedReadiness reports as no reporter at all (ready, no checks) until
// on is set, then as fakeReadiness: a test turns /readyz red midway.
type switchedReadiness struct{ on atomic.Bool }

func (r *switchedReadiness) Checks(ctx context.Context, refresh bool) (bool, []CheckResult) {
	if !r.on.Load() {
		return true, []CheckResult{}
	}
	return fakeReadiness{}.Checks(ctx, refresh)
}

// TestMetricsAfterRequests drives the sample requests through a server
// built on fakes, with the metrics observer and /metrics mounted as the CLI
// does, then scrapes /metrics.
func TestMetricsAfterRequests(t *testing.T) {
	m := metrics.New()
	ready := &switchedReadiness{}
	srv, sb := newFakeServerDeps(t, nil, func(d *Deps) {
		d.Usage, d.EgressLog, d.Packages = fakeUsage{}, fakeEgressLog{}, fakePackages{}
		d.Installer, d.Gate = fakeInstaller{}, &fakeGate{}
		d.Observer, d.Metrics, d.Readiness = m, m.Handler(), ready
	})
	m.RegisterSessionsByPlan(srv.SessionsByPlan)
	m.RegisterSandboxStats(func() (int, int) { return len(sb.ListSessions(t.Context(), "id-PRO")), 2 })
	m.EgressDecision("deny", "not_allowed")
	m.MirrorHit("pypi")
	m.MirrorRefusal("npm", "osv")
	m.RegisterReadiness(srv.ReadinessByCheck)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	runExchanges(t, ts, func(exchange, []byte, *http.Response, []byte) {})
	ready.on.Store(true) // after the samples: it turns /readyz red

	// A session that stays open counts under its plan.
	req, _ := http.NewRequest("POST", ts.URL+"/v1/sessions", strings.NewReader(`{"language":"python3"}`))
	req.Header.Set("Authorization", "Bearer key-ULTRA")
	resp, err := ts.Client().Do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("creating session: %v %v", err, resp)
	}
	resp.Body.Close()

	resp, err = ts.Client().Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	text := string(b)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`sandboxapi_http_requests_total{route="POST /v1/execute",status="200"} 4`,
		`sandboxapi_http_requests_total{route="POST /v1/execute",status="400"} 3`,
		`sandboxapi_http_requests_total{route="POST /v1/execute",status="413"} 1`,
		`sandboxapi_http_requests_total{route="GET /v1/runtimes",status="401"} 1`,
		`sandboxapi_http_requests_total{route="DELETE /v1/sessions/{id}",status="204"} 1`,
		`sandboxapi_http_requests_total{route="/v1/",status="404"} 1`,
		`sandboxapi_http_request_duration_seconds_count{route="POST /v1/sessions"}`,
		`sandboxapi_executions_total{language="python3",status="ok"} 4`,
		`sandboxapi_executions_total{language="bash",status="error"} 1`,
		`sandboxapi_executions_total{language="python3",status="timeout"} 1`,
		`sandboxapi_execution_duration_seconds_bucket{language="python3",le="+Inf"} 5`,
		`sandboxapi_sessions{plan="ULTRA"} 1`,
		`sandboxapi_sessions{plan="PRO"} 0`,
		`sandboxapi_sessions{plan="BASIC"} 0`,
		`sandboxapi_sandboxes_live 0`,
		`sandboxapi_warm_pool_ready 2`,
		`sandboxapi_egress_decisions_total{decision="deny",reason="not_allowed"} 1`,
		`sandboxapi_mirror_hits_total{ecosystem="pypi"} 1`,
		`sandboxapi_mirror_refusals_total{ecosystem="npm",reason="osv"} 1`,
		`sandboxapi_readiness_check{check="mirror"} 1`,
		`sandboxapi_readiness_check{check="osv"} 0`,
		`go_goroutines `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, secret := range []string{"key-PRO", "key-BASIC", "cobol"} {
		if strings.Contains(text, secret) {
			t.Errorf("metrics leak %q", secret)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

// TestMetricsCountEveryRoute checks that requests outside the
// authenticated API are counted too, under their pattern, and that paths
// no pattern matches share one label whatever they are.
func TestMetricsCountEveryRoute(t *testing.T) {
	m := metrics.New()
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) {
		d.Observer, d.Metrics = m, m.Handler()
		d.Mirror = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
		d.MCP = func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
		}
	})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	get := func(method, path string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, nil)
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for _, p := range []string{"/healthz", "/healthz", "/readyz", "/openapi.json", "/metrics", "/mirror/pypi/simple/six/", "/nothing", "/other-nothing", "/v1/runtimes"} {
		get("GET", p)
	}
	get("POST", "/mcp")
	get("POST", "/healthz") // the method does not match: the mux answers 405
	resp, err := ts.Client().Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, want := range []string{
		`sandboxapi_http_requests_total{route="GET /healthz",status="200"} 2`,
		`sandboxapi_http_requests_total{route="GET /readyz",status="200"} 1`,
		`sandboxapi_http_requests_total{route="GET /openapi.json",status="200"} 1`,
		`sandboxapi_http_requests_total{route="GET /metrics",status="200"} 1`,
		`sandboxapi_http_requests_total{route="/mirror/",status="404"} 1`,
		`sandboxapi_http_requests_total{route="/mcp",status="202"} 1`,
		`sandboxapi_http_requests_total{route="unmatched",status="404"} 2`,
		`sandboxapi_http_requests_total{route="unmatched",status="405"} 1`,
		`sandboxapi_http_requests_total{route="GET /v1/runtimes",status="401"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, leak := range []string{"nothing", "pypi", "six"} {
		if strings.Contains(text, leak) {
			t.Errorf("a request path became a label: %q", leak)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

// TestPanicsRecoveredCounted: a handler panic answered with a 500 shows in
// sandboxapi_panics_recovered_total{component="api"}.
func TestPanicsRecoveredCounted(t *testing.T) {
	m := metrics.New()
	srv, sb := newFakeServerDeps(t, nil, func(d *Deps) { d.Observer, d.Metrics = m, m.Handler() })
	sb.createPanic = "boom"
	if rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, map[string]string{"X-RapidAPI-Key": "key-PRO"}); rec.Code != 500 {
		t.Fatalf("panicking create: %d", rec.Code)
	}
	rec := send(t, srv, "GET", "/metrics", "", nil)
	if !strings.Contains(rec.Body.String(), `sandboxapi_panics_recovered_total{component="api"} 1`) {
		t.Fatalf("no panic counted:\n%s", rec.Body)
	}
}
