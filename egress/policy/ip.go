package policy

import (
	"net/netip"
)

type rangeReason struct {
	prefix netip.Prefix
	reason string
}

func mustPrefixes(pairs ...string) []rangeReason {
	out := make([]rangeReason, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, rangeReason{netip.MustParsePrefix(pairs[i]), pairs[i+1]})
	}
	return out
}

// Order matters: the first matching prefix gives the reason.
var forbiddenV4 = mustPrefixes(
	"0.0.0.0/32", "unspecified",
	"255.255.255.255/32", "broadcast",
	"169.254.169.254/32", "cloud metadata",
	"0.0.0.0/8", "this network (0/8)",
	"10.0.0.0/8", "private",
	"100.64.0.0/10", "carrier-grade NAT",
	"127.0.0.0/8", "loopback",
	"169.254.0.0/16", "link-local",
	"172.16.0.0/12", "private",
	"192.0.0.0/24", "IETF protocol assignments",
	"192.0.2.0/24", "documentation",
	"192.88.99.0/24", "6to4 relay anycast",
	"192.168.0.0/16", "private",
	"198.18.0.0/15", "benchmarking",
	"198.51.100.0/24", "documentation",
	"203.0.113.0/24", "documentation",
	"224.0.0.0/4", "multicast",
	"240.0.0.0/4", "reserved",
)

var forbiddenV6 = mustPrefixes(
	"::/128", "unspecified",
	"::1/128", "loopback",
	"fd00:ec2::254/128", "cloud metadata",
	"::/96", "IPv4-compatible",
	"::ffff:0:0:0/96", "IPv4-translated",
	"64:ff9b::/96", "NAT64",
	"64:ff9b:1::/48", "local-use NAT64",
	"2002::/16", "6to4",
	"100::/64", "discard-only",
	"2001::/32", "Teredo",
	"2001:db8::/32", "documentation",
	"2001:2::/48", "benchmarking",
	"2001::/23", "IETF protocol assignments",
	"3fff::/20", "documentation",
	"5f00::/16", "SRv6 SIDs",
	"fc00::/7", "unique local (ULA)",
	"fe80::/10", "link-local",
	"fec0::/10", "site-local",
	"ff00::/8", "multicast",
)

var globalUnicast = netip.MustParsePrefix("2000::/3")

// Forbidden reports whether a is not a public unicast address, with the
// name of the range it falls in. IPv4-mapped addresses are unmapped first;
// the transition ranges that embed or relay to IPv4 (IPv4-compatible,
// NAT64, 6to4, Teredo) are forbidden whole, whatever address they embed;
// IPv6 outside 2000::/3 is forbidden. Zoned and invalid addresses are
// forbidden.
func Forbidden(a netip.Addr) (reason string, bad bool) {
	if !a.IsValid() {
		return "invalid address", true
	}
	if a.Zone() != "" {
		return "zoned address", true
	}
	if a.Is4In6() {
		r, bad := Forbidden(a.Unmap())
		if bad {
			return "IPv4-mapped " + r, true
		}
		return "", false
	}
	if a.Is4() {
		for _, rr := range forbiddenV4 {
			if rr.prefix.Contains(a) {
				return rr.reason, true
			}
		}
		return "", false
	}
	for _, rr := range forbiddenV6 {
		if rr.prefix.Contains(a) {
			return rr.reason, true
		}
	}
	if !globalUnicast.Contains(a) {
		return "not global unicast", true
	}
	return "", false
}

// Vetter decides whether the proxy may connect to an address: the
// proxy's own addresses (Own) and the Denied prefixes are refused before
// anything else, then the operator's ExtraAllowed prefixes override
// Forbidden. The zero value applies Forbidden alone. A Vetter is safe for
// concurrent use if not modified.
type Vetter struct {
	ExtraAllowed []netip.Prefix
	// Denied are prefixes refused whatever ExtraAllowed says: the sandbox
	// networks' pools, whose far ends are other sessions' sandboxes that
	// the proxy, dialling from the host namespace, could otherwise reach.
	Denied []netip.Prefix
	Own    func(netip.Addr) bool
}

// Deny reasons of Vetter.Check beyond those of Forbidden.
const (
	ReasonOwnAddress     = "proxy's own address"
	ReasonSandboxNetwork = "sandbox network"
)

// Check reports whether a must not be dialled and why.
func (v Vetter) Check(a netip.Addr) (reason string, bad bool) {
	u := a.Unmap()
	extra := false
	if u.Zone() == "" {
		for _, p := range v.ExtraAllowed {
			if p.Contains(u) {
				extra = true
				break
			}
		}
	}
	if u.Zone() == "" {
		for _, p := range v.Denied {
			if p.Contains(u) {
				return ReasonSandboxNetwork, true
			}
		}
	}
	if v.Own != nil && v.Own(u) {
		// Name the range when there is one, so the audit says "loopback"
		// rather than hiding it; the own-address rule beats ExtraAllowed.
		if r, bad := Forbidden(a); bad && !extra {
			return r, true
		}
		return ReasonOwnAddress, true
	}
	if extra {
		return "", false
	}
	return Forbidden(a)
}
