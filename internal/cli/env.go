package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/internal/app"
	"github.com/sandboxapi/sandboxapi/internal/config"
	"github.com/sandboxapi/sandboxapi/internal/reqid"
	"github.com/sandboxapi/sandboxapi/store"
)

// Env is what every command works with (app.Env); commands build it
// with loadEnv.
type Env = app.Env

// stateFlags are taken by every command that touches state, as by serve.
func stateFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config file (default: embedded defaults)", EnvVars: []string{"SANDBOXAPI_CONFIG"}},
		&cli.StringFlag{Name: "data-dir", Usage: "state folder (overrides data_dir)", EnvVars: []string{"SANDBOXAPI_DATA_DIR"}},
	}
}

// listenFlag is serve's listen address; commands that talk to a running
// server take the same flag and variable, so they find it where it was
// started.
func listenFlag() cli.Flag {
	return &cli.StringFlag{Name: "listen", Usage: "the server's listen address (overrides listen)", EnvVars: []string{"SANDBOXAPI_LISTEN"}}
}

// clientFlags are taken by every command that talks to a running server:
// the state flags (the config names the listen address), --listen and
// --url.
func clientFlags() []cli.Flag {
	return append(stateFlags(), listenFlag(),
		&cli.StringFlag{Name: "url", Usage: "server base URL (default: http:// and the listen address, as serve uses it)", EnvVars: []string{"SANDBOXAPI_URL"}})
}

// serverURL is the base URL of the running server: --url (SANDBOXAPI_URL)
// when given, else the listen address that serve would use with the same
// --listen, SANDBOXAPI_LISTEN, --config and SANDBOXAPI_CONFIG, reached on
// loopback when it is a wildcard. Plain HTTP works with TLS on too: the
// server answers loopback peers in plain HTTP on the same port.
func serverURL(c *cli.Context) (string, error) {
	if u := strings.TrimRight(c.String("url"), "/"); u != "" {
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return "", fmt.Errorf("--url %q: want http://HOST:PORT or https://HOST:PORT", u)
		}
		return u, nil
	}
	env, err := loadEnv(c)
	if err != nil {
		return "", err
	}
	return "http://" + app.LoopbackAddr(env.Config.Listen), nil
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
	if u := os.Getenv("SANDBOXAPI_STORE_URL"); u != "" {
		cfg.Store.URL = u
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := c.App.Writer
	ew := c.App.ErrWriter
	return &Env{Config: cfg, Stdout: w, Stderr: ew, Log: newLogger(ew, cfg.LogLevel)}, nil
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
	st, err := env.OpenStore(c.Context)
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(env, st)
}
