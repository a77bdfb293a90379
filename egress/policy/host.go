package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// ErrInvalidHost is wrapped by every error about a malformed host name or
// host:port.
var ErrInvalidHost = errors.New("invalid host")

// HostError names the bad input and why it was rejected. It wraps
// ErrInvalidHost.
type HostError struct {
	Input  string
	Reason string
}

func (e *HostError) Error() string {
	return fmt.Sprintf("invalid host %q: %s", e.Input, e.Reason)
}

// Unwrap returns ErrInvalidHost.
func (e *HostError) Unwrap() error { return ErrInvalidHost }

func hostErr(in, reason string) error { return &HostError{Input: in, Reason: reason} }

// maxHostLen bounds the input before any IDNA work.
const maxHostLen = 253

// profile maps Unicode names to their lowercase punycode form and enforces
// STD3 rules (letters, digits, hyphens) and DNS length limits.
var profile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.Transitional(false),
	idna.StrictDomainName(true),
	idna.VerifyDNSLength(true),
)

// CanonicalHost returns the canonical form of a DNS host name: lowercase
// ASCII (IDNA punycode), without a trailing dot. It rejects IP literals in
// any notation (including the numeric forms browsers accept such as
// "2130706433", "0x7f000001", "0177.0.0.1" and "127.1"), bracketed
// literals, control bytes, empty labels, single-label names and names over
// the DNS length limits.
func CanonicalHost(s string) (string, error) {
	if s == "" {
		return "", hostErr(s, "empty")
	}
	if len(s) > maxHostLen+1 {
		return "", hostErr(s, "too long")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c == 0x7f {
			return "", hostErr(s, "control or space byte")
		}
		switch c {
		case '[', ']':
			return "", hostErr(s, "bracketed literal")
		case ':':
			return "", hostErr(s, "contains a colon (port or IPv6 literal)")
		case '%', '/', '\\', '@', '*':
			return "", hostErr(s, fmt.Sprintf("contains %q", c))
		}
	}
	if !utf8.ValidString(s) {
		return "", hostErr(s, "invalid UTF-8")
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return "", hostErr(s, "IP literal")
	}
	name := strings.TrimSuffix(s, ".")
	if name == "" || strings.HasPrefix(name, ".") || strings.Contains(name, "..") {
		return "", hostErr(s, "empty label")
	}
	ascii, err := profile.ToASCII(name)
	if err != nil {
		return "", hostErr(s, "not a valid IDNA name") // idna errors quote the whole label
	}
	ascii = strings.ToLower(ascii)
	// The punycode form must itself be a valid name (rejects labels that
	// decode to U+FFFD and other forms that do not round-trip).
	if again, err := profile.ToASCII(ascii); err != nil || again != ascii {
		return "", hostErr(s, "not a valid IDNA name")
	}
	labels := strings.Split(ascii, ".")
	if len(labels) < 2 {
		return "", hostErr(s, "single-label name")
	}
	for _, l := range labels {
		if l == "" {
			return "", hostErr(s, "empty label")
		}
		if len(l) > 63 {
			return "", hostErr(s, "label longer than 63 bytes")
		}
	}
	if endsInNumber(labels) {
		return "", hostErr(s, "numeric host (IP address form)")
	}
	return ascii, nil
}

// endsInNumber reports whether the last label is a number in any base a URL
// parser would accept as part of an IPv4 address (the WHATWG "ends in a
// number" rule). No real top-level domain is numeric.
func endsInNumber(labels []string) bool {
	last := labels[len(labels)-1]
	if isDigits(last) {
		return true
	}
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		for i := 2; i < len(last); i++ {
			if !isHex(last[i]) {
				return false
			}
		}
		return true
	}
	return false
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// HostPort is a canonical CONNECT target. The zero value is not a valid
// target.
type HostPort struct {
	Host string // canonical (see CanonicalHost)
	Port uint16
}

// String returns host:port.
func (hp HostPort) String() string {
	return hp.Host + ":" + strconv.Itoa(int(hp.Port))
}

// DefaultPorts are the destination ports allowed when none are configured.
var DefaultPorts = []uint16{443}

