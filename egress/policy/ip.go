package policy

import (
	"net/netip"
)

// AddrClass is the kind of an address as the proxy sees it, from a fixed
// set chosen where the address is checked (as smokescreen's ipType):
// audits and metrics read it, never a reason text. Only ClassPublic and
// ClassExtraAllowed may be dialled (see Dialable).
type AddrClass string

// Address classes. The ranges are those of the IANA special-purpose
// registries; an IPv4-mapped IPv6 address has the class of its IPv4
// address.
const (
	ClassPublic        AddrClass = "public"
	ClassExtraAllowed  AddrClass = "extra_allowed" // a forbidden range opened by extra_allowed_cidrs
	ClassOwn           AddrClass = "own_address"   // the proxy host's own address
	ClassSandboxNet    AddrClass = "sandbox_network"
	ClassInvalid       AddrClass = "invalid" // invalid or zoned
	ClassUnspecified   AddrClass = "unspecified"
	ClassBroadcast     AddrClass = "broadcast"
	ClassMetadata      AddrClass = "cloud_metadata"
	ClassThisNetwork   AddrClass = "this_network"
	ClassPrivate       AddrClass = "private"
	ClassCGNAT         AddrClass = "carrier_grade_nat"
	ClassLoopback      AddrClass = "loopback"
	ClassLinkLocal     AddrClass = "link_local"
	ClassIETF          AddrClass = "ietf_protocol"
	ClassDocumentation AddrClass = "documentation"
	ClassRelayAnycast  AddrClass = "relay_anycast"
	ClassBenchmarking  AddrClass = "benchmarking"
	ClassMulticast     AddrClass = "multicast"
	ClassReserved      AddrClass = "reserved"
	ClassV4Compatible  AddrClass = "ipv4_compatible"
	ClassV4Translated  AddrClass = "ipv4_translated"
	ClassNAT64         AddrClass = "nat64"
	ClassLocalNAT64    AddrClass = "local_nat64"
	Class6to4          AddrClass = "6to4"
	ClassDiscard       AddrClass = "discard_only"
	ClassTeredo        AddrClass = "teredo"
	ClassSRv6          AddrClass = "srv6"
	ClassUniqueLocal   AddrClass = "unique_local"
	ClassSiteLocal     AddrClass = "site_local"
	ClassNotGlobal     AddrClass = "not_global_unicast"
)

// AddrClasses lists every AddrClass (for metrics that pre-declare their
// labels and for tests).
var AddrClasses = [...]AddrClass{ClassPublic, ClassExtraAllowed, ClassOwn, ClassSandboxNet, ClassInvalid,
	ClassUnspecified, ClassBroadcast, ClassMetadata, ClassThisNetwork, ClassPrivate, ClassCGNAT, ClassLoopback,
	ClassLinkLocal, ClassIETF, ClassDocumentation, ClassRelayAnycast, ClassBenchmarking, ClassMulticast,
	ClassReserved, ClassV4Compatible, ClassV4Translated, ClassNAT64, ClassLocalNAT64, Class6to4, ClassDiscard,
	ClassTeredo, ClassSRv6, ClassUniqueLocal, ClassSiteLocal, ClassNotGlobal}

// Dialable reports whether an address of class c may be dialled: a public
// address, or one the operator opened with extra_allowed_cidrs.
func (c AddrClass) Dialable() bool { return c == ClassPublic || c == ClassExtraAllowed }

// Describe returns c in words for reasons and log lines.
func (c AddrClass) Describe() string {
	switch c {
	case ClassExtraAllowed:
		return "allowed by extra_allowed_cidrs"
	case ClassOwn:
		return "proxy's own address"
	case ClassSandboxNet:
		return "sandbox network"
	case ClassInvalid:
		return "invalid or zoned address"
	case ClassMetadata:
		return "cloud metadata"
	case ClassThisNetwork:
		return "this network (0/8)"
	case ClassCGNAT:
		return "carrier-grade NAT"
	case ClassLinkLocal:
		return "link-local"
	case ClassIETF:
		return "IETF protocol assignments"
	case ClassRelayAnycast:
		return "6to4 relay anycast"
	case ClassV4Compatible:
		return "IPv4-compatible"
	case ClassV4Translated:
		return "IPv4-translated"
	case ClassNAT64:
		return "NAT64"
	case ClassLocalNAT64:
		return "local-use NAT64"
	case ClassDiscard:
		return "discard-only"
	case ClassTeredo:
		return "Teredo"
	case ClassSRv6:
		return "SRv6 SIDs"
	case ClassUniqueLocal:
		return "unique local (ULA)"
	case ClassSiteLocal:
		return "site-local"
	case ClassNotGlobal:
		return "not global unicast"
	}
	return string(c)
}

type rangeClass struct {
	prefix netip.Prefix
	class  AddrClass
}

func mustRanges(pairs ...any) []rangeClass {
	out := make([]rangeClass, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, rangeClass{netip.MustParsePrefix(pairs[i].(string)), pairs[i+1].(AddrClass)})
	}
	return out
}

