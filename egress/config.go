package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Config is the egress proxy and sandbox network configuration. It is data
// only; start from DefaultConfig and call Validate before use.
type Config struct {
	// ConnectPort is where each session's explicit CONNECT proxy listens on
	// the session's host-side address (HTTPS_PROXY=http://HOST:PORT).
	// 0 picks an ephemeral port (tests only: the firewall needs fixed ports).
	ConnectPort uint16 `yaml:"connect_port"`
	// TransparentPort is where the SNI-reading transparent proxy listens on
	// the session's host-side address; the in-sandbox DNS points allowed
	// names there, so it is 443 in production. 0 picks an ephemeral port.
	TransparentPort uint16 `yaml:"transparent_port"`
	// TransparentUpstreamPort is the destination port dialled for
	// transparent connections (443 unless testing).
	TransparentUpstreamPort uint16 `yaml:"transparent_upstream_port"`
	// DNSPort is where the in-sandbox DNS listens (UDP and TCP) on the
	// session's host-side address. 0 picks an ephemeral port.
	DNSPort uint16 `yaml:"dns_port"`
	// AllowedPorts are the destination ports a CONNECT may name.
	AllowedPorts []uint16 `yaml:"allowed_ports"`
	// Resolvers are the upstream DNS servers ("ip" or "ip:port") the proxy
	// resolves names with, tried in order. Answers are kept for their TTL,
	// at most 60s.
	Resolvers []string `yaml:"resolvers"`
	// ResolveTimeout bounds each upstream DNS exchange.
	ResolveTimeout time.Duration `yaml:"resolve_timeout"`
	// DialTimeout bounds each upstream TCP connect.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// HandshakeTimeout bounds the wait for the client's TLS ClientHello.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// IdleTimeout closes a tunnel after no byte moved either way for this
	// long (checked every quarter of it, at most every 15s).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxTunnelsPerSession caps concurrent tunnels (including those being set up).
	MaxTunnelsPerSession int `yaml:"max_tunnels_per_session"`
	// MaxPendingPerSession caps, per session and listener, connections
	// accepted but not yet holding a tunnel slot (a CONNECT not yet sent,
	// a DNS-over-TCP exchange); past it new connections are closed at once,
	// so idle sockets cannot pile up for HandshakeTimeout each.
	MaxPendingPerSession int `yaml:"max_pending_per_session"`
	// ExtraAllowedCIDRs are operator-approved prefixes that override the
	// forbidden ranges (internal services; the tests' fake internet).
	ExtraAllowedCIDRs []string `yaml:"extra_allowed_cidrs"`
	// DecisionsPerSession is the size of each session's in-memory audit ring.
	DecisionsPerSession int `yaml:"decisions_per_session"`
	// AuditRecordsPerMinute caps, per session and minute, the decisions
	// logged and stored one by one. A refusal repeated within the minute
	// is stored once more at its end as one record with a count and its
	// first and last time; decisions past the cap are counted in one
	// summary record per mode and outcome. A minute thus stores and logs
	// at most 2*cap+9 records per session (see docs/security.md).
	AuditRecordsPerMinute int `yaml:"audit_records_per_minute"`
	// AuditRetention is how long decisions stay in the store, which serves
	// GET /v1/sessions/{id}/egress also after the session ended; older
	// ones are pruned at start and hourly.
	AuditRetention time.Duration `yaml:"audit_retention"`
	// UpstreamCAFile, if set, is a PEM file of CA certificates that the
	// proxy trusts besides the system's roots when it opens its own TLS to
	// a host that has credentials (an operator's internal CA).
	UpstreamCAFile string `yaml:"upstream_ca_file"`
	// CredentialsKeyFile is the key (64 hex digits, mode 0600) that seals
	// sessions' credential values at rest; empty: credentials.key in the
	// data folder, generated on first start. CredentialsOldKeyFiles are
	// keys replaced by it, still accepted for opening (rotation: see
	// docs/security.md).
	CredentialsKeyFile     string   `yaml:"credentials_key_file"`
	CredentialsOldKeyFiles []string `yaml:"credentials_old_key_files"`
	// Network configures the per-session netns and veth wiring.
	Network NetworkConfig `yaml:"network"`
}

// NetworkConfig configures the sandbox network wiring.
type NetworkConfig struct {
	// Pool is the IPv4 prefix carved into one /30 per session (host side
	// .1, sandbox side .2). It must not overlap any host network.
	Pool string `yaml:"pool"`
	// NetnsDir is where `ip netns` keeps named namespaces.
	NetnsDir string `yaml:"netns_dir"`
	// Table is the nftables table (family inet) holding the sandbox rules.
	Table string `yaml:"table"`
	// Prefix (1-5 lowercase letters) starts every netns ("PREFIX-<hash>")
	// and host-side veth ("PREFIXh<hash>") name; Reconcile only touches
	// names with this prefix.
	Prefix string `yaml:"prefix"`
}

