// Package config holds the root configuration of sandboxapi: one YAML file,
// decoded into typed structs with unknown fields rejected and every problem
// reported at once. Config is data only.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/cluster"
	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/installer"
	"github.com/sandboxapi/sandboxapi/internal/duration"
	"github.com/sandboxapi/sandboxapi/internal/size"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/readiness"
	"github.com/sandboxapi/sandboxapi/store"
)

var defaultYAML = configs.Server

// DefaultYAML returns the embedded default configuration text.
func DefaultYAML() []byte { return bytes.Clone(defaultYAML) }

// Duration is the shared YAML duration.
type Duration = duration.Duration

// Config is the root of sandboxapi.yaml.
type Config struct {
	Version  string `yaml:"version"`
	Listen   string `yaml:"listen"`
	DataDir  string `yaml:"data_dir"`
	LogLevel string `yaml:"log_level"`
	// Store is where shared state lives: keys, usage, sessions,
	// executions, egress audit, the mirror catalogue.
	Store    Store         `yaml:"store"`
	Server   Server        `yaml:"server"`
	Executor Executor      `yaml:"executor"`
	Limits   Limits        `yaml:"limits"`
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

// Server holds HTTP server settings.
type Server struct {
	MaxBodyBytes  int64    `yaml:"max_body_bytes"`
	ReadTimeout   Duration `yaml:"read_timeout"`
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	DrainDelay    Duration `yaml:"drain_delay"`
	ReapInterval  Duration `yaml:"reap_interval"`
	// StreamHeartbeat is how long a streamed execution (Server-Sent
	// Events) may be silent before the server sends a comment line
	// (": keepalive"), so that clients and proxies with read timeouts keep
	// a quiet program's stream. From 1s to 5m; the default (5s) stays
	// under common client read timeouts (Python requests with timeout=10).
	StreamHeartbeat Duration `yaml:"stream_heartbeat"`
}

// Executor holds sandbox runtime settings (owned by the executor).
type Executor = executor.Settings

// Limits holds per-call and per-session limits.
type Limits struct {
	DefaultTimeout Duration `yaml:"default_timeout"`
	MaxTimeout     Duration `yaml:"max_timeout"`
	// MaxOutputBytes caps stdout and stderr each (not their sum): a run
	// keeps up to this many bytes of each, and the first stream to go over
	// ends the run with status output_limit and truncated true (the other
	// keeps what it had). A failed compile step's output (on stderr) is
	// also cut at 256 KiB.
	MaxOutputBytes int64    `yaml:"max_output_bytes"`
	DefaultIdleTTL Duration `yaml:"default_idle_ttl"`
	MaxIdleTTL     Duration `yaml:"max_idle_ttl"`
	MaxCodeBytes   int64    `yaml:"max_code_bytes"`
	MaxStdinBytes  int64    `yaml:"max_stdin_bytes"`
	MaxFileBytes   int64    `yaml:"max_file_bytes"` // files API upload and download
}

// Load reads path, or the embedded default when path is empty.
func Load(path string) (*Config, error) {
	c, name, err := read(path)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("validating %s: %w", name, err)
	}
	return c, nil
}

// Parse decodes YAML on top of the defaults and validates the result.
func Parse(b []byte, name string) (*Config, error) {
	c, err := decodeOnDefaults(b, name)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("validating %s: %w", name, err)
	}
	return c, nil
}

// read decodes path (the embedded default when empty) on top of the
// defaults, without validating, and names its source.
func read(path string) (*Config, string, error) {
	if path == "" {
		c, err := decodeOnDefaults(defaultYAML, "embedded default")
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
	if err := decode(defaultYAML, c); err != nil {
		return nil, fmt.Errorf("decoding embedded default: %w", err)
	}
	if err := decode(b, c); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", name, err)
	}
	return c, nil
}

func decode(b []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return hideValues(err)
	}
	return nil
}

// yamlValue is how yaml.v3 quotes (the start of) a value in a type error.
var yamlValue = regexp.MustCompile("`[^`]*`")

// hideValues drops the values yaml.v3 quotes in its type errors ("cannot
// unmarshal !!str `SECRETV...` into []string"): the value may be a secret
// (cluster.previous_secrets given as a string, a store.url in the wrong
// place), and the line and types say what is wrong.
func hideValues(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	out := &yaml.TypeError{Errors: make([]string, len(te.Errors))}
	for i, e := range te.Errors {
		out.Errors[i] = yamlValue.ReplaceAllString(e, "a value")
	}
	return out
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
	errs = append(errs, prefixed("store.", c.Store.Validate())...)
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
	errs = append(errs, prefixed("executor.", c.Executor.Validate())...)
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
	errs = append(errs, prefixed("api.", c.API.Validate())...)
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, prefixed("cluster.", c.Cluster.Validate())...)
	if c.Cluster.Enabled() && c.Store.URL == "" {
		bad("cluster.node: needs a PostgreSQL store shared by every node (store.url or SANDBOXAPI_STORE_URL)")
	}
	return errors.Join(errs...)
}

// prefixed names each of err's problems (errors.Join's parts) with the
// section they are from; nil for nil.
func prefixed(section string, err error) []error {
	if err == nil {
		return nil
	}
	parts := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	}
	out := make([]error, 0, len(parts))
	for _, e := range parts {
		out = append(out, fmt.Errorf("%s%w", section, e))
	}
	return out
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

// ParseSize reads sizes like 512M, 1G, 1048576 (see size.Parse).
func ParseSize(s string) (int64, error) { return size.Parse(s) }