// ParseHostPort parses the authority of a CONNECT request ("host:port")
// strictly: the port is required, decimal, without sign or leading zeros,
// and must be in allowedPorts (DefaultPorts when empty); the host must pass
// CanonicalHost, so IP literals in any form and "[v6]" are rejected (see
// ParseTarget for a target that may be an address).
func ParseHostPort(s string, allowedPorts []uint16) (HostPort, error) {
	hostPart, port, err := splitPort(s, allowedPorts)
	if err != nil {
		return HostPort{}, err
	}
	if strings.HasPrefix(hostPart, "[") {
		return HostPort{}, hostErr(s, "bracketed literal")
	}
	host, err := CanonicalHost(hostPart)
	if err != nil {
		return HostPort{}, err
	}
	return HostPort{Host: host, Port: port}, nil
}

// Target is a CONNECT destination: a canonical host name or an address,
// and a port. Exactly one of Host and Addr is set in a parsed Target.
type Target struct {
	Host string     // canonical (see CanonicalHost); "" for an address
	Addr netip.Addr // unmapped, without zone; zero for a host name
	Port uint16
}

// String returns host:port, with brackets around an IPv6 address.
func (t Target) String() string {
	if t.Addr.IsValid() {
		return netip.AddrPortFrom(t.Addr, t.Port).String()
	}
	return HostPort{Host: t.Host, Port: t.Port}.String()
}

// ParseTarget parses the authority of a CONNECT request as ParseHostPort
// does, but also takes an IP address: dotted-decimal IPv4 ("1.2.3.4:443")
// or bracketed IPv6 ("[2001:db8::1]:443"). An IPv4-mapped IPv6 address is
// its IPv4 address. Zones, a bracketed IPv4 address or name, and the
// numeric host forms that only some parsers read as IPv4 (octal, hex,
// "127.1", a bare integer) are rejected.
func ParseTarget(s string, allowedPorts []uint16) (Target, error) {
	hostPart, port, err := splitPort(s, allowedPorts)
	if err != nil {
		return Target{}, err
	}
	if inner, ok := strings.CutPrefix(hostPart, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		a, err := netip.ParseAddr(inner)
		switch {
		case !ok || err != nil || strings.ContainsAny(inner, "[]"):
			return Target{}, hostErr(s, "bracketed literal that is not an IPv6 address")
		case a.Zone() != "":
			return Target{}, hostErr(s, "zoned address")
		case !a.Is6():
			return Target{}, hostErr(s, "bracketed IPv4 address")
		}
		return Target{Addr: a.Unmap(), Port: port}, nil
	}
	if a, err := netip.ParseAddr(hostPart); err == nil && a.Is4() {
		return Target{Addr: a, Port: port}, nil
	}
	host, err := CanonicalHost(hostPart)
	if err != nil {
		return Target{}, err
	}
	return Target{Host: host, Port: port}, nil
}

// splitPort splits host:port at the last colon and checks the port.
func splitPort(s string, allowedPorts []uint16) (string, uint16, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return "", 0, hostErr(s, "NUL byte")
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 || (strings.HasPrefix(s, "[") && !strings.HasSuffix(s[:i], "]")) {
		if strings.HasPrefix(s, "[") {
			return "", 0, hostErr(s, "bracketed literal without port")
		}
		return "", 0, hostErr(s, "missing port")
	}
	hostPart, portPart := s[:i], s[i+1:]
	if !isDigits(portPart) || len(portPart) > 5 || (len(portPart) > 1 && portPart[0] == '0') {
		return "", 0, hostErr(s, "bad port")
	}
	p, err := strconv.ParseUint(portPart, 10, 16)
	if err != nil || p == 0 {
		return "", 0, hostErr(s, "bad port")
	}
	if len(allowedPorts) == 0 {
		allowedPorts = DefaultPorts
	}
	for _, ap := range allowedPorts {
		if ap == uint16(p) {
			return hostPart, uint16(p), nil
		}
	}
	return "", 0, hostErr(s, fmt.Sprintf("port %d not allowed", p))
}
