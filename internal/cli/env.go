package cli

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/cluster"
	"github.com/sandboxapi/sandboxapi/internal/app"
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

// loadEnv loads the config named by --config (or the embedded default)
// with the --data-dir, --listen, SANDBOXAPI_STORE_URL,
// SANDBOXAPI_CLUSTER_SECRET and SANDBOXAPI_CLUSTER_PREVIOUS_SECRETS
// overrides.
func loadEnv(c *cli.Context) (*Env, error) {
	o := app.Overrides{DataDir: c.String("data-dir"), StoreURL: os.Getenv("SANDBOXAPI_STORE_URL"),
		ClusterSecret: os.Getenv(cluster.SecretEnv), ClusterPreviousSecrets: os.Getenv(cluster.PreviousSecretsEnv)}
	if c.IsSet("listen") || os.Getenv("SANDBOXAPI_LISTEN") != "" {
		o.Listen = c.String("listen")
	}
	cfg, err := app.LoadConfigWith(c.String("config"), o)
	if err != nil {
		return nil, err
	}
	return &Env{Config: cfg, Stdout: c.App.Writer, Stderr: c.App.ErrWriter, Log: newLogger(c.App.ErrWriter, cfg.LogLevel)}, nil
}

// newLogger logs JSON lines at level to w, each stamped with the request
// id its context carries (reqid.Handler).
func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(reqid.Handler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})))
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
