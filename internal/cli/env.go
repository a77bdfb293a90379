package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/internal/config"
	"github.com/sandboxapi/sandboxapi/internal/reqid"
	"github.com/sandboxapi/sandboxapi/store"
)

// Env is what every command works with: the loaded config, the output
// streams and a logger. Commands build it with loadEnv.
type Env struct {
	Config *config.Config
	Stdout io.Writer
	Stderr io.Writer
	Log    *slog.Logger
}

// stateFlags are taken by every command that touches state, as by serve.
func stateFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config file (default: embedded defaults)", EnvVars: []string{"SANDBOXAPI_CONFIG"}},
		&cli.StringFlag{Name: "data-dir", Usage: "state folder (overrides data_dir)", EnvVars: []string{"SANDBOXAPI_DATA_DIR"}},
	}
}

// loadEnv loads the config named by --config (or the embedded default) and
// applies --data-dir and --listen overrides.
func loadEnv(c *cli.Context) (*Env, error) {
	cfg, err := config.Load(c.String("config"))
	if err != nil {
		return nil, err
	}
	if d := c.String("data-dir"); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("resolving --data-dir: %w", err)
		}
		cfg.DataDir = abs
	}
	if c.IsSet("listen") || os.Getenv("SANDBOXAPI_LISTEN") != "" {
		if l := c.String("listen"); l != "" {
			cfg.Listen = l
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := c.App.Writer
	ew := c.App.ErrWriter
	return &Env{Config: cfg, Stdout: w, Stderr: ew, Log: newLogger(ew, cfg.LogLevel)}, nil
}

// openStore opens the SQLite store under the data dir.
func (e *Env) openStore(ctx context.Context) (*store.Store, error) {
	return store.Open(ctx, filepath.Join(e.Config.DataDir, "sandboxapi.db"))
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(requestIDHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})})
}

// requestIDHandler stamps the request id that a line's context carries
// (internal/reqid) on every line logged with one, unless the line names it
// already: executor, installer and egress lines written on a request's
// behalf can then be found by the id the client saw.
type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := reqid.From(ctx); id != "" {
		named := false
		r.Attrs(func(a slog.Attr) bool {
			named = a.Key == "request_id"
			return !named
		})
		if !named {
			r = r.Clone()
			r.AddAttrs(slog.String("request_id", id))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(as)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}

// withStore loads the env, opens the store, runs fn and closes the store.
func withStore(c *cli.Context, fn func(env *Env, st *store.Store) error) error {
	env, err := loadEnv(c)
	if err != nil {
		return err
	}
	st, err := env.openStore(c.Context)
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(env, st)
}
