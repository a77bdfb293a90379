package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/internal/lifecycle"
	"github.com/sandboxapi/sandboxapi/store"

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
// is torn down); a second signal exits at once; SIGPIPE is caught, so a
// broken log pipe fails the write instead of ending the server.
//
// Every long-lived part is a unit of one lifecycle.System (units.go,
// docs/architecture.md "Lifecycle"): each declares the units it needs, all
// are provisioned and validated before any starts, they start in the
// order of their needs and stop in reverse, and a failed start unwinds
// what had started.
func Serve(ctx context.Context, env *Env) error {
	cfg := env.Config
	log := env.Log
	// A log reader that goes away (a pipe into a supervisor or tee that
	// died) must not end the server at its next log line, sandboxes and
	// all: Go's default for a write to a broken stdout or stderr is to
	// exit on SIGPIPE. Asked for (not ignored, which the sandboxes and
	// tools it starts would inherit), the signal is only noted and the
	// write fails; the server goes on.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
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
	p := &parts{env: env}
	sys := &lifecycle.System{Log: log}
	sys.Add(p.units()...)
	defer func() {
		if serr := sys.Stop(context.WithoutCancel(ctx)); serr != nil {
			log.Error("stopping", "err", serr)
		}
	}()
	if err := sys.Start(ctx); err != nil {
		return err
	}
	log.Info("serving", "listen", p.web.Addr().String(), "data_dir", cfg.DataDir, "rootfs", p.ecfg.Rootfs)
	scheme := "http"
	if cfg.TLS.Enabled() {
		scheme = "https"
	}
	fmt.Fprintf(env.Stderr, "sandboxapi listening on %s://%s\n", scheme, p.web.Addr())

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	var serveErr error
	select {
	case <-ctx.Done():
	case s := <-sigs:
		log.Info("shutting down", "signal", s.String())
	case serveErr = <-p.web.Done():
		p.web.Failed(serveErr)
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
	if err := sys.Stop(context.WithoutCancel(ctx)); err != nil {
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
