package policy

import (
	"errors"
	"net/netip"
	"strings"
)

// List names the list of a session's network block an entry comes from.
type List string

// Lists of a network block.
const (
	ListAllowed List = "allowed_domains"
	ListDenied  List = "denied"
)

// Entry is one parsed allowed_domains or denied entry: a domain Pattern,
// or an address rule (an IP address or a CIDR prefix). The zero value
// matches nothing. Entries are comparable; equal entries have equal
// String forms.
type Entry struct {
	pattern Pattern
	prefix  netip.Prefix // valid for an address rule
}

// ParseEntry parses one entry of list (see ParseEntries): an address
// rule when it holds a '/' or parses as an IP address, a domain pattern
// (see ParsePattern) otherwise. The returned error is a *PatternError
// naming list.
//
// An address rule is canonical on the way in: "1.2.3.4" and "1.2.3.4/32"
// are one rule; an IPv4-mapped IPv6 address or prefix ("::ffff:1.2.3.4",
// "::ffff:1.2.3.0/120") is its IPv4 form, so IPv4 destinations are matched
// by IPv4 rules only. Refused: host bits set ("1.2.3.4/24": the caller
// probably meant one of two things, so neither is guessed), zones
// ("fe80::1%eth0"), brackets, ports, prefix lengths out of range, and
// the numeric forms only some parsers take as IPv4 (octal, hex, short
// "127.1", a bare integer).
func ParseEntry(list List, entry string) (Entry, error) {
	fail := func(reason string) (Entry, error) {
		return Entry{}, &PatternError{List: list, Entry: entry, Reason: reason}
	}
	if strings.ContainsAny(entry, "[]") {
		return fail("bracketed literal (write an IPv6 address without brackets)")
	}
	if head, _, ok := strings.Cut(entry, "%"); ok {
		if _, err := netip.ParseAddr(head); err == nil {
			return fail("zoned address (a zone names a local interface)")
		}
	}
	if strings.Contains(entry, "/") {
		p, err := netip.ParsePrefix(entry)
		if err != nil {
			return fail("not an IP address or CIDR prefix")
		}
		if p != p.Masked() {
			return fail("CIDR prefix has host bits set (the network is " + p.Masked().String() + ")")
		}
		if p.Addr().Is4In6() {
			// Masked, so at least /96: a shorter prefix has host bits
			// among the mapped form's ffff.
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return Entry{prefix: p}, nil
	}
	if a, err := netip.ParseAddr(entry); err == nil {
		a = a.Unmap()
		return Entry{prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	if host, _, ok := strings.Cut(entry, ":"); ok && strings.Count(entry, ":") == 1 {
		if _, err := netip.ParseAddr(host); err == nil {
			return fail("contains a port (an entry allows every allowed port)")
		}
	}
	if strings.Contains(entry, ":") && looksLikeV6(entry) {
		return fail("not a valid IPv6 address")
	}
	p, err := ParsePattern(entry)
	if err != nil {
		var pe *PatternError
		if errors.As(err, &pe) {
			pe.List = list
			return Entry{}, pe
		}
		return fail(err.Error())
	}
	return Entry{pattern: p}, nil
}

// looksLikeV6 reports whether s is made only of the bytes of an IPv6
// literal, so that its error says so rather than "contains a colon".
func looksLikeV6(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isHex(c) && c != ':' && c != '.' {
			return false
		}
	}
	return true
}

// ParseEntries parses every entry of list and returns the errors of all
// bad entries joined, so a client sees every problem at once.
func ParseEntries(list List, entries []string) ([]Entry, error) {
	out := make([]Entry, 0, len(entries))
	var errs []error
	for _, s := range entries {
		e, err := ParseEntry(list, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, e)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// MustParseEntries is ParseEntries for tests and constants; it panics on
// error.
func MustParseEntries(list List, entries ...string) []Entry {
	e, err := ParseEntries(list, entries)
	if err != nil {
		panic(err)
	}
	return e
}

// String returns the canonical entry: the pattern, the address for a
// one-address rule, or the masked prefix.
func (e Entry) String() string {
	if e.prefix.IsValid() {
		if e.prefix.IsSingleIP() {
			return e.prefix.Addr().String()
		}
		return e.prefix.String()
	}
	return e.pattern.String()
}

// IsAddress reports whether e is an address rule.
func (e Entry) IsAddress() bool { return e.prefix.IsValid() }

// Prefix returns the prefix of an address rule (invalid for a domain).
func (e Entry) Prefix() netip.Prefix { return e.prefix }

// matchHost reports whether e is a domain pattern matching the canonical
// host h.
func (e Entry) matchHost(h string) bool {
	return h != "" && !e.prefix.IsValid() && e.pattern.matchCanonical(h)
}

// matchAddr reports whether e is an address rule containing a, compared
// unmapped; a zoned address never matches.
func (e Entry) matchAddr(a netip.Addr) bool {
	if !e.prefix.IsValid() || !a.IsValid() || a.Zone() != "" {
		return false
	}
	return e.prefix.Contains(a.Unmap())
}
