package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/buildinfo"
	"github.com/sandboxapi/sandboxapi/internal/config"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/store"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

func serveCommand() *cli.Command {
	flags := append(stateFlags(), listenFlag())
	return &cli.Command{
		Name:  "serve",
		Usage: "run the API, executor and the other services in one process",
		Flags: flags,
		Action: func(c *cli.Context) error {
			env, err := loadEnv(c)
			if err != nil {
				return err
			}
			return serve(c.Context, env)
		},
	}
}

func loadPlans(cfg *config.Config) (*api.Plans, error) {
	b, err := readFileOr(cfg.API.PlansFile, configs.Plans)
	if err != nil {
		return nil, err
	}
	return api.LoadPlans(b)
}

func loadRuntimes(cfg *config.Config, versions string) (*executor.Runtimes, error) {
	b, err := readFileOr(cfg.Executor.RuntimesFile, configs.Runtimes)
	if err != nil {
		return nil, err
	}
	return executor.LoadRuntimes(b, versions)
}

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

// serve runs until ctx ends or a signal arrives: SIGTERM/SIGINT drain
// (readiness goes red, running calls get the grace period, then everything
// is torn down); a second signal exits at once.
func serve(ctx context.Context, env *Env) error {
	cfg := env.Config
	log := env.Log
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}
	st, err := env.openStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	plans, err := loadPlans(cfg)
	if err != nil {
		return err
	}
	ecfg, err := executorConfig(cfg)
	if err != nil {
		return err
	}
	rts, err := loadRuntimes(cfg, ecfg.VersionsFile)
	if err != nil {
		return err
	}
	ex, err := executor.New(ecfg, rts, st, log)
	if err != nil {
		return err
	}
	stopEgress, err := setupEgress(ctx, env, ex, st)
	if err != nil {
		return err
	}
	defer stopEgress()
	if err := ex.Start(ctx); err != nil {
		return err
	}
	usage := store.NewUsageWriter(st, 200*time.Millisecond, log)
	defer usage.Close()

	srv := api.New(cfg.APIConfig(), ex, storeKeys{st}, plans, storeMeter{usage}, log)
	srv.SetUsageSource(storeUsage{st: st, w: usage})
	build := buildinfo.Read()
	build.Runsc = runscVersion(ecfg.Runsc)
	srv.SetBuildInfo(build)
	processMetrics().SetBuildInfo(build.Version, build.Revision, build.Runsc)
	log.Info("build", "version", build.Version, "revision", build.Revision, "modified", build.Modified, "build_time", build.BuildTime, "runsc", build.Runsc)

	mir, err := mirror.New(ctx, mirrorConfig(env), st.DB(), log)
	if err != nil {
		_ = ex.Stop(context.Background())
		return fmt.Errorf("opening mirror: %w", err)
	}
	defer mir.Close()
	front, err := newMirrorFront(env, mir)
	if err != nil {
		_ = ex.Stop(context.Background())
		return err
	}
	srv.Handle("/mirror/", processMetrics().InstrumentMirror(front.handler))
	wireServices(ctx, env, srv, ex, mir, front, st)

	ln, err := listen(ctx, env) // TLS per cfg.TLS (tls.go)
	if err != nil {
		_ = ex.Stop(context.Background())
		return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	drain := &drainGate{next: srv}
	hs := &http.Server{Handler: drain, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: cfg.Server.ReadTimeout.D(), IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("serving", "listen", ln.Addr().String(), "data_dir", cfg.DataDir, "rootfs", ecfg.Rootfs)
	scheme := "http"
	if cfg.TLS.Enabled() {
		scheme = "https"
	}
	fmt.Fprintf(env.Stderr, "sandboxapi listening on %s://%s\n", scheme, ln.Addr())

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	var serveErr error
	select {
	case <-ctx.Done():
	case s := <-sigs:
		log.Info("shutting down", "signal", s.String())
	case serveErr = <-errc:
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
	// Drain: /readyz goes red and new work is refused while the listener
	// stays open, so a load balancer notices before connections close.
	srv.SetReady(false)
	drain.start()
	if d := cfg.Server.DrainDelay.D(); d > 0 && serveErr == nil {
		log.Info("draining", "delay", d.String())
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	grace, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownGrace.D())
	defer cancel()
	if err := hs.Shutdown(grace); err != nil {
		log.Warn("grace period over, closing connections", "err", err)
		_ = hs.Close()
	}
	stopCtx, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	if err := ex.Stop(stopCtx); err != nil {
		log.Error("stopping executor", "err", err)
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
