package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	ts := httptest.NewServer(m.Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("scrape: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// TestHelpersExport checks every helper shows up in the text format with
// its labels, scrape-time functions included.
func TestHelpersExport(t *testing.T) {
	t.Parallel()
	m := New()
	m.ObserveRequest("POST /v1/execute", 200, 30*time.Millisecond)
	m.ObserveRequest("", 404, time.Millisecond)
	m.ObserveExecution("python3", "ok", 40*time.Millisecond)
	m.ObserveExecution("go", "", time.Second)
	m.EgressDecision("allow", "allowed")
	m.EgressDecision("deny", "private_address")
	m.MirrorHit("npm")
	m.MirrorRefusal("pypi", "not_binary")
	m.ReadinessCheck("firewall", true)
	ready := map[string]bool{"mirror": true, "osv": false}
	m.RegisterReadiness(func() map[string]bool { return ready })
	m.RegisterSandboxStats(func() (int, int) { return 3, 2 })
	m.RegisterSessionsByPlan(func() map[string]int { return map[string]int{"PRO": 2, "BASIC": 0} })
	text := scrape(t, m)
	for _, want := range []string{
		`sandboxapi_http_requests_total{route="POST /v1/execute",status="200"} 1`,
		`sandboxapi_http_requests_total{route="unmatched",status="404"} 1`,
		`sandboxapi_http_request_duration_seconds_bucket{route="POST /v1/execute",le="0.05"} 1`,
		`sandboxapi_executions_total{language="python3",status="ok"} 1`,
		`sandboxapi_executions_total{language="go",status="failed"} 1`,
		`sandboxapi_execution_duration_seconds_count{language="go"} 1`,
		`sandboxapi_egress_decisions_total{decision="deny",reason="private_address"} 1`,
		`sandboxapi_mirror_hits_total{ecosystem="npm"} 1`,
		`sandboxapi_mirror_refusals_total{ecosystem="pypi",reason="not_binary"} 1`,
		`sandboxapi_readiness_check{check="firewall"} 1`,
		`sandboxapi_readiness_check{check="mirror"} 1`,
		`sandboxapi_readiness_check{check="osv"} 0`,
		`sandboxapi_sandboxes_live 3`,
		`sandboxapi_warm_pool_ready 2`,
		`sandboxapi_sessions{plan="BASIC"} 0`,
		`sandboxapi_sessions{plan="PRO"} 2`,
		`process_open_fds`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	// A check that recovers shows as passing on the next scrape.
	ready["osv"] = true
	if !strings.Contains(scrape(t, m), `sandboxapi_readiness_check{check="osv"} 1`) {
		t.Error("readiness not refreshed at scrape time")
	}
}

// TestReregister checks that a second serve in one process can register
// its scrape functions again: the later ones win, nothing panics.
func TestReregister(t *testing.T) {
	t.Parallel()
	m := New()
	if strings.Contains(scrape(t, m), "sandboxapi_sandboxes_live") {
		t.Error("gauges present before registration")
	}
	m.RegisterSandboxStats(func() (int, int) { return 1, 1 })
	m.RegisterSandboxStats(func() (int, int) { return 5, 0 })
	m.RegisterSessionsByPlan(func() map[string]int { return map[string]int{"PRO": 1} })
	m.RegisterSessionsByPlan(func() map[string]int { return map[string]int{"PRO": 4} })
	text := scrape(t, m)
	for _, want := range []string{"sandboxapi_sandboxes_live 5", "sandboxapi_warm_pool_ready 0", `sandboxapi_sessions{plan="PRO"} 4`} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}

// TestRegistriesAreSeparate checks that New uses no global state, so tests
// and several servers in one process do not collide.
func TestRegistriesAreSeparate(t *testing.T) {
	t.Parallel()
	a, b := New(), New()
	a.MirrorHit("npm")
	a.RegisterSandboxStats(func() (int, int) { return 1, 1 })
	b.RegisterSandboxStats(func() (int, int) { return 1, 1 })
	if strings.Contains(scrape(t, b), "sandboxapi_mirror_hits_total") {
		t.Error("a's counter shows in b")
	}
}

func TestInstrumentMirror(t *testing.T) {
	t.Parallel()
	m := New()
	h := m.InstrumentMirror(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/mirror/pypi/simple/numpy/":
			io.WriteString(w, "index")
		case "/mirror/npm/left-pad":
			http.Error(w, "not admitted", http.StatusNotFound)
		default:
			w.WriteHeader(http.StatusNotModified)
		}
	}))
	for _, p := range []string{"/mirror/pypi/simple/numpy/", "/mirror/pypi/files/x.whl", "/mirror/npm/left-pad"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
	}
	text := scrape(t, m)
	for _, want := range []string{
		`sandboxapi_mirror_hits_total{ecosystem="pypi"} 2`,
		`sandboxapi_mirror_refusals_total{ecosystem="npm",reason="status_404"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}

// TestMirrorArtifacts: the catalogue gauge reads its function at every
// scrape, and a failing source leaves the gauge out instead of failing the
// scrape.
func TestMirrorArtifacts(t *testing.T) {
	t.Parallel()
	m := New()
	var mu sync.Mutex
	rows := []ArtifactCount{{"npm", "admitted", 2}, {"pip", "refused", 3}}
	var fail bool
	m.RegisterMirrorArtifacts(func() ([]ArtifactCount, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return nil, io.ErrUnexpectedEOF
		}
		return append([]ArtifactCount(nil), rows...), nil
	})
	text := scrape(t, m)
	for _, want := range []string{`sandboxapi_mirror_artifacts{ecosystem="npm",status="admitted"} 2`, `sandboxapi_mirror_artifacts{ecosystem="pypi",status="refused"} 3`} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	mu.Lock()
	rows = append(rows, ArtifactCount{"pip", "quarantined", 1})
	mu.Unlock()
	if !strings.Contains(scrape(t, m), `sandboxapi_mirror_artifacts{ecosystem="pypi",status="quarantined"} 1`) {
		t.Error("a later scrape does not read the source again")
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	if strings.Contains(scrape(t, m), "sandboxapi_mirror_artifacts{") {
		t.Error("a failing source still exported values")
	}
}

// TestBuildInfo: one sandboxapi_build_info series names the build; a new
// call replaces it rather than adding a second.
func TestBuildInfo(t *testing.T) {
	m := New()
	m.SetBuildInfo("v0.0.0-1", "aaaa", "v0.0.0-old")
	m.SetBuildInfo("v0.0.0-20261201124234-99c73044bcce", "99c73044bccef4f0f1267991c2d9467bcfc7bd96", "v0.0.0-20260905035102-160fafc42237")
	out := scrape(t, m)
	want := `sandboxapi_build_info{revision="99c73044bccef4f0f1267991c2d9467bcfc7bd96",runsc="v0.0.0-20260905035102-160fafc42237",version="v0.0.0-20261201124234-99c73044bcce"} 1`
	if !strings.Contains(out, want) {
		t.Errorf("scrape lacks %s:\n%s", want, out)
	}
	if n := strings.Count(out, "sandboxapi_build_info{"); n != 1 {
		t.Errorf("%d build_info series, want 1", n)
	}
}

// TestOneEcosystemSpelling: every metric with an ecosystem label spells
// PyPI "pypi", whether the caller said pip or pypi (the catalogue gauge
// said "pip" while the mirror counters said "pypi").
func TestOneEcosystemSpelling(t *testing.T) {
	m := New()
	m.MirrorHit("pip")
	m.MirrorRefusal("PyPI", "osv")
	m.RegisterMirrorArtifacts(func() ([]ArtifactCount, error) {
		return []ArtifactCount{{"pip", "admitted", 1}, {"npm", "admitted", 1}}, nil
	})
	text := scrape(t, m)
	if strings.Contains(text, `ecosystem="pip"`) || strings.Contains(text, `ecosystem="PyPI"`) {
		t.Fatalf("a metric spells the ecosystem pip or PyPI:\n%s", text)
	}
	for _, want := range []string{`sandboxapi_mirror_hits_total{ecosystem="pypi"} 1`, `sandboxapi_mirror_refusals_total{ecosystem="pypi",reason="osv"} 1`,
		`sandboxapi_mirror_artifacts{ecosystem="pypi",status="admitted"} 1`} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}

func TestInstallPanicAndOSVMetrics(t *testing.T) {
	m := New()
	if strings.Contains(scrape(t, m), "sandboxapi_osv_snapshot_age_seconds ") {
		t.Fatal("OSV age exported before a source is registered")
	}
	m.ObserveInstall("pip", "ok", 1500*time.Millisecond)
	m.ObserveInstall("npm", "rejected", 10*time.Millisecond)
	m.ObserveInstall("cargo", "error", time.Millisecond)
	m.ObservePanic("api")
	ok := true
	m.RegisterOSVAge(func() (time.Duration, bool) { return 90 * time.Second, ok })
	text := scrape(t, m)
	for _, want := range []string{
		`sandboxapi_installs_total{manager="pip",outcome="ok"} 1`,
		`sandboxapi_installs_total{manager="npm",outcome="rejected"} 1`,
		`sandboxapi_installs_total{manager="other",outcome="error"} 1`,
		`sandboxapi_install_duration_seconds_bucket{manager="pip",outcome="ok",le="2"} 1`,
		`sandboxapi_panics_recovered_total{component="api"} 1`,
		`sandboxapi_osv_snapshot_age_seconds 90`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	ok = false
	if strings.Contains(scrape(t, m), "sandboxapi_osv_snapshot_age_seconds ") {
		t.Error("OSV age exported with no snapshot")
	}
}

// TestClusterMetrics: forwards by outcome, takeovers by cause, and the
// nodes-alive gauge, absent until a cluster node registers it.
func TestClusterMetrics(t *testing.T) {
	m := New()
	if strings.Contains(scrape(t, m), "sandboxapi_cluster_nodes_alive") {
		t.Fatal("nodes alive on a single node")
	}
	m.ClusterForward("ok")
	m.ClusterForward("ok")
	m.ClusterForward("unreachable")
	m.ClusterTakeover("expired")
	m.RegisterClusterNodes(func() (int, bool) { return 3, true })
	out := scrape(t, m)
	for _, want := range []string{`sandboxapi_cluster_forwards_total{outcome="ok"} 2`, `sandboxapi_cluster_forwards_total{outcome="unreachable"} 1`,
		`sandboxapi_cluster_takeovers_total{from="expired"} 1`, "sandboxapi_cluster_nodes_alive 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	m.RegisterClusterNodes(func() (int, bool) { return 0, false })
	if strings.Contains(scrape(t, m), "sandboxapi_cluster_nodes_alive") {
		t.Error("nodes alive shown while the store does not answer")
	}
}
