// Package config is the service-free half of sandboxapi's configuration:
// the embedded default file, the strict YAML decoding every section goes
// through (unknown fields rejected, values kept out of type errors), the
// root's shared sections (server, limits) and the way a section's problems
// are named. It imports no service: the root document, which composes
// each service's own Settings type, is internal/app's Config (the
// composition root), and doctor takes its own doctor.Config.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/internal/duration"
	"github.com/sandboxapi/sandboxapi/internal/size"
)

// DefaultYAML returns the embedded default configuration text.
func DefaultYAML() []byte { return bytes.Clone(configs.Server) }

// Duration is the shared YAML duration.
type Duration = duration.Duration

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

// Decode decodes one YAML document b into v (a pointer; fields b does not
// name keep their value, so a file decodes on top of the defaults) with
// unknown fields rejected. An empty document leaves v as it was. Type
// errors do not quote the value (HideValues).
func Decode(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return HideValues(err)
	}
	return nil
}

// yamlValue is how yaml.v3 quotes (the start of) a value in a type error.
var yamlValue = regexp.MustCompile("`[^`]*`")

// HideValues drops the values yaml.v3 quotes in its type errors ("cannot
// unmarshal !!str `SECRETV...` into []string"): the value may be a secret
// (cluster.previous_secrets given as a string, a store.url in the wrong
// place), and the line and types say what is wrong.
func HideValues(err error) error {
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

// Prefixed names each of err's problems (errors.Join's parts) with the
// section they are from; nil for nil.
func Prefixed(section string, err error) []error {
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

// SplitSecrets splits a list of secrets as
// SANDBOXAPI_CLUSTER_PREVIOUS_SECRETS holds it: separated by commas,
// whitespace or both, with empty pieces dropped ("a, b,,c\n" is a, b and
// c). It never fails: the secrets are checked where the config is
// validated.
func SplitSecrets(raw string) []string {
	return strings.FieldsFunc(raw, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
}

// ParseSize reads sizes like 512M, 1G, 1048576 (see size.Parse).
func ParseSize(s string) (int64, error) { return size.Parse(s) }
