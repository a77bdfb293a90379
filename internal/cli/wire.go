package cli

import (
	"context"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/mcp"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/store"
)

// wireServices connects the optional API surfaces to their services. Each
// line is one feature; keep them one line each.
func wireServices(ctx context.Context, env *Env, srv *api.Server, ex *executor.Executor, eg *egressParts, mir *mirror.Mirror, front mirrorFront, st *store.Store) {
	wireEgress(srv, eg)
	wireInstall(ctx, env, srv, ex, eg.sessions, mir, front, st)
	srv.SetSBOM(sbomSource{st: st, mir: mir})
	srv.SetPackages(mirrorPackages{mir})
	srv.Handle("/mcp", mcp.NewHTTPHandler(srv, mcp.Options{Version: Version, Logger: env.Log, DefaultTimeout: env.Config.Limits.DefaultTimeout.D()}))
	srv.Handle("GET /metrics", wireMetrics(srv, ex, mir))
	srv.SetFiles(ex)
	srv.SetLifecycle(ex)
	wireConsole(env, srv, mir, st, ex)
}
