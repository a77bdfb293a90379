package app

// The root document of sandboxapi.yaml: the composition root composes each
// service's own section type, so that internal/config (the strict decoding
// and the shared sections) imports no service.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/cluster"
	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/installer"
	"github.com/sandboxapi/sandboxapi/internal/config"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/readiness"
	"github.com/sandboxapi/sandboxapi/store"
)

// Config is the root of sandboxapi.yaml.
type Config struct {
	Version  string `yaml:"version"`
	Listen   string `yaml:"listen"`
	DataDir  string `yaml:"data_dir"`
	LogLevel string `yaml:"log_level"`
	// Store is where shared state lives: keys, usage, sessions,
	// executions, egress audit, the mirror catalogue.
	Store    Store         `yaml:"store"`
	Server   config.Server `yaml:"server"`
	Executor Executor      `yaml:"executor"`
	Limits   config.Limits `yaml:"limits"`
	API      API           `yaml:"api"`
	Mirror   mirror.Config `yaml:"mirror"`
	Egress   EgressConfig  `yaml:"egress"`
	// Readiness times the readiness checks; Installer configures installs.
	Readiness readiness.Config `yaml:"readiness"`
	Installer installer.Config `yaml:"installer"`
	// TLS serves HTTPS on listen (see tls.go).
	TLS TLS `yaml:"tls"`
	// Cluster makes this process one node of many that share a PostgreSQL
	// store (owned by package cluster; empty node: a single node).
	Cluster Cluster `yaml:"cluster"`
}

// Cluster holds the cluster node settings (owned by package cluster).
type Cluster = cluster.Settings

// EgressConfig switches the egress proxy and per-session sandbox networks
// on (Enabled) and configures them. Disabled, sessions that ask for
// network are refused and the rest is not validated.
type EgressConfig struct {
	Enabled       bool `yaml:"enabled"`
	egress.Config `yaml:",inline"`
}

// Store selects the database (owned by the store).
type Store = store.Settings

// API holds authentication and plan settings (owned by the API).
type API = api.Settings

// Executor holds sandbox runtime settings (owned by the executor).
type Executor = executor.Settings

// LoadConfig reads path, or the embedded default when path is empty.
func LoadConfig(path string) (*Config, error) {
	c, name, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("validating %s: %w", name, err)
	}
	return c, nil
}

// ParseConfig decodes YAML on top of the defaults and validates the result.
func ParseConfig(b []byte, name string) (*Config, error) {
	c, err := decodeOnDefaults(b, name)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("validating %s: %w", name, err)
	}
	return c, nil
}

// readConfig decodes path (the embedded default when empty) on top of the
// defaults, without validating, and names its source.
func readConfig(path string) (*Config, string, error) {
	if path == "" {
		c, err := decodeOnDefaults(config.DefaultYAML(), "embedded default")
		return c, "embedded default", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, path, fmt.Errorf("reading config: %w", err)
	}
	c, err := decodeOnDefaults(b, path)
	return c, path, err
}

