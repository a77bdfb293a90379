package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/cluster"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/buildinfo"
	"github.com/sandboxapi/sandboxapi/internal/httpservice"
	"github.com/sandboxapi/sandboxapi/internal/lifecycle"
	"github.com/sandboxapi/sandboxapi/internal/metrics"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/readiness"
	"github.com/sandboxapi/sandboxapi/store"
	"github.com/sandboxapi/sandboxapi/tlsserve"
)

// parts is what the units of serve build: each field is set by the
// Provision of the unit named beside it, and read only by that unit and
// by units that name it in their needs (which the System provisions
// after it). The zero value with env set is ready for units.
type parts struct {
	env *Env

	db    *store.Store         // store: the handle opened, closed at cleanup
	st    *store.Store         // store: db acting for this node (ForNode)
	m     *metrics.Metrics     // metrics: the one registry of this process
	build buildinfo.Info       // metrics
	eg    *egressParts         // egress
	ecfg  executor.Config      // executor
	ex    *executor.Executor   // executor
	usage *store.UsageWriter   // usage
	mir   *mirror.Mirror       // mirror
	front mirrorFront          // mirror
	plans *api.Plans           // auth
	auth  *api.Authenticator   // auth
	node  *cluster.Node        // cluster; nil (and no such unit) for a single node
	inst  installParts         // installer
	chk   *readiness.Checker   // readiness
	srv   *api.Server          // api
	web   *httpservice.Service // http
}

// units are serve's units. The graph (docs/architecture.md, "Lifecycle";
// TestUnitsNeedWhatTheyRead checks that each names every unit whose parts
// it reads):
//
//	store
//	metrics
//	auth      <- store
//	usage     <- store
//	mirror    <- store
//	egress    <- store, metrics
//	executor  <- store, egress
//	cluster   <- store, executor, metrics, auth       (cluster.node set)
//	sessions  <- executor, usage, mirror, [cluster]
//	installer <- executor, sessions, mirror, store, metrics
//	readiness <- installer, executor, sessions, egress, mirror, store
//	api       <- store, metrics, auth, usage, mirror, egress, executor,
//	             sessions, installer, readiness, [cluster]
//	http      <- api, [cluster]
//
// A single node has no cluster unit, and no unit needs one.
func (p *parts) units() []lifecycle.Unit {
	units := []lifecycle.Unit{p.storeUnit(), p.metricsUnit(), p.authUnit(), p.usageUnit(), p.mirrorUnit(),
		p.egressUnit(), p.executorUnit()}
	if p.env.Config.Cluster.Enabled() {
		units = append(units, p.clusterUnit())
	}
	return append(units, p.sessionsUnit(), p.installerUnit(), p.readinessUnit(), p.apiUnit(), p.httpUnit())
}

// withCluster is needs with "cluster" on a cluster node.
func (p *parts) withCluster(needs ...string) []string {
	if p.env.Config.Cluster.Enabled() {
		return append(needs, "cluster")
	}
	return needs
}

// storeUnit opens the store. Every part acts for this cluster node (""
// for a single node): the sessions it makes are its own, and it changes
// only those.
func (p *parts) storeUnit() lifecycle.Unit {
	return lifecycle.Unit{
		Name: "store",
		Provision: func(ctx context.Context) error {
			db, err := p.env.OpenStore(ctx)
			if err != nil {
				return err
			}
			p.db, p.st = db, db.ForNode(p.env.Config.Cluster.Node)
			return nil
		},
		Cleanup: func(context.Context) error { return p.db.Close() },
	}
}

// metricsUnit makes the one registry of the process, which every part
// that reports is given, and names the running build in it.
func (p *parts) metricsUnit() lifecycle.Unit {
	return lifecycle.Unit{
		Name: "metrics",
		Provision: func(context.Context) error {
			p.m = metrics.New()
			p.build = buildinfo.Read()
			p.build.Runsc = RunscVersion(p.env.Config.Executor.Runsc)
			p.m.SetBuildInfo(p.build.Version, p.build.Revision, p.build.Runsc)
			b := p.build
			p.env.Log.Info("build", "version", b.Version, "revision", b.Revision, "modified", b.Modified, "build_time", b.BuildTime, "runsc", b.Runsc)
			return nil
		},
	}
}

// authUnit loads the plans and makes the API's key resolution, which the
// API and a cluster node share.
func (p *parts) authUnit() lifecycle.Unit {
	return lifecycle.Unit{
		Name:  "auth",
		Needs: []string{"store"},
		Provision: func(context.Context) error {
			plans, err := LoadPlans(p.env.Config)
			if err != nil {
				return err
			}
			p.plans = plans
			p.auth = api.NewAuthenticator(p.env.Config.APIConfig(), plans, storeKeys{p.st})
			return nil
		},
	}
}

