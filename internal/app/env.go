// Package app is the composition root of `sandboxapi serve`: it builds
// every service from the config, hands each the small interfaces the
// others declare (the adapters in this package), and runs them as the
// units of one lifecycle.System (units.go). Services never import each other; they meet here.
// internal/cli parses flags and calls this package.
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/buildinfo"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/store"
)

// Version is this binary's version as MCP clients and SBOM documents see
// it (internal/buildinfo).
var Version = buildinfo.Read().Version

// Env is what every command works with: the loaded config, the output
// streams and a logger. The zero value is not usable: set Config and Log.
type Env struct {
	Config *Config
	Stdout io.Writer
	Stderr io.Writer
	Log    *slog.Logger
}

// OpenStore opens the store: store.url's PostgreSQL, or the SQLite file
// under the data dir.
func (e *Env) OpenStore(ctx context.Context) (*store.Store, error) {
	return store.OpenURL(ctx, e.Config.Store.URL, filepath.Join(e.Config.DataDir, "sandboxapi.db"))
}

// MirrorConfig is the mirror's settings, its StoreDir resolved under the
// data dir.
func (e *Env) MirrorConfig() mirror.Config {
	return e.Config.Mirror.Resolve(e.Config.DataDir)
}

// OpenMirror opens the mirror on st.
func (e *Env) OpenMirror(ctx context.Context, st *store.Store) (*mirror.Mirror, error) {
	return mirror.New(ctx, e.MirrorConfig(), st.DB(), e.Log)
}

// LoadPlans reads the plans file (the embedded one by default).
func LoadPlans(cfg *Config) (*api.Plans, error) {
	b, err := readFileOr(cfg.API.PlansFile, configs.Plans)
	if err != nil {
		return nil, err
	}
	return api.LoadPlans(b)
}

// LoadRuntimes reads the runtimes file (the embedded one by default).
func LoadRuntimes(cfg *Config, versions string) (*executor.Runtimes, error) {
	b, err := readFileOr(cfg.Executor.RuntimesFile, configs.Runtimes)
	if err != nil {
		return nil, err
	}
	return executor.LoadRuntimes(b, versions)
}

// executorConfig finds the rootfs and resolves the executor's config.
func executorConfig(cfg *Config) (executor.Config, error) {
	rfs, versions, err := executor.FindRootfs(cfg.Executor.Rootfs, "")
	if err != nil {
		return executor.Config{}, err
	}
	return cfg.ExecutorConfig(rfs, versions)
}

func readFileOr(path string, fallback []byte) ([]byte, error) {
	if path == "" {
		return fallback, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return b, nil
}

// RunscVersion is the gVisor version of the runsc on PATH (or at bin),
// "unknown" when it cannot be told.
func RunscVersion(bin string) string {
	path, err := exec.LookPath(bin)
	if err != nil {
		path = ""
	}
	v, _, err := buildinfo.RunscVersion(path)
	if err != nil {
		return buildinfo.Unknown
	}
	return v
}
