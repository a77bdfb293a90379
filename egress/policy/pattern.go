package policy

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// ErrInvalidPattern is wrapped by every error about a malformed
// allowed_domains or denied entry.
var ErrInvalidPattern = errors.New("invalid network rule entry")

// PatternError names the bad entry, its list and why it was rejected. It
// wraps ErrInvalidPattern.
type PatternError struct {
	List   List // ListAllowed when empty
	Entry  string
	Reason string
}

func (e *PatternError) Error() string {
	list := e.List
	if list == "" {
		list = ListAllowed
	}
	return fmt.Sprintf("invalid %s entry %q: %s", list, e.Entry, e.Reason)
}

// Unwrap returns ErrInvalidPattern.
func (e *PatternError) Unwrap() error { return ErrInvalidPattern }

// Pattern is one parsed allowed_domains entry: an exact name or an explicit
// wildcard "*.example.com" that matches sub-domains at any depth but never
// the apex. The zero value matches nothing.
type Pattern struct {
	base     string // canonical name (lowercase punycode, no trailing dot)
	wildcard bool
}

// ParsePattern parses one allowed_domains entry. It rejects "*", "*.",
// wildcards anywhere but a whole leading label, wildcards over a public
// suffix ("*.com", "*.co.uk", "*.github.io"), IP literals, ports, empty
// labels and control bytes. The returned error is a *PatternError.
func ParsePattern(entry string) (Pattern, error) {
	s := entry
	wildcard := false
	if strings.HasPrefix(s, "*.") {
		wildcard = true
		s = s[2:]
	}
	if strings.Contains(s, "*") || s == "" {
		return Pattern{}, &PatternError{Entry: entry, Reason: "wildcard must be a whole leading label followed by a domain"}
	}
	if wildcard && !strings.Contains(strings.TrimSuffix(s, "."), ".") {
		return Pattern{}, &PatternError{Entry: entry, Reason: "wildcard over a public suffix"}
	}
	base, err := CanonicalHost(s)
	if err != nil {
		var he *HostError
		if errors.As(err, &he) {
			return Pattern{}, &PatternError{Entry: entry, Reason: he.Reason}
		}
		return Pattern{}, &PatternError{Entry: entry, Reason: err.Error()}
	}
	if wildcard {
		if suffix, _ := publicsuffix.PublicSuffix(base); suffix == base {
			return Pattern{}, &PatternError{Entry: entry, Reason: "wildcard over a public suffix"}
		}
	}
	return Pattern{base: base, wildcard: wildcard}, nil
}

// ParsePatterns parses every entry and returns the errors of all bad
// entries joined, so a client sees every problem at once.
func ParsePatterns(entries []string) ([]Pattern, error) {
	out := make([]Pattern, 0, len(entries))
	var errs []error
	for _, e := range entries {
		p, err := ParsePattern(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, p)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// MustParsePatterns is ParsePatterns for tests and constants; it panics on
// error.
func MustParsePatterns(entries ...string) []Pattern {
	p, err := ParsePatterns(entries)
	if err != nil {
		panic(err)
	}
	return p
}

// String returns the canonical entry ("*.example.com" or "api.example.com").
func (p Pattern) String() string {
	if p.wildcard {
		return "*." + p.base
	}
	return p.base
}

// Wildcard reports whether p is a "*." pattern.
func (p Pattern) Wildcard() bool { return p.wildcard }

// Match reports whether host matches p. host may be in any case, with a
// trailing dot or in Unicode; it is canonicalised first and an invalid host
// never matches.
func (p Pattern) Match(host string) bool {
	h, err := CanonicalHost(host)
	if err != nil {
		return false
	}
	return p.matchCanonical(h)
}

func (p Pattern) matchCanonical(h string) bool {
	if p.base == "" {
		return false
	}
	if !p.wildcard {
		return h == p.base
	}
	return len(h) > len(p.base)+1 && strings.HasSuffix(h, p.base) && h[len(h)-len(p.base)-1] == '.'
}
