package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/buildinfo"
	"github.com/sandboxapi/sandboxapi/internal/httpservice"
	"github.com/sandboxapi/sandboxapi/internal/lifecycle"
	"github.com/sandboxapi/sandboxapi/internal/metrics"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/store"
	"github.com/sandboxapi/sandboxapi/tlsserve"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// storeKeys adapts the store to api.Keys.
type storeKeys struct{ st *store.Store }

func (k storeKeys) Lookup(ctx context.Context, hash string) (string, string, string, error) {
	row, err := k.st.KeyByHash(ctx, hash)
	if errors.Is(err, store.ErrNotFound) || (err == nil && row.Kind == store.KindAdmin) {
		// An admin key opens the console only: to the API it is unknown.
		return "", "", "", api.ErrUnknownKey
	}
	if err != nil {
		return "", "", "", err
	}
	return row.ID, row.Name, row.Plan, nil
}

// storeMeter adapts the usage writer to api.Meter.
type storeMeter struct{ w *store.UsageWriter }

func (m storeMeter) Record(u api.Usage) {
	m.w.Record(store.UsageRow{KeyID: u.KeyID, Route: u.Route, Status: u.Status, DurationMS: u.Duration.Milliseconds(),
		BytesIn: u.BytesIn, BytesOut: u.BytesOut, ExecMS: u.ExecMillis, At: u.At})
}

