// Package config holds the root configuration of sandboxapi: one YAML file,
// decoded into typed structs with unknown fields rejected and every problem
// reported at once. Config is data only.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/installer"
	"github.com/sandboxapi/sandboxapi/internal/duration"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/readiness"
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
}

// EgressConfig switches the egress proxy and per-session sandbox networks
// on (Enabled) and configures them. Disabled, sessions that ask for
// network are refused and the rest is not validated.
type EgressConfig struct {
	Enabled       bool `yaml:"enabled"`
	egress.Config `yaml:",inline"`
}

// Store selects the database.
type Store struct {
	// URL is empty for the embedded SQLite file (<data_dir>/sandboxapi.db),
	// or postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=... for a PostgreSQL
	// database that many nodes share (migrated on start, once however many
	// nodes start together). The environment variable SANDBOXAPI_STORE_URL
	// overrides it (keeps the password out of the file).
	URL string `yaml:"url"`
}

// API holds authentication and plan settings.
type API struct {
	PlansFile string `yaml:"plans_file"`
	// GatewaySecret, when set, accepts only requests from a RapidAPI-style
	// gateway carrying it in X-RapidAPI-Proxy-Secret.
	GatewaySecret string `yaml:"gateway_secret"`
}

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
	// a quiet program's stream. From 1s to 5m.
	StreamHeartbeat Duration `yaml:"stream_heartbeat"`
}

// Executor holds sandbox runtime settings.
type Executor struct {
	Runsc          string   `yaml:"runsc"`
	Platform       string   `yaml:"platform"`
	Rootfs         string   `yaml:"rootfs"`
	RuntimesFile   string   `yaml:"runtimes_file"`
	MaxSandboxes   int      `yaml:"max_sandboxes"`
	HomeSize       string   `yaml:"home_size"`
	MemoryMB       int64    `yaml:"memory_mb"`
	Pids           int64    `yaml:"pids"`
	CPUs           float64  `yaml:"cpus"`
	TmpSizeMB      int64    `yaml:"tmp_size_mb"`
	CreateTimeout  Duration `yaml:"create_timeout"`
	CompileTimeout Duration `yaml:"compile_timeout"`
	GuestBinary    string   `yaml:"guest_binary"`
	WarmPool       int      `yaml:"warm_pool"`
	// HibernateAfter hibernates a session idle this long: its sandbox,
	// network and mount are released, its home and plan slot kept; the
	// next call resumes it. 0s never hibernates.
	HibernateAfter Duration `yaml:"hibernate_after"`
	// MaxDisk caps the sum of all session homes' sizes (running,
	// hibernated, warm); creation and fork past it answer 507
	// insufficient_storage. Empty or 0: no cap.
	MaxDisk string `yaml:"max_disk"`
}

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
	if path == "" {
		return Parse(defaultYAML, "embedded default")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return Parse(b, path)
}

// Parse decodes YAML on top of the defaults and validates the result.
func Parse(b []byte, name string) (*Config, error) {
	c := &Config{Mirror: mirror.DefaultConfig(), Egress: EgressConfig{Config: egress.DefaultConfig()},
		Readiness: readiness.DefaultConfig(), Installer: installer.DefaultConfig()}
	if err := decode(defaultYAML, c); err != nil {
		return nil, fmt.Errorf("decoding embedded default: %w", err)
	}
	if err := decode(b, c); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", name, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("validating %s: %w", name, err)
	}
	return c, nil
}

func decode(b []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
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
	if u := c.Store.URL; u != "" && !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		kind := "something that is not a URL" // never echoed: it may hold a password
		if scheme, _, ok := strings.Cut(u, "://"); ok && !strings.ContainsAny(scheme, " =@") {
			kind = fmt.Sprintf("a %q URL", scheme)
		}
		bad("store.url: must be empty (SQLite) or postgres://..., got %s", kind)
	}
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
	e := c.Executor
	if e.Runsc == "" {
		bad("executor.runsc: required")
	}
	switch e.Platform {
	case "systrap", "ptrace", "kvm":
	default:
		bad("executor.platform: must be systrap, ptrace or kvm, got %q", e.Platform)
	}
	if e.MaxSandboxes < 1 {
		bad("executor.max_sandboxes: must be at least 1")
	}
	if _, err := ParseSize(e.HomeSize); err != nil {
		bad("executor.home_size: %v", err)
	} else if n, _ := ParseSize(e.HomeSize); n < 16<<20 {
		bad("executor.home_size: must be at least 16M")
	}
	if e.MemoryMB < 64 {
		bad("executor.memory_mb: must be at least 64")
	}
	if e.Pids < 16 {
		bad("executor.pids: must be at least 16")
	}
	if e.CPUs <= 0 {
		bad("executor.cpus: must be positive")
	}
	if e.HibernateAfter.D() < 0 {
		bad("executor.hibernate_after: must not be negative (0s never hibernates)")
	} else if d := e.HibernateAfter.D(); d > 0 && d < time.Second {
		bad("executor.hibernate_after: must be at least 1s (or 0s)")
	}
	if e.MaxDisk != "" && e.MaxDisk != "0" {
		if n, err := ParseSize(e.MaxDisk); err != nil {
			bad("executor.max_disk: %v", err)
		} else if h, _ := ParseSize(e.HomeSize); n < h {
			bad("executor.max_disk: must hold at least one home (%s)", e.HomeSize)
		}
	}
	if e.WarmPool < 0 || e.WarmPool > 64 {
		bad("executor.warm_pool: must be between 0 and 64")
	}
	if e.CompileTimeout <= 0 {
		bad("executor.compile_timeout: must be positive")
	}
	if e.TmpSizeMB < 1 {
		bad("executor.tmp_size_mb: must be at least 1")
	}
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
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ParseSize reads sizes like 512M, 1G, 1048576.
func ParseSize(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty size")
	}
	mult := int64(1)
	num := s
	switch s[len(s)-1] {
	case 'K', 'k':
		mult, num = 1<<10, s[:len(s)-1]
	case 'M', 'm':
		mult, num = 1<<20, s[:len(s)-1]
	case 'G', 'g':
		mult, num = 1<<30, s[:len(s)-1]
	}
	var n int64
	if _, err := fmt.Sscanf(num, "%d", &n); err != nil || n <= 0 || fmt.Sprint(n) != num {
		return 0, fmt.Errorf("%q is not a size like 256M", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}
