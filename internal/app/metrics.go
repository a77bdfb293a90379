package app

import (
	"context"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/metrics"
	"github.com/sandboxapi/sandboxapi/mirror"
)

// registerMetrics adds the scrape-time gauges (sandboxes, warm pool,
// sessions by plan, readiness, homes, the mirror) to m, the one registry
// of a serve process, which serve creates and hands to every part that
// reports (the API's observer, egress decisions, the mirror's handlers,
// installs).
func registerMetrics(m *metrics.Metrics, srv *api.Server, ex *executor.Executor, mir *mirror.Mirror) {
	m.RegisterSessionsByPlan(srv.SessionsByPlan)
	m.RegisterSandboxStats(func() (int, int) { return ex.LiveSandboxes(), ex.Pool().Ready() })
	m.RegisterReadiness(srv.ReadinessByCheck)
	m.RegisterHomeStats(func() (int, int, int64, int64) {
		running, hibernated := ex.SessionCounts()
		committed, used := ex.Disk().Stats()
		return running, hibernated, committed, used
	})
	m.RegisterMirrorArtifacts(func() ([]metrics.ArtifactCount, error) { return mirrorCounts(context.Background(), mir) })
	m.RegisterOSVAge(func() (time.Duration, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := mir.OSVStatus(ctx)
		return st.Age, err == nil && st.Present
	})
}

// mirrorCounts counts the mirror's catalogue by ecosystem and status.
func mirrorCounts(ctx context.Context, mir *mirror.Mirror) ([]metrics.ArtifactCount, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cs, err := mir.Counts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]metrics.ArtifactCount, 0, len(cs))
	for _, c := range cs {
		out = append(out, metrics.ArtifactCount{Ecosystem: metrics.Ecosystem(string(c.Manager)), Status: string(c.Status), N: c.N})
	}
	return out, nil
}