func decodeOnDefaults(b []byte, name string) (*Config, error) {
	c := &Config{Mirror: mirror.DefaultConfig(), Egress: EgressConfig{Config: egress.DefaultConfig()},
		Readiness: readiness.DefaultConfig(), Installer: installer.DefaultConfig()}
	if err := config.Decode(config.DefaultYAML(), c); err != nil {
		return nil, fmt.Errorf("decoding embedded default: %w", err)
	}
	if err := config.Decode(b, c); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", name, err)
	}
	return c, nil
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Version != "v1" {
		bad("version: must be v1, got %q", c.Version)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen: %q is not host:port", c.Listen)
	}
	if c.DataDir == "" || !filepath.IsAbs(c.DataDir) {
		bad("data_dir: must be an absolute path, got %q", c.DataDir)
	}
	errs = append(errs, config.Prefixed("store.", c.Store.Validate())...)
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level: must be debug, info, warn or error, got %q", c.LogLevel)
	}
	if c.Server.MaxBodyBytes < 1024 {
		bad("server.max_body_bytes: must be at least 1024")
	}
	if c.Server.ReadTimeout.D() < time.Second {
		bad("server.read_timeout: must be at least 1s")
	}
	if c.Server.ShutdownGrace.D() < 0 || c.Server.DrainDelay.D() < 0 {
		bad("server.shutdown_grace and server.drain_delay: must not be negative")
	}
	if d := c.Server.StreamHeartbeat.D(); d < time.Second || d > 5*time.Minute {
		bad("server.stream_heartbeat: must be from 1s to 5m, got %s", d)
	}
	errs = append(errs, config.Prefixed("executor.", c.Executor.Validate())...)
	l := c.Limits
	if l.DefaultTimeout <= 0 || l.MaxTimeout < l.DefaultTimeout {
		bad("limits: need 0 < default_timeout <= max_timeout")
	}
	if l.DefaultIdleTTL <= 0 || l.MaxIdleTTL < l.DefaultIdleTTL {
		bad("limits: need 0 < default_idle_ttl <= max_idle_ttl")
	}
	if l.MaxOutputBytes < 1024 {
		bad("limits.max_output_bytes: must be at least 1024")
	}
	if l.MaxCodeBytes < 1024 || l.MaxStdinBytes < 0 {
		bad("limits: max_code_bytes must be at least 1024 and max_stdin_bytes not negative")
	}
	if l.MaxFileBytes < 0 {
		bad("limits.max_file_bytes: must not be negative (0: 64 MiB)")
	}
	if err := c.Mirror.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("mirror: %w", err))
	}
	if err := c.Readiness.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Installer.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Egress.Enabled {
		if err := c.Egress.Config.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("egress: %w", err))
		}
		if err := c.Egress.Config.CheckDisjoint("installer.pool", c.Installer.Pool); err != nil {
			errs = append(errs, fmt.Errorf("egress: %w", err))
		}
	}
	errs = append(errs, config.Prefixed("api.", c.API.Validate())...)
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, config.Prefixed("cluster.", c.Cluster.Validate())...)
	if c.Cluster.Enabled() && c.Store.URL == "" {
		bad("cluster.node: needs a PostgreSQL store shared by every node (store.url or SANDBOXAPI_STORE_URL)")
	}
	return errors.Join(errs...)
}

// ExecutorConfig resolves the executor's section and the limits it
// shares into the executor's Config; rootfs and versions are what
// executor.FindRootfs found.
func (c *Config) ExecutorConfig(rootfs, versions string) (executor.Config, error) {
	guest := c.Executor.GuestBinary
	if guest != "" && !filepath.IsAbs(guest) {
		abs, err := filepath.Abs(guest)
		if err != nil {
			return executor.Config{}, fmt.Errorf("executor.guest_binary: %w", err)
		}
		guest = abs
	}
	ec, err := c.Executor.Config(c.DataDir, rootfs, versions, guest, executor.SharedLimits{
		DefaultTimeout: c.Limits.DefaultTimeout.D(), MaxTimeout: c.Limits.MaxTimeout.D(),
		DefaultIdleTTL: c.Limits.DefaultIdleTTL.D(), MaxIdleTTL: c.Limits.MaxIdleTTL.D(),
		MaxOutputBytes: c.Limits.MaxOutputBytes, MaxFileBytes: c.Limits.MaxFileBytes,
		ReapInterval: c.Server.ReapInterval.D(),
	})
	if err != nil {
		return executor.Config{}, fmt.Errorf("executor.%w", err)
	}
	return ec, nil
}

// APIConfig resolves the server and limits sections into the API's Config.
func (c *Config) APIConfig() api.Config {
	return api.Config{
		MaxBodyBytes: c.Server.MaxBodyBytes, MaxCodeBytes: c.Limits.MaxCodeBytes, MaxStdinBytes: c.Limits.MaxStdinBytes,
		MaxIdleTTL: c.Limits.MaxIdleTTL.D(), DefaultTimeout: c.Limits.DefaultTimeout.D(),
		StreamHeartbeat: c.Server.StreamHeartbeat.D(), Gateway: api.GatewayConfig{Secret: c.API.GatewaySecret},
	}
}
