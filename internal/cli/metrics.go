package cli

import (
	"net/http"
	"path/filepath"
	"sync"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/metrics"
)

// processMetrics is the one registry of a serve process. Wiring code of
// other services reports through it: egress's Options.OnDecision calls
// EgressDecision (setupEgress), the mirror's handlers are wrapped in
// InstrumentMirror (serve, wireInstall), and readiness is read at scrape
// time (wireMetrics).
var processMetrics = sync.OnceValue(metrics.New)

// wireMetrics sends the API's measurements to the process registry, adds
// the scrape-time gauges (sandboxes, warm pool, sessions by plan) and
// returns the GET /metrics handler.
func wireMetrics(srv *api.Server, ex *executor.Executor) http.Handler {
	m := processMetrics()
	srv.SetObserver(m)
	m.RegisterSessionsByPlan(srv.SessionsByPlan)
	m.RegisterSandboxStats(func() (int, int) { return liveSandboxes(), ex.WarmReady() })
	m.RegisterReadiness(srv.ReadinessByCheck)
	return m.Handler()
}

// liveSandboxes counts running sandboxes by their per-sandbox cgroups (one
// folder per sandbox under each controller).
func liveSandboxes() int {
	ids := map[string]bool{}
	for _, dir := range executor.CgroupDirs() {
		ids[filepath.Base(dir)] = true
	}
	return len(ids)
}
