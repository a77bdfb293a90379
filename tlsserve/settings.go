package tlsserve

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/sandboxapi/sandboxapi/internal/redact"
)

// Modes of the tls section.
const (
	ModeOff   = "off"   // plain HTTP on listen (behind a TLS-terminating proxy, or loopback only)
	ModeACME  = "acme"  // certificates from an ACME CA (Let's Encrypt, or a private CA)
	ModeLocal = "local" // certificates from a CA of our own kept under the TLS storage folder
	ModeFiles = "files" // operator-provided certificate and key files, re-read when they change
)

// Settings is the tls section of sandboxapi.yaml: HTTPS on the listen
// address. Data only; the zero value is off.
type Settings struct {
	// Mode is off, acme, local or files. When on, loopback peers may still
	// speak plain HTTP on the same port (local tooling); everyone else gets
	// TLS.
	Mode string `yaml:"mode"`
	// Domains are the names (and, for local, IP addresses) the certificate
	// covers. acme needs at least one public name; local defaults to
	// localhost and the listen address's IP.
	Domains []string `yaml:"domains"`
	// Email is the ACME account contact (optional, recommended).
	Email string `yaml:"email"`
	// ACMEDirectory is the ACME directory URL; empty means Let's Encrypt
	// production. Point it at a private CA (step-ca, Pebble) to use one.
	ACMEDirectory string `yaml:"acme_directory"`
	// ACMERoots is a PEM file of root certificates to trust when talking
	// to the ACME server (a private CA); empty: the system roots.
	ACMERoots string `yaml:"acme_roots"`
	// CertFile and KeyFile are the PEM certificate chain and key (mode files).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// RedirectListen is a plain HTTP listener that redirects to HTTPS and
	// answers ACME HTTP-01 challenges, like ":80"; empty: none.
	RedirectListen string `yaml:"redirect_listen"`
	// StorageDir keeps certificates, ACME accounts and the local CA; empty:
	// <data_dir>/tls.
	StorageDir string `yaml:"storage_dir"`
}

// Storage is where modes acme and local keep their state: StorageDir, by
// default <dataDir>/tls.
func (t Settings) Storage(dataDir string) string {
	if t.StorageDir != "" {
		return t.StorageDir
	}
	return filepath.Join(dataDir, "tls")
}

// Enabled reports whether the listener serves HTTPS.
func (t Settings) Enabled() bool { return t.Mode != "" && t.Mode != ModeOff }

// Validate reports every problem of the tls block.
func (t Settings) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch t.Mode {
	case "", ModeOff:
		return nil
	case ModeACME:
		if len(t.Domains) == 0 {
			bad("tls.domains: acme needs at least one domain")
		}
		for _, d := range t.Domains {
			if net.ParseIP(d) != nil || !strings.Contains(d, ".") || strings.ContainsAny(d, " /:") {
				bad("tls.domains: %q is not a domain name an ACME CA can validate", d)
			}
		}
		if t.ACMEDirectory != "" {
			if u, err := url.Parse(t.ACMEDirectory); err != nil || u.Scheme != "https" || u.Host == "" {
				bad("tls.acme_directory: %q is not an https URL", redact.URL(t.ACMEDirectory))
			}
		}
	case ModeLocal:
		for _, d := range t.Domains {
			if d == "" || strings.ContainsAny(d, " /") {
				bad("tls.domains: %q is not a name or address", d)
			}
		}
	case ModeFiles:
		if t.CertFile == "" || t.KeyFile == "" {
			bad("tls: files needs cert_file and key_file")
		}
	default:
		bad("tls.mode: must be off, acme, local or files, got %q", t.Mode)
	}
	if t.Mode != ModeACME && (t.Email != "" || t.ACMEDirectory != "" || t.ACMERoots != "") {
		bad("tls: email, acme_directory and acme_roots apply to mode acme only")
	}
	if t.RedirectListen != "" {
		if _, _, err := net.SplitHostPort(t.RedirectListen); err != nil {
			bad("tls.redirect_listen: %q is not host:port", t.RedirectListen)
		}
	}
	return errors.Join(errs...)
}
