package policy

import (
	"errors"
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

// FuzzDecide checks the decision on any rules and target: it never
// panics; an allowed address is public, or covered by ExtraAllowed, and
// never the proxy's own address or a sandbox network, whatever the allow
// entries say; a matching deny entry always refuses; an allowed target is
// covered by an allow entry of its kind (a name by a domain entry, an
// address by an address entry).
func FuzzDecide(f *testing.F) {
	f.Add("10.0.0.0/8\n0.0.0.0/0", "", "", "10.1.2.3", "", "198.18.0.0/24")
	f.Add("*.example.test", "evil.example.test", "evil.example.test", "93.184.216.34", "", "")
	f.Add("203.0.113.0/24", "203.0.113.7", "", "203.0.113.7", "", "203.0.113.0/24")
	f.Add("::/0\n0.0.0.0/0", "::ffff:93.184.216.7", "", "::ffff:93.184.216.7", "", "")
	f.Add("93.184.216.0/24", "*.evil.test", "", "93.184.216.34", "x.evil.test", "")
	f.Add("*.example.test", "93.184.216.0/24", "www.example.test", "93.184.216.34", "", "")
	f.Add("0.0.0.0/0", "", "", "198.51.100.9", "", "198.51.100.0/24")
	f.Add("", "", "a.example.test", "", "", "")
	own := netip.MustParseAddr("198.51.100.9")
	pool := netip.MustParsePrefix("10.200.0.0/16")
	f.Fuzz(func(t *testing.T, allow, deny, host, addr, sni, extra string) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, "\n")
		}
		pol, err := New(Rules{Enabled: true, Allowed: split(allow), Denied: split(deny)})
		if err != nil {
			return
		}
		v := Vetter{SandboxNets: []netip.Prefix{pool}, Own: func(a netip.Addr) bool { return a == own }}
		for _, e := range split(extra) {
			if p, err := netip.ParsePrefix(e); err == nil {
				v.ExtraAllowed = append(v.ExtraAllowed, p.Masked())
			}
		}
		a := Args{Policy: pol, Port: 443}
		if h, err := CanonicalHost(host); err == nil {
			a.Host = h
		}
		if s, err := CanonicalHost(sni); err == nil {
			a.SNI = s
		}
		if ad, err := netip.ParseAddr(addr); err == nil {
			a.Addr = ad
		}
		d := v.Decide(a)
		if d.String() == "" {
			t.Fatal("decision without words")
		}
		u := a.Addr.Unmap()
		for _, e := range pol.Deny {
			hit := e.matchHost(a.Host) || e.matchHost(a.SNI)
			if e.IsAddress() && a.Addr.IsValid() && a.Addr.Zone() == "" && e.Prefix().Contains(u) {
				hit = true
			}
			if hit && (d.Allowed() || d.Cause != CauseDenied) {
				t.Fatalf("deny entry %q matched, decision %+v", e, d)
			}
		}
		if !d.Allowed() {
			return
		}
		if a.Addr.IsValid() {
			covered := false
			for _, p := range v.ExtraAllowed {
				covered = covered || p.Contains(u)
			}
			switch {
			case u == own || pool.Contains(u):
				t.Fatalf("allowed own or sandbox address %s: %+v", a.Addr, d)
			case ClassOf(u) != ClassPublic && !covered:
				t.Fatalf("allowed %s of class %s not covered by extra_allowed_cidrs: %+v", a.Addr, ClassOf(u), d)
			case d.Class != ClassPublic && d.Class != ClassExtraAllowed:
				t.Fatalf("allowed with class %s", d.Class)
			}
		}
		matched := a.Host != "" && len(pol.Allow) == 0
		for _, e := range pol.Allow {
			if a.Host != "" {
				matched = matched || (!e.IsAddress() && e.pattern.Match(a.Host))
			} else {
				matched = matched || (e.IsAddress() && e.Prefix().Contains(u))
			}
		}
		if !matched {
			t.Fatalf("allowed %+v without a matching allow entry: %+v", a, d)
		}
	})
}

func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "1.2.3.4/32", "1.2.3.4/24", "::ffff:1.2.3.4", "::ffff:1.2.3.0/120", "fe80::1%eth0", "0177.0.0.1", "[::1]", "*.example.com", "0.0.0.0/0", "2001:db8::/33"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		e, err := ParseEntry(ListDenied, in)
		if err != nil {
			var pe *PatternError
			if !errors.As(err, &pe) || pe.List != ListDenied || e != (Entry{}) {
				t.Fatalf("error %v for %q is not a denied PatternError", err, in)
			}
			return
		}
		s := e.String()
		again, err := ParseEntry(ListAllowed, s)
		if err != nil || again != e || again.String() != s {
			t.Fatalf("round trip of %q from %q: %v, %v", s, in, again, err)
		}
		if e.IsAddress() {
			p := e.Prefix()
			if p != p.Masked() || p.Addr().Zone() != "" || p.Addr().Is4In6() {
				t.Fatalf("non-canonical prefix %s from %q", p, in)
			}
		}
	})
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"example.com:443", "1.2.3.4:443", "[::1]:443", "[::ffff:1.2.3.4]:443", "[1.2.3.4]:443", "[fe80::1%eth0]:443", "0x7f.1:443", "127.1:443"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		tg, err := ParseTarget(in, nil)
		if err != nil {
			return
		}
		if tg.Port != 443 || (tg.Host == "") == !tg.Addr.IsValid() {
			t.Fatalf("bad target %+v from %q", tg, in)
		}
		if tg.Addr.IsValid() && (tg.Addr.Zone() != "" || tg.Addr.Is4In6()) {
			t.Fatalf("non-canonical address %s from %q", tg.Addr, in)
		}
		again, err := ParseTarget(tg.String(), nil)
		if err != nil || again != tg {
			t.Fatalf("round trip %q: %+v %v", tg, again, err)
		}
	})
}
