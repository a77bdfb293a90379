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

	"github.com/sandboxapi/sandboxapi/store"
)

// ServeMirror serves the mirror alone on listen (`sandboxapi mirror
// serve`, for a serve whose mirror.serve_url points here) until ctx ends
// or SIGTERM/SIGINT arrives, then shuts down within 10 s.
func ServeMirror(ctx context.Context, env *Env, st *store.Store, listen string) error {
	mir, err := env.OpenMirror(ctx, st)
	if err != nil {
		return err
	}
	defer mir.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	hs := &http.Server{Handler: mir.StandaloneHandler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	env.Log.Info("serving the mirror", "listen", ln.Addr().String(), "data_dir", env.Config.DataDir)
	fmt.Fprintf(env.Stderr, "sandboxapi mirror listening on http://%s\n", ln.Addr())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	select {
	case <-ctx.Done():
	case s := <-sigs:
		env.Log.Info("shutting down", "signal", s.String())
	case err := <-errc:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
