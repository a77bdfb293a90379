package policy

import (
	"errors"
	"net/netip"
	"strconv"
)

// Rules is a session's network block as the client sent it: the input of
// New. A new rule kind is a field here, its parsing in New and its test
// in Decide; nothing outside this package changes but the API field that
// fills it.
type Rules struct {
	Enabled bool
	Allowed []string // allowed_domains; none: any public host name
	Denied  []string // denied; they win over Allowed
}

// Policy is a session's parsed rules. The zero value denies everything.
// With Enabled and no Allow entries, any host name is allowed (address
// vetting still applies) but no address target. It is a plain value,
// safe for concurrent reads.
type Policy struct {
	Enabled bool
	Allow   []Entry
	Deny    []Entry
}

// New parses r. The error joins a *PatternError for every bad entry of
// either list (a 400 for the client).
func New(r Rules) (Policy, error) {
	allow, aerr := ParseEntries(ListAllowed, r.Allowed)
	deny, derr := ParseEntries(ListDenied, r.Denied)
	if aerr != nil || derr != nil {
		return Policy{}, errors.Join(aerr, derr)
	}
	if len(allow) == 0 {
		allow = nil
	}
	if len(deny) == 0 {
		deny = nil
	}
	return Policy{Enabled: r.Enabled, Allow: allow, Deny: deny}, nil
}

// Mode says how a connection reached the proxy.
type Mode uint8

// Modes. The zero value is ModeConnect.
const (
	ModeConnect     Mode = iota // explicit proxy: CONNECT host:port
	ModeTransparent             // TLS sent to the proxy's address, routed by SNI
)

// String returns "connect" or "transparent".
func (m Mode) String() string {
	if m == ModeTransparent {
		return "transparent"
	}
	return "connect"
}

// Args is everything a decision depends on, in one value (as
// smokescreen's DecideArgs): a new input is a new field, not a new
// signature in every caller.
type Args struct {
	// Policy is the session's rules.
	Policy Policy
	Mode   Mode
	// Host is the canonical host name asked for (CONNECT or SNI); empty
	// when the target is an address.
	Host string
	// Addr is the address to be dialled: the target of a CONNECT to an
	// address, or one address Host resolved to. Zero before resolution:
	// then only the name is decided (a name allowed now must be decided
	// again for each address it resolves to).
	Addr netip.Addr
	Port uint16
	// SNI is the canonical TLS server name a client sent for an address
	// target, when known; it is checked against the deny entries only.
	SNI string
}

// Verdict is allow or deny. The zero value is VerdictDeny.
type Verdict uint8

// Verdicts.
const (
	VerdictDeny Verdict = iota
	VerdictAllow
)

// String returns "allow" or "deny".
func (v Verdict) String() string {
	if v == VerdictAllow {
		return "allow"
	}
	return "deny"
}

// Cause says why a decision went the way it did, from a fixed set.
type Cause string

// Causes of decisions.
const (
	CauseAllowed         Cause = "allowed"           // an allow entry matched
	CauseAllowedAny      Cause = "allowed_any"       // no allow list: any host name
	CauseNetworkDisabled Cause = "network_disabled"  // the session has no network
	CauseNotAllowed      Cause = "not_allowed"       // no allow entry matched the name
	CauseAddrNotAllowed  Cause = "addr_not_allowed"  // no address entry covers the address target
	CauseDenied          Cause = "denied"            // a deny entry matched
	CauseForbiddenAddr   Cause = "forbidden_address" // the address's class may not be dialled
	CauseNoTarget        Cause = "no_target"         // neither a host nor an address
)

// Rule names the entry that decided: its list and canonical form. The
// zero value is no entry.
type Rule struct {
	List  List
	Entry string
}

// String returns `allowed_domains "x"` or "" for no entry.
func (r Rule) String() string {
	if r.Entry == "" {
		return ""
	}
	return string(r.List) + " " + strconv.Quote(r.Entry)
}

// Decision is the typed result of Decide.
type Decision struct {
	Verdict Verdict
	Cause   Cause
	// Rule is the entry that matched: the deny entry of a denial, the
	// allow entry of an allowed target (also when its address is then
	// refused). Zero when none matched.
	Rule Rule
	// Class is the class of Args.Addr, empty when it was not set.
	Class AddrClass
}

// Allowed reports whether the verdict is allow.
func (d Decision) Allowed() bool { return d.Verdict == VerdictAllow }

// String says in words why, for the audit's reason.
func (d Decision) String() string {
	var s string
	switch d.Cause {
	case CauseAllowed:
		s = "matched " + d.Rule.String()
	case CauseAllowedAny:
		s = "network enabled, no allowed_domains list"
	case CauseNetworkDisabled:
		s = "network disabled for session"
	case CauseNotAllowed:
		s = "host not in allowed_domains"
	case CauseAddrNotAllowed:
		s = "address not in allowed_domains"
	case CauseDenied:
		s = "matched " + d.Rule.String()
	case CauseForbiddenAddr:
		s = "forbidden address (" + d.Class.Describe() + ")"
	case CauseNoTarget:
		s = "no host or address to decide on"
	default:
		s = string(d.Cause)
	}
	if d.Class != "" && d.Cause != CauseForbiddenAddr {
		s += "; address " + d.Class.Describe()
	}
	return s
}

// Decide is the one egress decision. In order: a session without network
// is refused; a deny entry matching the host, the SNI or the address
// refuses (deny wins over every allow); a host name must match a domain
// entry of Allow (any name when Allow is empty) and an address target an
// address entry (never by default); finally, when Addr is set, its class
// must be dialable (public, or opened by the operator's ExtraAllowed):
// an allow entry never opens a private, loopback, link-local or other
// forbidden range, nor the proxy's own address.
//
// A host name is allowed by domain entries only, never because it
// resolved into an allowed address range: otherwise the proxy would
// resolve any name a sandbox asks for, a channel out through DNS.
func (v Vetter) Decide(a Args) Decision {
	var d Decision
	if a.Addr.IsValid() {
		d.Class = v.Class(a.Addr)
	}
	if !a.Policy.Enabled {
		d.Cause = CauseNetworkDisabled
		return d
	}
	// A deny entry refuses whatever else is missing: a name the sandbox
	// sent only in its TLS hello is still reported as denied.
	for _, e := range a.Policy.Deny {
		if e.matchHost(a.Host) || e.matchHost(a.SNI) || e.matchAddr(a.Addr) {
			d.Cause, d.Rule = CauseDenied, Rule{List: ListDenied, Entry: e.String()}
			return d
		}
	}
	if a.Host == "" && !a.Addr.IsValid() {
		d.Cause = CauseNoTarget
		return d
	}
	allowed := CauseAllowed
	if a.Host != "" {
		d.Cause = CauseNotAllowed
		if len(a.Policy.Allow) == 0 {
			allowed = CauseAllowedAny
		}
		for _, e := range a.Policy.Allow {
			if e.matchHost(a.Host) {
				d.Rule = Rule{List: ListAllowed, Entry: e.String()}
				break
			}
		}
	} else {
		d.Cause = CauseAddrNotAllowed
		for _, e := range a.Policy.Allow {
			if e.matchAddr(a.Addr) {
				d.Rule = Rule{List: ListAllowed, Entry: e.String()}
				break
			}
		}
	}
	if d.Rule == (Rule{}) && allowed != CauseAllowedAny {
		return d
	}
	if a.Addr.IsValid() && !d.Class.Dialable() {
		d.Cause = CauseForbiddenAddr
		return d
	}
	d.Verdict, d.Cause = VerdictAllow, allowed
	return d
}
