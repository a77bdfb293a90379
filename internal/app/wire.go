package app

import (
	"context"
	"net/http"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/e2b"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/lifecycle"
	"github.com/sandboxapi/sandboxapi/internal/seal"
	"github.com/sandboxapi/sandboxapi/mcp"
	"github.com/sandboxapi/sandboxapi/store"
)

var _ lifecycle.Component = (*executor.Executor)(nil)

var (
	_ api.SessionSlots   = (*store.Store)(nil)
	_ api.RateTokens     = (*store.Store)(nil)
	_ api.Sandboxes      = apiSandboxes{}
	_ api.SessionNetwork = (*executor.Networks)(nil)
)

// apiSandboxes is the executor as the API sees it: its sessions, and its
// network role's answer to whether sessions can have network.
type apiSandboxes struct{ *executor.Executor }

func (a apiSandboxes) NetworkAvailable() bool { return a.Networks().NetworkAvailable() }

// credentialSealer is the API's sealer: nil (credentials refused) while
// egress is off.
func credentialSealer(k *seal.Keys) api.CredentialSealer {
	if k == nil {
		return nil
	}
	return k
}

// apiUnit builds the API with every dependency it serves (one field each),
// the console, MCP and the E2B adapter over it, and its gauges in the
// metrics.
func (p *parts) apiUnit() lifecycle.Unit {
	return lifecycle.Unit{
		Name:  "api",
		Needs: p.withCluster("store", "metrics", "auth", "usage", "mirror", "egress", "executor", "sessions", "installer", "readiness"),
		Provision: func(ctx context.Context) error {
			// Slots this node's previous process reserved for creates died
			// with it.
			if _, err := p.st.ReleasePendingSlots(ctx); err != nil {
				p.env.Log.Warn("releasing pending session slots", "err", err)
			}
			p.srv = p.newAPI()
			registerMetrics(p.m, p.srv, p.ex, p.mir)
			return nil
		},
	}
}

func (p *parts) newAPI() *api.Server {
	cfg, env := p.env.Config, p.env
	ready := readinessReporter{p.chk}
	build := p.build
	var sandboxes api.Sandboxes = apiSandboxes{p.ex}
	mcpAPI := func(h http.Handler) http.Handler { return h }
	if p.node != nil {
		sandboxes = clusterSandboxes{apiSandboxes: apiSandboxes{p.ex}, node: p.node}
		mcpAPI = p.node.Handler // MCP's calls for other nodes' sessions go there
	}
	return api.New(cfg.APIConfig(), api.Deps{
		Sandboxes:   sandboxes,
		Plans:       p.plans,
		Auth:        p.auth,
		Log:         env.Log,
		Meter:       storeMeter{p.usage},
		Observer:    p.m,
		Build:       &build,
		Readiness:   ready,
		EgressLog:   p.eg.trail,
		Credentials: credentialSealer(p.eg.keys),
		Usage:       storeUsage{st: p.st, w: p.usage},
		Files:       p.ex.Files(),
		Lifecycle:   p.ex.Durable(),
		Kernels:     p.ex.Kernels(),
		Network:     p.ex.Networks(),
		Processes:   p.ex.Processes(),
		SBOMs:       sbomSource{st: p.st, mir: p.mir},
		Installer:   p.inst.api,
		Gate:        ready,
		Packages:    mirrorPackages{p.mir},
		Mirror:      p.m.InstrumentMirror(p.front.handler),
		Metrics:     p.m.Handler(),
		Console:     newConsole(env, ready, p.mir, p.st, p.ex),
		MCP: func(h http.Handler) http.Handler {
			return mcp.NewHTTPHandler(mcpAPI(h), mcp.Options{Version: Version, Logger: env.Log, DefaultTimeout: cfg.Limits.DefaultTimeout.D(),
				Runtimes: p.ex.RuntimeList()})
		},
		// The E2B adapter calls the API as MCP does: on a cluster node
		// through the cluster's handler, so that its calls for another
		// node's sessions go there.
		E2B: func(h http.Handler) http.Handler {
			return e2b.New(e2b.Deps{API: mcpAPI(h), Records: p.st, Log: env.Log})
		},
		// Session slots are always the store's (exact on any number of
		// nodes); the rate bucket is the store's on PostgreSQL (shared by
		// possibly many nodes), in memory (nil) on the SQLite file.
		SessionSlots: p.st,
		RateTokens:   storeRate(cfg.Store.URL, p.st),
	})
}

// storeRate is the API's rate bucket: the store's when url names a
// PostgreSQL store, else nil (the API's in-memory bucket).
func storeRate(url string, st *store.Store) api.RateTokens {
	if url == "" {
		return nil
	}
	return st
}
