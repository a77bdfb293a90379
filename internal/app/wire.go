package app

import (
	"context"
	"net/http"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/cluster"
	"github.com/sandboxapi/sandboxapi/e2b"
	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/buildinfo"
	"github.com/sandboxapi/sandboxapi/internal/lifecycle"
	"github.com/sandboxapi/sandboxapi/internal/metrics"
	"github.com/sandboxapi/sandboxapi/internal/seal"
	"github.com/sandboxapi/sandboxapi/mcp"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/store"
)

var _ lifecycle.Component = (*executor.Executor)(nil)

var (
	_ api.SessionSlots = (*store.Store)(nil)
	_ api.RateTokens   = (*store.Store)(nil)
)

// wiring is what serve has built when it wires the API.
type wiring struct {
	plans    *api.Plans
	ex       *executor.Executor
	st       *store.Store
	mir      *mirror.Mirror
	front    mirrorFront
	usage    *store.UsageWriter
	trail    *egressTrail     // the API's view of the egress audit
	sessions *egress.Sessions // nil when egress is off
	keys     *seal.Keys       // nil when egress is off
	m        *metrics.Metrics
	build    buildinfo.Info
	node     *cluster.Node // nil for a single node
}

// credentialSealer is the API's sealer: nil (credentials refused) while
// egress is off.
func credentialSealer(k *seal.Keys) api.CredentialSealer {
	if k == nil {
		return nil
	}
	return k
}

// wireServices builds the API with every dependency it serves (one field
// each) and adds the readiness checks to g. The checks start after the
// executor and before the HTTP server, and stop in reverse.
func wireServices(ctx context.Context, env *Env, g *lifecycle.Group, w wiring) *api.Server {
	cfg := env.Config
	chk, inst := wireInstall(ctx, env, g, w.ex, w.sessions, w.mir, w.front, w.st, w.m)
	// The mirror check may ask the server itself: the checks start once
	// it listens.
	g.Add("readiness", chk.Service(func(ctx context.Context) { waitListening(ctx, LoopbackAddr(cfg.Listen), 30*time.Second) }))
	trail := w.trail
	if trail == nil {
		trail = &egressTrail{st: w.st} // egress off: the store's decisions alone
	}
	ready := readinessReporter{chk}
	build := w.build
	// Slots this node's previous process reserved for creates died with it.
	if _, err := w.st.ReleasePendingSlots(ctx); err != nil {
		env.Log.Warn("releasing pending session slots", "err", err)
	}
	var sandboxes api.Sandboxes = w.ex
	mcpAPI := func(h http.Handler) http.Handler { return h }
	if w.node != nil {
		sandboxes = clusterSandboxes{Executor: w.ex, node: w.node}
		mcpAPI = w.node.Handler // MCP's calls for other nodes' sessions go there
	}
	srv := api.New(cfg.APIConfig(), api.Deps{
		Sandboxes:   sandboxes,
		Keys:        storeKeys{w.st},
		Plans:       w.plans,
		Log:         env.Log,
		Meter:       storeMeter{w.usage},
		Observer:    w.m,
		Build:       &build,
		Readiness:   ready,
		EgressLog:   trail,
		Credentials: credentialSealer(w.keys),
		Usage:       storeUsage{st: w.st, w: w.usage},
		Files:       w.ex.Files(),
		Lifecycle:   w.ex,
		Kernels:     w.ex,
		Network:     w.ex,
		Processes:   w.ex.Processes(),
		SBOMs:       sbomSource{st: w.st, mir: w.mir},
		Installer:   inst,
		Gate:        ready,
		Packages:    mirrorPackages{w.mir},
		Mirror:      w.m.InstrumentMirror(w.front.handler),
		Metrics:     w.m.Handler(),
		Console:     newConsole(env, ready, w.mir, w.st, w.ex),
		MCP: func(h http.Handler) http.Handler {
			return mcp.NewHTTPHandler(mcpAPI(h), mcp.Options{Version: Version, Logger: env.Log, DefaultTimeout: cfg.Limits.DefaultTimeout.D(),
				Runtimes: w.ex.RuntimeList()})
		},
		// The E2B adapter calls the API as MCP does: on a cluster node
		// through the cluster's handler, so that its calls for another
		// node's sessions go there.
		E2B: func(h http.Handler) http.Handler {
			return e2b.New(e2b.Deps{API: mcpAPI(h), Records: w.st, Log: env.Log})
		},
		// Session slots are always the store's (exact on any number of
		// nodes); the rate bucket is the store's on PostgreSQL (shared by
		// possibly many nodes), in memory (nil) on the SQLite file.
		SessionSlots: w.st,
		RateTokens:   storeRate(cfg.Store.URL, w.st),
	})
	registerMetrics(w.m, srv, w.ex, w.mir)
	return srv
}

// storeRate is the API's rate bucket: the store's when url names a
// PostgreSQL store, else nil (the API's in-memory bucket).
func storeRate(url string, st *store.Store) api.RateTokens {
	if url == "" {
		return nil
	}
	return st
}