// Serve runs until ctx ends or a signal arrives: SIGTERM/SIGINT drain
// (readiness goes red, running calls get the grace period, then everything
// is torn down); a second signal exits at once.
//
// Every long-lived part runs in one lifecycle group (docs/operations.md,
// "Shutdown and restarts"): what is opened while wiring (the
// store, egress, the usage writer, the mirror) is pushed on its cleanup
// stack as it opens; the executor, the readiness checks and the HTTP
// server start in that order once everything is built. Everything stops
// in reverse, and a failed start unwinds what had started.
func Serve(ctx context.Context, env *Env) error {
	cfg := env.Config
	log := env.Log
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}
	// Before anything starts: a second serve on this host must not
	// recover (kill) the first one's sandboxes or rebuild its firewall.
	claim, err := claimInstance(cfg, hostLockDir)
	if err != nil {
		return err
	}
	defer claim.release()
	g := &lifecycle.Group{Log: log}
	defer func() {
		if serr := g.Stop(context.WithoutCancel(ctx)); serr != nil {
			log.Error("stopping", "err", serr)
		}
	}()
	st, err := env.OpenStore(ctx)
	if err != nil {
		return err
	}
	g.Cleanup("store", func(context.Context) error { return st.Close() })
	// Every part acts for this cluster node ("" for a single node): the
	// sessions it makes are its own, and it changes only those.
	st = st.ForNode(cfg.Cluster.Node)
	plans, err := LoadPlans(cfg)
	if err != nil {
		return err
	}
	ecfg, err := executorConfig(cfg)
	if err != nil {
		return err
	}
	rts, err := LoadRuntimes(cfg, ecfg.VersionsFile)
	if err != nil {
		return err
	}
	ex, err := executor.New(ecfg, rts, st, log)
	if err != nil {
		return err
	}
	m := metrics.New() // the one registry of this process
	// The cluster node (nil for a single node).
	node, err := wireCluster(env, st, ex, m)
	if err != nil {
		return err
	}
	eg, err := setupEgress(ctx, env, ex, st, m)
	if err != nil {
		return err
	}
	g.Cleanup("egress", func(context.Context) error { eg.stop(); return nil })
	usage := store.NewUsageWriter(st, 200*time.Millisecond, log)
	g.Cleanup("usage", func(context.Context) error { usage.Close(); return nil })
	build := buildinfo.Read()
	build.Runsc = RunscVersion(ecfg.Runsc)
	m.SetBuildInfo(build.Version, build.Revision, build.Runsc)
	log.Info("build", "version", build.Version, "revision", build.Revision, "modified", build.Modified, "build_time", build.BuildTime, "runsc", build.Runsc)

	mir, err := mirror.New(ctx, env.MirrorConfig(), st.DB(), log)
	if err != nil {
		return fmt.Errorf("opening mirror: %w", err)
	}
	g.Cleanup("mirror", func(context.Context) error { mir.Close(); return nil })
	front, err := newMirrorFront(env, mir)
	if err != nil {
		return err
	}
	if node != nil {
		// Registers before the executor starts and gives its lease up
		// after the executor has handed its sessions over.
		g.Add("cluster", node)
	}
	// Stopped before the mirror and the writers: a call the grace period
	// cut short ends with its sandbox, not against a closed mirror.
	g.Add("executor", lifecycle.Funcs{StartFunc: ex.Start, StopFunc: func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return ex.Stop(ctx)
	}})
	srv := wireServices(ctx, env, g, wiring{plans: plans, ex: ex, st: st, mir: mir, front: front, usage: usage, trail: eg.trail, sessions: eg.sessions, keys: eg.keys, m: m, build: build, node: node})
	if node != nil {
		// Another key's session, or a call the API will refuse, is the
		// API's to answer here: nothing moves, no node is named.
		node.SetCaller(srv.CallerKeyID)
	}
	drain := &drainGate{next: srv, ownSessions: node != nil}
	var handler http.Handler = drain
	if node != nil {
		// In front of the drain gate: a draining node still forwards
		// calls and places new sessions on the other nodes.
		handler = node.Handler(drain)
	}
	web := &httpservice.Service{
		Server: &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: cfg.Server.ReadTimeout.D(), IdleTimeout: 2 * time.Minute},
		Listen: func(ctx context.Context) (net.Listener, error) {
			ln, err := tlsserve.Listen(ctx, cfg.Listen, cfg.DataDir, cfg.TLS, env.Log)
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("listening on %s: the address is in use: start this one on another with --listen ADDR (SANDBOXAPI_LISTEN, listen in the config): %w", cfg.Listen, err)
			}
			if err != nil {
				return nil, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
			}
			return ln, nil
		},
		// /readyz goes red and new work is refused while the listener
		// stays open, so a load balancer notices before connections close.
		Drain: func() {
			srv.SetReady(false)
			if node != nil {
				// First: other nodes place nothing here and wait for the
				// hand-over instead of forwarding calls here.
				node.Drain()
			}
			drain.start()
		},
		DrainDelay:    cfg.Server.DrainDelay.D(),
		ShutdownGrace: cfg.Server.ShutdownGrace.D(),
		Log:           log,
	}
	g.Add("http", web)
	if err := g.Start(ctx); err != nil {
		return err
	}
	log.Info("serving", "listen", web.Addr().String(), "data_dir", cfg.DataDir, "rootfs", ecfg.Rootfs)
	scheme := "http"
	if cfg.TLS.Enabled() {
		scheme = "https"
	}
	fmt.Fprintf(env.Stderr, "sandboxapi listening on %s://%s\n", scheme, web.Addr())

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	var serveErr error
	select {
	case <-ctx.Done():
	case s := <-sigs:
		log.Info("shutting down", "signal", s.String())
	case serveErr = <-web.Done():
		web.Failed(serveErr)
	}
	// A second signal, at any point of the shutdown below, exits at once.
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-sigs:
			log.Warn("second signal: exiting now")
			os.Exit(2)
		case <-stopped:
		}
	}()
	if err := g.Stop(context.WithoutCancel(ctx)); err != nil {
		log.Error("stopping", "err", err)
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// storeUsage adapts the store to api.UsageSource.
type storeUsage struct {
	st *store.Store
	w  *store.UsageWriter
}

func (u storeUsage) UsageTotals(ctx context.Context, keyID string, since time.Time) ([]wire.UsageTotal, error) {
	u.w.Flush(ctx) // the caller's own latest requests count
	rows, err := u.st.UsageTotals(ctx, keyID, since)
	if err != nil {
		return nil, err
	}
	out := make([]wire.UsageTotal, 0, len(rows))
	for _, r := range rows {
		out = append(out, wire.UsageTotal(r))
	}
	return out, nil
}
