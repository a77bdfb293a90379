package policy

import (
	"net/netip"
	"strings"
	"testing"
)

func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com", "*", "*.", "a*.b.com", "*.co.uk", "bücher.example", "1.2.3.4", "[::1]", "a..b", "x\x00.com"} {
		f.Add(s, "a.example.com")
	}
	f.Fuzz(func(t *testing.T, entry, host string) {
		p, err := ParsePattern(entry)
		if err != nil {
			if p != (Pattern{}) {
				t.Fatalf("error with non-zero pattern %v", p)
			}
			return
		}
		s := p.String()
		if strings.ContainsAny(s, "\x00 :[]/") || s != strings.ToLower(s) {
			t.Fatalf("non-canonical pattern %q from %q", s, entry)
		}
		again, err := ParsePattern(s)
		if err != nil || again != p {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
		if p.Wildcard() && p.Match(strings.TrimPrefix(s, "*.")) {
			t.Fatalf("wildcard %q matched its apex", s)
		}
		if p.Match(host) {
			h, err := CanonicalHost(host)
			if err != nil {
				t.Fatalf("matched invalid host %q", host)
			}
			if _, err := netip.ParseAddr(h); err == nil {
				t.Fatalf("matched IP %q", host)
			}
		}
	})
}

func FuzzParseHostPort(f *testing.F) {
	for _, s := range []string{"example.com:443", "2130706433:443", "0x7f000001:443", "0177.0.0.1:443", "127.1:443", "[::1]:443", "a\x00b.com:443", "example.com.:443", "example.com:0443"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		hp, err := ParseHostPort(in, nil)
		if err != nil {
			return
		}
		if hp.Port != 443 {
			t.Fatalf("port %d accepted", hp.Port)
		}
		if _, err := netip.ParseAddr(hp.Host); err == nil {
			t.Fatalf("IP host %q accepted from %q", hp.Host, in)
		}
		if strings.ContainsAny(hp.Host, "\x00 :[]%@") {
			t.Fatalf("bad byte in host %q", hp.Host)
		}
		again, err := ParseHostPort(hp.String(), nil)
		if err != nil || again != hp {
			t.Fatalf("round trip %q: %v %v", hp, again, err)
		}
	})
}