// Order matters: the first matching prefix gives the class.
var forbiddenV4 = mustRanges(
	"0.0.0.0/32", ClassUnspecified,
	"255.255.255.255/32", ClassBroadcast,
	"169.254.169.254/32", ClassMetadata,
	"0.0.0.0/8", ClassThisNetwork,
	"10.0.0.0/8", ClassPrivate,
	"100.64.0.0/10", ClassCGNAT,
	"127.0.0.0/8", ClassLoopback,
	"169.254.0.0/16", ClassLinkLocal,
	"172.16.0.0/12", ClassPrivate,
	"192.0.0.0/24", ClassIETF,
	"192.0.2.0/24", ClassDocumentation,
	"192.88.99.0/24", ClassRelayAnycast,
	"192.168.0.0/16", ClassPrivate,
	"198.18.0.0/15", ClassBenchmarking,
	"198.51.100.0/24", ClassDocumentation,
	"203.0.113.0/24", ClassDocumentation,
	"224.0.0.0/4", ClassMulticast,
	"240.0.0.0/4", ClassReserved,
)

var forbiddenV6 = mustRanges(
	"::/128", ClassUnspecified,
	"::1/128", ClassLoopback,
	"fd00:ec2::254/128", ClassMetadata,
	"::/96", ClassV4Compatible,
	"::ffff:0:0:0/96", ClassV4Translated,
	"64:ff9b::/96", ClassNAT64,
	"64:ff9b:1::/48", ClassLocalNAT64,
	"2002::/16", Class6to4,
	"100::/64", ClassDiscard,
	"2001::/32", ClassTeredo,
	"2001:db8::/32", ClassDocumentation,
	"2001:2::/48", ClassBenchmarking,
	"2001::/23", ClassIETF,
	"3fff::/20", ClassDocumentation,
	"5f00::/16", ClassSRv6,
	"fc00::/7", ClassUniqueLocal,
	"fe80::/10", ClassLinkLocal,
	"fec0::/10", ClassSiteLocal,
	"ff00::/8", ClassMulticast,
)

var globalUnicast = netip.MustParsePrefix("2000::/3")

// ClassOf returns the class of a by the ranges it falls in, without the
// operator's view (own addresses, extra_allowed_cidrs: see Vetter.Class):
// ClassPublic for a public unicast address. IPv4-mapped addresses are
// unmapped first; the transition ranges that embed or relay to IPv4
// (IPv4-compatible, NAT64, 6to4, Teredo) are forbidden whole, whatever
// address they embed; IPv6 outside 2000::/3 is ClassNotGlobal. Zoned and
// invalid addresses are ClassInvalid.
func ClassOf(a netip.Addr) AddrClass {
	if !a.IsValid() || a.Zone() != "" {
		return ClassInvalid
	}
	a = a.Unmap()
	ranges := forbiddenV6
	if a.Is4() {
		ranges = forbiddenV4
	}
	for _, rc := range ranges {
		if rc.prefix.Contains(a) {
			return rc.class
		}
	}
	if a.Is6() && !globalUnicast.Contains(a) {
		return ClassNotGlobal
	}
	return ClassPublic
}

// Vetter is the operator's view of addresses, the part of a decision
// that no session can change: the proxy's own addresses (Own) and the
// SandboxNets prefixes are refused before anything else, then the
// operator's ExtraAllowed prefixes open ranges ClassOf forbids. The zero
// value applies ClassOf alone. A Vetter is safe for concurrent use if not
// modified.
type Vetter struct {
	ExtraAllowed []netip.Prefix
	// SandboxNets are prefixes refused whatever ExtraAllowed says: the
	// sandbox networks' pools, whose far ends are other sessions'
	// sandboxes that the proxy, dialling from the host namespace, could
	// otherwise reach.
	SandboxNets []netip.Prefix
	Own         func(netip.Addr) bool
}

// Class returns the class of a for dialling: ClassSandboxNet, then
// ClassOwn (or the address's forbidden range, which names it better,
// unless ExtraAllowed covers it), then ClassExtraAllowed for a forbidden
// address that ExtraAllowed covers, else ClassOf(a).
func (v Vetter) Class(a netip.Addr) AddrClass {
	if !a.IsValid() || a.Zone() != "" {
		return ClassInvalid
	}
	u := a.Unmap()
	for _, p := range v.SandboxNets {
		if p.Contains(u) {
			return ClassSandboxNet
		}
	}
	extra := v.extra(u)
	c := ClassOf(u)
	if v.Own != nil && v.Own(u) {
		if c != ClassPublic && !extra {
			return c
		}
		return ClassOwn
	}
	if c != ClassPublic && extra {
		return ClassExtraAllowed
	}
	return c
}

func (v Vetter) extra(u netip.Addr) bool {
	for _, p := range v.ExtraAllowed {
		if p.Contains(u) {
			return true
		}
	}
	return false
}