// usageUnit starts the usage writer (metering), which writes what is
// queued when it closes.
func (p *parts) usageUnit() lifecycle.Unit {
	return lifecycle.Unit{
		Name:  "usage",
		Needs: []string{"store"},
		Provision: func(context.Context) error {
			p.usage = store.NewUsageWriter(p.st, 200*time.Millisecond, p.env.Log)
			return nil
		},
		Cleanup: func(context.Context) error { p.usage.Close(); return nil },
	}
}

// mirrorUnit opens the mirror and where clients reach its files.
func (p *parts) mirrorUnit() lifecycle.Unit {
	return lifecycle.Unit{
		Name:  "mirror",
		Needs: []string{"store"},
		Provision: func(ctx context.Context) error {
			mir, err := p.env.OpenMirror(ctx, p.st)
			if err != nil {
				return fmt.Errorf("opening mirror: %w", err)
			}
			front, err := newMirrorFront(p.env, mir)
			if err != nil {
				mir.Close()
				return err
			}
			p.mir, p.front = mir, front
			return nil
		},
		Cleanup: func(context.Context) error { p.mir.Close(); return nil },
	}
}

// executorUnit builds the executor with egress's session networking (none
// while egress is off); the sessions unit runs it.
func (p *parts) executorUnit() lifecycle.Unit {
	return lifecycle.Unit{
		Name:  "executor",
		Needs: []string{"store", "egress"},
		Provision: func(context.Context) error {
			ecfg, err := executorConfig(p.env.Config)
			if err != nil {
				return err
			}
			rts, err := LoadRuntimes(p.env.Config, ecfg.VersionsFile)
			if err != nil {
				return err
			}
			var opts []executor.Option
			if p.eg.sessions != nil { // a nil *Sessions is not a nil Network
				opts = append(opts, executor.WithNetwork(p.eg.sessions))
			}
			p.ecfg = ecfg
			p.ex, err = executor.New(ecfg, rts, p.st, p.env.Log, opts...)
			return err
		},
	}
}

// sessionsUnit runs the executor: Start recovers the sessions of the last
// process and starts the warm pool and the reaper; Stop hibernates every
// session. On a cluster node it starts once the node holds its lease and
// stops before the node gives it up (having handed its sessions over). It
// stops before the usage writer and the mirror close: a call the HTTP
// grace period cut short ends with its sandbox, still metered and not
// against a closed mirror.
func (p *parts) sessionsUnit() lifecycle.Unit {
	return lifecycle.Unit{
		Name:  "sessions",
		Needs: p.withCluster("executor", "usage", "mirror"),
		Start: func(ctx context.Context) error { return p.ex.Start(ctx) },
		Stop: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			return p.ex.Stop(ctx)
		},
	}
}

// httpUnit serves the API on the listener (TLS when configured), behind
// the drain gate and, on a cluster node, the node's handler. Its Stop
// drains first: /readyz goes red and new work is refused while the
// listener stays open, so a load balancer notices before connections
// close.
func (p *parts) httpUnit() lifecycle.Unit {
	return lifecycle.Unit{
		Name:  "http",
		Needs: p.withCluster("api"),
		Provision: func(context.Context) error {
			cfg := p.env.Config
			drain := &drainGate{next: p.srv, ownSessions: p.node != nil}
			var handler http.Handler = drain
			if p.node != nil {
				// In front of the drain gate: a draining node still
				// forwards calls and places new sessions on the other nodes.
				handler = p.node.Handler(drain)
			}
			p.web = &httpservice.Service{
				Server: &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: cfg.Server.ReadTimeout.D(), IdleTimeout: 2 * time.Minute},
				Listen: func(ctx context.Context) (net.Listener, error) { return listen(ctx, p.env) },
				Drain: func() {
					p.srv.SetReady(false)
					if p.node != nil {
						// First: other nodes place nothing here and wait for
						// the hand-over instead of forwarding calls here.
						p.node.Drain()
					}
					drain.start()
				},
				DrainDelay:    cfg.Server.DrainDelay.D(),
				ShutdownGrace: cfg.Server.ShutdownGrace.D(),
				Log:           p.env.Log,
			}
			return nil
		},
		Start: func(ctx context.Context) error { return p.web.Start(ctx) },
		Stop:  func(ctx context.Context) error { return p.web.Stop(ctx) },
	}
}

// listen opens serve's listener, naming the setting to change when the
// address is taken.
func listen(ctx context.Context, env *Env) (net.Listener, error) {
	cfg := env.Config
	ln, err := tlsserve.Listen(ctx, cfg.Listen, cfg.DataDir, cfg.TLS, env.Log)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("listening on %s: the address is in use: start this one on another with --listen ADDR (SANDBOXAPI_LISTEN, listen in the config): %w", cfg.Listen, err)
	}
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	return ln, nil
}
