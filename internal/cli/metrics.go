package cli

import (
	"context"
	"path/filepath"
	"sort"
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
	m.RegisterSandboxStats(func() (int, int) { return liveSandboxes(ex.SandboxIDs(), executor.CgroupDirs()), ex.WarmReady() })
	m.RegisterReadiness(srv.ReadinessByCheck)
	m.RegisterHomeStats(func() (int, int, int64, int64) {
		running, hibernated := ex.SessionCounts()
		committed, used := ex.DiskStats()
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

// mirrorCounts counts the mirror's catalogue by manager and status, in a
// fixed order.
func mirrorCounts(ctx context.Context, mir *mirror.Mirror) ([]metrics.ArtifactCount, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	arts, err := mir.List(ctx, "")
	if err != nil {
		return nil, err
	}
	n := map[[2]string]int{}
	for _, a := range arts {
		n[[2]string{metrics.Ecosystem(string(a.Manager)), string(a.Status)}]++
	}
	keys := make([][2]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+"/"+keys[i][1] < keys[j][0]+"/"+keys[j][1] })
	out := make([]metrics.ArtifactCount, 0, len(keys))
	for _, k := range keys {
		out = append(out, metrics.ArtifactCount{Ecosystem: k[0], Status: k[1], N: n[k]})
	}
	return out, nil
}

// liveSandboxes counts this server's running sandboxes: those of its own
// (own: the ids in its runsc root) that have a cgroup folder (cgroupDirs,
// one folder per running sandbox under each controller). Other servers'
// sandboxes on the host have cgroups there too and are not counted.
func liveSandboxes(own, cgroupDirs []string) int {
	running := map[string]bool{}
	for _, dir := range cgroupDirs {
		running[filepath.Base(dir)] = true
	}
	n := 0
	for _, id := range own {
		if running[id] {
			n++
		}
	}
	return n
}
