package cli

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

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/store"
)

// mirrorServeCommand runs the mirror as a service of its own: the services
// apart, with `serve` pointed at it by mirror.serve_url. It shares the data
// dir (the store and the blobs) with `serve` and the curation commands.
func mirrorServeCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "serve the mirror alone (pip simple index, npm registry) for a sandboxapi serve whose mirror.serve_url points here",
		Flags: append(stateFlags(), &cli.StringFlag{Name: "listen", Value: "127.0.0.1:8081", Usage: "host:port to serve on"}),
		Action: func(c *cli.Context) error {
			return withStore(c, func(env *Env, st *store.Store) error {
				return mirrorServe(c.Context, env, st, c.String("listen"))
			})
		},
	}
}

func mirrorServe(ctx context.Context, env *Env, st *store.Store, listen string) error {
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
