package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParsePattern(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entry   string
		want    string
		wantErr string
	}{
		{name: "exact", entry: "api.example.com", want: "api.example.com"},
		{name: "upper and trailing dot", entry: "API.Example.COM.", want: "api.example.com"},
		{name: "wildcard", entry: "*.example.com", want: "*.example.com"},
		{name: "unicode to punycode", entry: "bücher.example", want: "xn--bcher-kva.example"},
		{name: "wildcard under private registrable", entry: "*.example.co.uk", want: "*.example.co.uk"},
		{name: "star alone", entry: "*", wantErr: "wildcard"},
		{name: "star dot", entry: "*.", wantErr: "wildcard"},
		{name: "partial label wildcard", entry: "a*.b.com", wantErr: "wildcard"},
		{name: "inner wildcard", entry: "a.*.b.com", wantErr: "wildcard"},
		{name: "double wildcard", entry: "*.*.example.com", wantErr: "wildcard"},
		{name: "public suffix com", entry: "*.com", wantErr: "public suffix"},
		{name: "public suffix co.uk", entry: "*.co.uk", wantErr: "public suffix"},
		{name: "private public suffix", entry: "*.github.io", wantErr: "public suffix"},
		{name: "ipv4 literal", entry: "10.0.0.1", wantErr: "IP literal"},
		{name: "ipv6 literal", entry: "::1", wantErr: "colon"},
		{name: "bracketed ipv6", entry: "[::1]", wantErr: "bracketed"},
		{name: "port", entry: "example.com:443", wantErr: "colon"},
		{name: "empty", entry: "", wantErr: "wildcard"},
		{name: "empty label", entry: "a..example.com", wantErr: "empty label"},
		{name: "leading dot", entry: ".example.com", wantErr: "empty label"},
		{name: "nul", entry: "example.com\x00.evil", wantErr: "control"},
		{name: "space", entry: "exa mple.com", wantErr: "control"},
		{name: "single label", entry: "localhost", wantErr: "single-label"},
		{name: "numeric tld", entry: "127.1", wantErr: "numeric"},
		{name: "hex number", entry: "0x7f000001", wantErr: "single-label"},
		{name: "url", entry: "https://example.com", wantErr: "colon"},
		{name: "underscore", entry: "a_b.example.com", wantErr: "IDNA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := ParsePattern(tt.entry)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParsePattern(%q) = %v, want error containing %q", tt.entry, p, tt.wantErr)
				}
				if !errors.Is(err, ErrInvalidPattern) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParsePattern(%q) error = %v, want ErrInvalidPattern containing %q", tt.entry, err, tt.wantErr)
				}
				var pe *PatternError
				if !errors.As(err, &pe) || pe.Entry != tt.entry {
					t.Fatalf("error %v does not name entry %q", err, tt.entry)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePattern(%q): %v", tt.entry, err)
			}
			if got := p.String(); got != tt.want {
				t.Fatalf("ParsePattern(%q) = %q, want %q", tt.entry, got, tt.want)
			}
		})
	}
}