// DefaultConfig returns the production defaults. Resolvers is empty and
// must be set.
func DefaultConfig() Config {
	return Config{
		ConnectPort:             3128,
		TransparentPort:         443,
		TransparentUpstreamPort: 443,
		DNSPort:                 53,
		AllowedPorts:            []uint16{443},
		ResolveTimeout:          3 * time.Second,
		DialTimeout:             10 * time.Second,
		HandshakeTimeout:        10 * time.Second,
		IdleTimeout:             5 * time.Minute,
		MaxTunnelsPerSession:    64,
		MaxPendingPerSession:    16,
		DecisionsPerSession:     1000,
		AuditRecordsPerMinute:   60,
		AuditRetention:          720 * time.Hour,
		Network: NetworkConfig{
			Pool:     "10.200.0.0/16",
			NetnsDir: "/var/run/netns",
			Table:    "sandboxapi",
			Prefix:   "sbx",
		},
	}
}

// ErrInvalidConfig is wrapped by every Validate error.
var ErrInvalidConfig = errors.New("invalid egress config")

// Validate reports every problem at once, each wrapping ErrInvalidConfig.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if len(c.AllowedPorts) == 0 {
		bad("allowed_ports is empty")
	}
	for _, p := range c.AllowedPorts {
		if p == 0 {
			bad("allowed_ports contains 0")
		}
	}
	if c.TransparentUpstreamPort == 0 {
		bad("transparent_upstream_port is 0")
	}
	if len(c.Resolvers) == 0 {
		bad("resolvers is empty")
	}
	for _, r := range c.Resolvers {
		if _, err := parseResolver(r); err != nil {
			bad("resolver %q: %v", r, err)
		}
	}
	for name, d := range map[string]time.Duration{
		"resolve_timeout": c.ResolveTimeout, "dial_timeout": c.DialTimeout,
		"handshake_timeout": c.HandshakeTimeout, "idle_timeout": c.IdleTimeout,
		"audit_retention": c.AuditRetention,
	} {
		if d <= 0 {
			bad("%s must be positive", name)
		}
	}
	if c.MaxTunnelsPerSession <= 0 {
		bad("max_tunnels_per_session must be positive")
	}
	if c.MaxPendingPerSession <= 0 {
		bad("max_pending_per_session must be positive")
	}
	if c.DecisionsPerSession <= 0 {
		bad("decisions_per_session must be positive")
	}
	if c.AuditRecordsPerMinute <= 0 {
		bad("audit_records_per_minute must be positive")
	}
	for _, s := range c.ExtraAllowedCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			bad("extra_allowed_cidrs %q: %v", s, err)
		} else if p != p.Masked() {
			bad("extra_allowed_cidrs %q has host bits set", s)
		}
	}
	if c.Network.Pool != "" {
		p, err := netip.ParsePrefix(c.Network.Pool)
		switch {
		case err != nil:
			bad("network.pool %q: %v", c.Network.Pool, err)
		case !p.Addr().Is4() || p.Bits() > 29 || p != p.Masked():
			bad("network.pool %q must be a masked IPv4 prefix of /29 or larger", c.Network.Pool)
		default:
			if err := c.CheckDisjoint("network.pool", c.Network.Pool); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if !validName(c.Network.Table, 32) {
		bad("network.table %q must be 1-32 of [a-z0-9_]", c.Network.Table)
	}
	if !validName(c.Network.Prefix, 5) {
		bad("network.prefix %q must be 1-5 of [a-z0-9_]", c.Network.Prefix)
	}
	return errors.Join(errs...)
}

// CheckDisjoint reports an error wrapping ErrInvalidConfig if cidr (the
// config field called name, such as another sandbox network's pool)
// overlaps an extra_allowed_cidrs entry: the proxy dials from the host
// namespace, where a pool's addresses are the far ends of sandbox veths,
// so allowing them would let one session reach another's sandbox. The
// proxy refuses those addresses anyway (see Options.Reserved); this makes
// the contradiction a config error. Unparsable values are left to the
// checks of their own fields.
func (c *Config) CheckDisjoint(name, cidr string) error {
	pool, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil
	}
	var errs []error
	for _, e := range c.extraAllowed() {
		if e.Overlaps(pool) {
			errs = append(errs, fmt.Errorf("%w: extra_allowed_cidrs %q overlaps %s %q", ErrInvalidConfig, e, name, cidr))
		}
	}
	return errors.Join(errs...)
}

func validName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

func parseResolver(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("parsing resolver address: %w", err)
	}
	return netip.AddrPortFrom(a, 53), nil
}

// extraAllowed returns the parsed extra_allowed_cidrs, skipping entries
// that Validate rejects.
func (c *Config) extraAllowed() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(c.ExtraAllowedCIDRs))
	for _, s := range c.ExtraAllowedCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil && p == p.Masked() {
			out = append(out, p)
		}
	}
	return out
}
