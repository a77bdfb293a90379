// Package cluster lets many `sandboxapi serve` processes share one
// PostgreSQL store and serve every session from any of them. A *Node
// registers this process under its name and keeps a lease on it; its
// Handler sits in front of the API and sends each call for a session to
// the node that owns it (forwarded with an HMAC signature), places new
// sessions on the node with the most free capacity, and takes over the
// sessions of a node whose lease ran out or that handed them over while
// draining. It talks to the executor through the small Executor seam.
package cluster

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/duration"
	"github.com/sandboxapi/sandboxapi/internal/redact"
)

// SecretEnv names the environment variable that overrides Settings.Secret
// (so the secret stays out of the config file).
const SecretEnv = "SANDBOXAPI_CLUSTER_SECRET"

// PreviousSecretsEnv names the environment variable that overrides
// Settings.PreviousSecrets: the secrets separated by commas and/or
// whitespace (so a secret passed this way cannot contain either).
const PreviousSecretsEnv = "SANDBOXAPI_CLUSTER_PREVIOUS_SECRETS"

// MinSecretBytes is the shortest cluster secret accepted.
const MinSecretBytes = 32

// MaxPreviousSecrets is the most previous secrets a node accepts: a
// rotation needs one; every one is an HMAC more per forward received.
const MaxPreviousSecrets = 4

// Settings is the `cluster:` section of the config. Data only: the zero
// value (no node name) is a single node, today's behaviour exactly.
type Settings struct {
	// Node names this process in the cluster (letters, digits, '.', '_'
	// and '-', at most 63); empty runs a single node. Every node of one
	// cluster has its own name, and a restarted node keeps it.
	Node string `yaml:"node"`
	// AdvertiseURL is how the other nodes reach this one
	// (http://HOST:PORT or https://HOST:PORT, no path); required with
	// node. With https, this node serves TLS (tls.mode) with a
	// certificate whose names cover HOST (an IP SAN for an address), and
	// the other nodes trust its CA (ca_file).
	AdvertiseURL string `yaml:"advertise_url"`
	// CAFile is a PEM file of CA certificates this node trusts, instead of
	// the system roots, when it forwards a call to another node's https
	// advertise URL (certificates from an internal CA); empty: the system
	// roots. Read when the node starts: at least one certificate. It does
	// not make this node serve TLS: with an http advertise URL it is
	// allowed (a rollout where some nodes already serve https), and the
	// other nodes reach this one in plain HTTP until it is changed.
	CAFile string `yaml:"ca_file"`
	// RequireTLS refuses plain HTTP between nodes: advertise_url must be
	// https, and this node forwards no call to, and places no session on,
	// a node registered with an http URL (the client gets 503
	// node_unavailable; the error log names that node). Turn it on once
	// every node advertises https.
	RequireTLS bool `yaml:"require_tls"`
	// Secret authenticates the calls nodes forward to each other (HMAC);
	// at least 32 bytes, the same on every node; required with node. The
	// environment variable SANDBOXAPI_CLUSTER_SECRET overrides it. To
	// change it without a refused call, see previous_secrets.
	Secret string `yaml:"secret"`
	// PreviousSecrets are secrets this node still accepts on the calls it
	// receives, but never signs with: they let the secret change in
	// rolling restarts (operations.md, "Key rotation"). Each at least 32
	// bytes, none equal to secret, no duplicates, at most 4; empty
	// outside a rotation. The environment variable
	// SANDBOXAPI_CLUSTER_PREVIOUS_SECRETS overrides the list, its secrets
	// separated by commas and/or whitespace: a secret meant to pass
	// through it (or to be rotated out through it) cannot contain either.
	PreviousSecrets []string `yaml:"previous_secrets"`
	// Lease is how long a node owns its sessions without renewing; it
	// renews every lease/3, stops using its sessions when it cannot renew
	// before lease/4 is left, and a node that died has its sessions taken
	// over once its lease ran out. From 2s to 10m.
	Lease duration.Duration `yaml:"lease"`
}