func TestParsePatternsNamesEveryBadEntry(t *testing.T) {
	t.Parallel()
	_, err := ParsePatterns([]string{"ok.example.com", "*.com", "1.2.3.4"})
	if err == nil {
		t.Fatal("want error")
	}
	for _, want := range []string{`"*.com"`, `"1.2.3.4"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestPatternMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		pattern string
		host    string
		want    bool
	}{
		{name: "exact", pattern: "api.example.com", host: "api.example.com", want: true},
		{name: "exact case and dot", pattern: "api.example.com", host: "API.EXAMPLE.COM.", want: true},
		{name: "exact not sub", pattern: "api.example.com", host: "x.api.example.com", want: false},
		{name: "wildcard one level", pattern: "*.example.com", host: "a.example.com", want: true},
		{name: "wildcard deep", pattern: "*.example.com", host: "a.b.c.example.com", want: true},
		{name: "wildcard never apex", pattern: "*.example.com", host: "example.com", want: false},
		{name: "wildcard apex with dot", pattern: "*.example.com", host: "example.com.", want: false},
		{name: "suffix without dot", pattern: "*.example.com", host: "evilexample.com", want: false},
		{name: "suffix inside", pattern: "*.example.com", host: "example.com.evil.test", want: false},
		{name: "exact suffix inside", pattern: "example.com", host: "example.com.evil.test", want: false},
		{name: "idna unicode host", pattern: "bücher.example", host: "BÜCHER.example", want: true},
		{name: "idna punycode host", pattern: "bücher.example", host: "xn--bcher-kva.example", want: true},
		{name: "idna wildcard", pattern: "*.bücher.example", host: "www.xn--bcher-kva.example.", want: true},
		{name: "nul host", pattern: "*.example.com", host: "a.example.com\x00", want: false},
		{name: "double trailing dot", pattern: "example.com", host: "example.com..", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := ParsePattern(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Match(tt.host); got != tt.want {
				t.Fatalf("%s.Match(%q) = %v, want %v", p, tt.host, got, tt.want)
			}
		})
	}
}

func TestParseHostPort(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		ports   []uint16
		want    HostPort
		wantErr string
	}{
		{name: "ok", in: "Example.COM.:443", want: HostPort{Host: "example.com", Port: 443}},
		{name: "configured port", in: "example.com:8443", ports: []uint16{443, 8443}, want: HostPort{Host: "example.com", Port: 8443}},
		{name: "port not allowed", in: "example.com:80", wantErr: "not allowed"},
		{name: "no port", in: "example.com", wantErr: "missing port"},
		{name: "empty port", in: "example.com:", wantErr: "bad port"},
		{name: "leading zero port", in: "example.com:0443", wantErr: "bad port"},
		{name: "signed port", in: "example.com:+443", wantErr: "bad port"},
		{name: "huge port", in: "example.com:99999", wantErr: "bad port"},
		{name: "decimal ip", in: "2130706433:443", wantErr: "single-label"},
		{name: "hex ip", in: "0x7f000001:443", wantErr: "single-label"},
		{name: "octal ip", in: "0177.0.0.1:443", wantErr: "numeric"},
		{name: "short ip", in: "127.1:443", wantErr: "numeric"},
		{name: "dotted ip", in: "127.0.0.1:443", wantErr: "IP literal"},
		{name: "hex last label", in: "foo.0x7f:443", wantErr: "numeric"},
		{name: "bracket v6", in: "[::1]:443", wantErr: "bracketed"},
		{name: "bracket name", in: "[example.com]:443", wantErr: "bracketed"},
		{name: "v6 no bracket", in: "::1:443", wantErr: "colon"},
		{name: "nul", in: "example.com\x00.evil.test:443", wantErr: "NUL"},
		{name: "percent", in: "ex%61mple.com:443", wantErr: "contains"},
		{name: "userinfo", in: "user@example.com:443", wantErr: "contains"},
		{name: "empty host", in: ":443", wantErr: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseHostPort(tt.in, tt.ports)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalidHost) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseHostPort(%q) = %v, %v; want ErrInvalidHost containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseHostPort(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestClassOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		addr  string
		class AddrClass // empty: public
	}{
		{name: "public v4", addr: "93.184.216.34"},
		{name: "public v6", addr: "2606:2800:220:1:248:1893:25c8:1946"},
		{name: "loopback", addr: "127.0.0.1", class: ClassLoopback},
		{name: "loopback other", addr: "127.255.0.9", class: ClassLoopback},
		{name: "private 10", addr: "10.1.2.3", class: ClassPrivate},
		{name: "private 172", addr: "172.31.255.255", class: ClassPrivate},
		{name: "not private 172.32", addr: "172.32.0.1"},
		{name: "private 192.168", addr: "192.168.1.1", class: ClassPrivate},
		{name: "metadata", addr: "169.254.169.254", class: ClassMetadata},
		{name: "link-local", addr: "169.254.1.1", class: ClassLinkLocal},
		{name: "cgnat", addr: "100.64.0.1", class: ClassCGNAT},
		{name: "cgnat end", addr: "100.127.255.255", class: ClassCGNAT},
		{name: "multicast", addr: "224.0.0.1", class: ClassMulticast},
		{name: "unspecified", addr: "0.0.0.0", class: ClassUnspecified},
		{name: "zero net", addr: "0.1.2.3", class: ClassThisNetwork},
		{name: "broadcast", addr: "255.255.255.255", class: ClassBroadcast},
		{name: "benchmarking", addr: "198.19.0.1", class: ClassBenchmarking},
		{name: "doc 1", addr: "192.0.2.1", class: ClassDocumentation},
		{name: "doc 2", addr: "198.51.100.1", class: ClassDocumentation},
		{name: "doc 3", addr: "203.0.113.1", class: ClassDocumentation},
		{name: "reserved", addr: "240.0.0.1", class: ClassReserved},
		{name: "v6 unspecified", addr: "::", class: ClassUnspecified},
		{name: "v6 loopback", addr: "::1", class: ClassLoopback},
		{name: "ula", addr: "fd12::1", class: ClassUniqueLocal},
		{name: "v6 link-local", addr: "fe80::1", class: ClassLinkLocal},
		{name: "v6 zoned", addr: "fe80::1%eth0", class: ClassInvalid},
		{name: "v6 multicast", addr: "ff02::1", class: ClassMulticast},
		{name: "mapped loopback", addr: "::ffff:127.0.0.1", class: ClassLoopback},
		{name: "mapped metadata", addr: "::ffff:169.254.169.254", class: ClassMetadata},
		{name: "mapped public", addr: "::ffff:93.184.216.34"},
		{name: "compatible", addr: "::127.0.0.1", class: ClassV4Compatible},
		{name: "compatible public", addr: "::93.184.216.34", class: ClassV4Compatible},
		{name: "nat64", addr: "64:ff9b::7f00:1", class: ClassNAT64},
		{name: "nat64 public", addr: "64:ff9b::5db8:d822", class: ClassNAT64},
		{name: "local nat64", addr: "64:ff9b:1::1", class: ClassLocalNAT64},
		{name: "6to4 loopback", addr: "2002:7f00:1::1", class: Class6to4},
		{name: "6to4 metadata", addr: "2002:a9fe:a9fe::1", class: Class6to4},
		{name: "6to4 public", addr: "2002:5db8:d822::1", class: Class6to4},
		{name: "6to4 first", addr: "2002::", class: Class6to4},
		{name: "6to4 last", addr: "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", class: Class6to4},
		{name: "after 6to4", addr: "2003::1"},
		{name: "public 2001 outside the IETF block", addr: "2001:200::1"},
		{name: "teredo", addr: "2001:0:4136:e378:8000:63bf:3fff:fdd2", class: ClassTeredo},
		{name: "teredo first", addr: "2001::", class: ClassTeredo},
		{name: "teredo last", addr: "2001:0:ffff:ffff:ffff:ffff:ffff:ffff", class: ClassTeredo},
		{name: "nat64 first", addr: "64:ff9b::", class: ClassNAT64},
		{name: "nat64 last", addr: "64:ff9b::ffff:ffff", class: ClassNAT64},
		{name: "local nat64 last", addr: "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", class: ClassLocalNAT64},
		{name: "v6 documentation", addr: "2001:db8::1", class: ClassDocumentation},
		{name: "v6 reserved", addr: "4000::1", class: ClassNotGlobal},
		{name: "aws v6 metadata", addr: "fd00:ec2::254", class: ClassMetadata},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := tt.class
			if want == "" {
				want = ClassPublic
			}
			if got := ClassOf(netip.MustParseAddr(tt.addr)); got != want {
				t.Fatalf("ClassOf(%s) = %q, want %q", tt.addr, got, want)
			}
		})
	}
}

func TestVetter(t *testing.T) {
	t.Parallel()
	own := netip.MustParseAddr("127.0.0.9")
	v := Vetter{
		ExtraAllowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32"), netip.MustParsePrefix("127.0.0.9/32"),
			netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::ffff:0:0/96")},
		SandboxNets: []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16"), netip.MustParsePrefix("10.201.0.0/16")},
		Own:         func(a netip.Addr) bool { return a == own },
	}
	tests := []struct {
		name  string
		addr  string
		class AddrClass
	}{
		{name: "extra allowed", addr: "127.0.0.2", class: ClassExtraAllowed},
		{name: "extra allowed mapped", addr: "::ffff:127.0.0.2", class: ClassExtraAllowed},
		{name: "rest of loopback", addr: "127.0.0.3", class: ClassLoopback},
		{name: "own beats extra", addr: "127.0.0.9", class: ClassOwn},
		{name: "own mapped", addr: "::ffff:127.0.0.9", class: ClassOwn},
		{name: "extra allowed private", addr: "10.1.2.3", class: ClassExtraAllowed},
		{name: "another session's sandbox", addr: "10.200.7.2", class: ClassSandboxNet},
		{name: "another session's host side", addr: "10.200.7.1", class: ClassSandboxNet},
		{name: "pool first", addr: "10.200.0.0", class: ClassSandboxNet},
		{name: "pool last", addr: "10.200.255.255", class: ClassSandboxNet},
		{name: "installer pool", addr: "10.201.0.2", class: ClassSandboxNet},
		{name: "pool mapped", addr: "::ffff:10.200.7.2", class: ClassSandboxNet},
		{name: "next to pool", addr: "10.202.0.2", class: ClassExtraAllowed},
		{name: "public", addr: "93.184.216.34", class: ClassPublic},
		{name: "zoned", addr: "fe80::1%eth0", class: ClassInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := v.Class(netip.MustParseAddr(tt.addr))
			if got != tt.class || got.Dialable() != (tt.class == ClassExtraAllowed || tt.class == ClassPublic) {
				t.Fatalf("Class(%s) = %q, want %q", tt.addr, got, tt.class)
			}
		})
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	p, err := New(Rules{Enabled: true, Allowed: []string{"*.Example.com", "api.example.org", "203.0.113.0/24"}, Denied: []string{"bad.example.com"}})
	if err != nil || !p.Enabled || len(p.Allow) != 3 || len(p.Deny) != 1 {
		t.Fatalf("New = %+v, %v", p, err)
	}
	if d := (Vetter{}).Decide(Args{Policy: p, Host: "a.example.com"}); !d.Allowed() || d.Rule.Entry != "*.example.com" {
		t.Fatalf("wildcard not applied: %+v", d)
	}
	_, err = New(Rules{Enabled: true, Allowed: []string{"ok.example.com", "*"}, Denied: []string{"10.0.0.1/8"}})
	var pe *PatternError
	if !errors.Is(err, ErrInvalidPattern) || !errors.As(err, &pe) || pe.List != ListAllowed {
		t.Fatalf("New with bad entries: %v", err)
	}
	if !strings.Contains(err.Error(), `invalid denied entry "10.0.0.1/8"`) || !strings.Contains(err.Error(), `invalid allowed_domains entry "*"`) {
		t.Fatalf("error %q does not name both bad entries with their lists", err)
	}
	if p, err := New(Rules{Enabled: true}); err != nil || p.Allow != nil || p.Deny != nil {
		t.Fatalf("New without lists = %+v, %v", p, err)
	}
}