// Enabled reports whether the process is a node of a cluster.
func (s Settings) Enabled() bool { return s.Node != "" }

// Validate reports every problem of the section. A single node (no name)
// accepts anything else as it is, unused.
func (s Settings) Validate() error {
	if !s.Enabled() {
		return nil
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !validName(s.Node) {
		bad("node: %q is not a node name (1 to 63 of a-z, A-Z, 0-9, '.', '_', '-')", s.Node)
	}
	if err := checkAdvertiseURL(s.AdvertiseURL); err != nil {
		bad("advertise_url: %v", err)
	} else if s.RequireTLS && !isHTTPS(s.AdvertiseURL) {
		bad("require_tls: advertise_url %q is plain http (use https://, or leave require_tls off while nodes move to TLS)", redact.URL(s.AdvertiseURL))
	}
	if s.CAFile != "" {
		if _, err := loadCAFile(s.CAFile); err != nil {
			bad("ca_file: %v", err)
		}
	}
	switch n := len(s.Secret); {
	case n == 0:
		bad("secret: required with node (or set %s)", SecretEnv)
	case n < MinSecretBytes:
		bad("secret: must be at least %d bytes, got %d", MinSecretBytes, n) // never the secret itself
	}
	checkPrevious(s.Secret, s.PreviousSecrets, bad)
	if d := s.Lease.D(); d < 2*time.Second || d > 10*time.Minute {
		bad("lease: must be from 2s to 10m, got %s", d)
	}
	return errors.Join(errs...)
}

// checkPrevious reports through bad every problem of previous, the
// previous secrets next to secret. An entry is named by its position,
// never by its value.
func checkPrevious(secret string, previous []string, bad func(format string, a ...any)) {
	if n := len(previous); n > MaxPreviousSecrets {
		bad("previous_secrets: at most %d, got %d", MaxPreviousSecrets, n)
	}
	first := make(map[string]int, len(previous)) // secret -> the first index holding it
	for i, p := range previous {
		if n := len(p); n < MinSecretBytes {
			bad("previous_secrets[%d]: must be at least %d bytes, got %d", i, MinSecretBytes, n)
		}
		if p == secret && secret != "" {
			bad("previous_secrets[%d]: equal to secret (a previous secret is one this node no longer signs with)", i)
		}
		if j, dup := first[p]; dup {
			bad("previous_secrets[%d]: the same as previous_secrets[%d]", i, j)
			continue
		}
		first[p] = i
	}
}

// validName reports whether name may name a node: it is sent in headers
// and signed, so it is kept to a safe set.
func validName(name string) bool {
	if name == "" || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// isHTTPS reports whether raw, a node's URL, is an https URL.
func isHTTPS(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Scheme == "https"
}

// loadCAFile reads path, a PEM file of CA certificates, into a pool. It
// fails, naming path, when the file cannot be read, holds no PEM block,
// holds no CERTIFICATE block, or holds one that does not parse.
func loadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificates: %w", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("%s is empty (it should hold PEM CA certificates)", path)
	}
	pool := x509.NewCertPool()
	var blocks, certs int
	var others []string
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		blocks++
		if blk.Type != "CERTIFICATE" {
			others = append(others, blk.Type)
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d does not parse: %w", path, certs+1, err)
		}
		pool.AddCert(c)
		certs++
	}
	switch {
	case blocks == 0:
		return nil, fmt.Errorf("%s holds no PEM block (it should hold PEM CA certificates, -----BEGIN CERTIFICATE-----)", path)
	case certs == 0:
		return nil, fmt.Errorf("%s holds no certificate, only %s", path, strings.Join(others, ", "))
	}
	return pool, nil
}

func checkAdvertiseURL(raw string) error {
	if raw == "" {
		return errors.New("required with node")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" {
		return fmt.Errorf("%q is not http(s)://HOST:PORT", redact.URL(raw))
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: only scheme, host and port are allowed", redact.URL(raw))
	}
	return nil
}
