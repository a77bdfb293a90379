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

func TestPolicyAllows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy Policy
		host   string
		want   bool
	}{
		{name: "zero value denies", policy: Policy{}, host: "example.com", want: false},
		{name: "enabled no list allows any", policy: Policy{Enabled: true}, host: "example.org", want: true},
		{name: "listed", policy: Policy{Enabled: true, Domains: MustParsePatterns("*.example.com")}, host: "a.example.com", want: true},
		{name: "not listed", policy: Policy{Enabled: true, Domains: MustParsePatterns("*.example.com")}, host: "example.org", want: false},
		{name: "disabled with list", policy: Policy{Domains: MustParsePatterns("example.com")}, host: "example.com", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reason, got := tt.policy.Allows(tt.host)
			if got != tt.want || reason == "" {
				t.Fatalf("Allows(%q) = %q, %v; want %v with a reason", tt.host, reason, got, tt.want)
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

func TestForbidden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		addr   string
		reason string // empty: allowed
	}{
		{name: "public v4", addr: "93.184.216.34"},
		{name: "public v6", addr: "2606:2800:220:1:248:1893:25c8:1946"},
		{name: "loopback", addr: "127.0.0.1", reason: "loopback"},
		{name: "loopback other", addr: "127.255.0.9", reason: "loopback"},
		{name: "private 10", addr: "10.1.2.3", reason: "private"},
		{name: "private 172", addr: "172.31.255.255", reason: "private"},
		{name: "not private 172.32", addr: "172.32.0.1"},
		{name: "private 192.168", addr: "192.168.1.1", reason: "private"},
		{name: "metadata", addr: "169.254.169.254", reason: "cloud metadata"},
		{name: "link-local", addr: "169.254.1.1", reason: "link-local"},
		{name: "cgnat", addr: "100.64.0.1", reason: "carrier-grade NAT"},
		{name: "cgnat end", addr: "100.127.255.255", reason: "carrier-grade NAT"},
		{name: "multicast", addr: "224.0.0.1", reason: "multicast"},
		{name: "unspecified", addr: "0.0.0.0", reason: "unspecified"},
		{name: "zero net", addr: "0.1.2.3", reason: "this network"},
		{name: "broadcast", addr: "255.255.255.255", reason: "broadcast"},
		{name: "benchmarking", addr: "198.19.0.1", reason: "benchmarking"},
		{name: "doc 1", addr: "192.0.2.1", reason: "documentation"},
		{name: "doc 2", addr: "198.51.100.1", reason: "documentation"},
		{name: "doc 3", addr: "203.0.113.1", reason: "documentation"},
		{name: "reserved", addr: "240.0.0.1", reason: "reserved"},
		{name: "v6 unspecified", addr: "::", reason: "unspecified"},
		{name: "v6 loopback", addr: "::1", reason: "loopback"},
		{name: "ula", addr: "fd12::1", reason: "unique local"},
		{name: "v6 link-local", addr: "fe80::1", reason: "link-local"},
		{name: "v6 zoned", addr: "fe80::1%eth0", reason: "zoned"},
		{name: "v6 multicast", addr: "ff02::1", reason: "multicast"},
		{name: "mapped loopback", addr: "::ffff:127.0.0.1", reason: "IPv4-mapped loopback"},
		{name: "mapped metadata", addr: "::ffff:169.254.169.254", reason: "IPv4-mapped cloud metadata"},
		{name: "mapped public", addr: "::ffff:93.184.216.34"},
		{name: "compatible", addr: "::127.0.0.1", reason: "IPv4-compatible"},
		{name: "compatible public", addr: "::93.184.216.34", reason: "IPv4-compatible"},
		{name: "nat64", addr: "64:ff9b::7f00:1", reason: "NAT64"},
		{name: "nat64 public", addr: "64:ff9b::5db8:d822", reason: "NAT64"},
		{name: "local nat64", addr: "64:ff9b:1::1", reason: "local-use NAT64"},
		{name: "6to4 loopback", addr: "2002:7f00:1::1", reason: "6to4"},
		{name: "6to4 metadata", addr: "2002:a9fe:a9fe::1", reason: "6to4"},
		{name: "6to4 public", addr: "2002:5db8:d822::1", reason: "6to4"},
		{name: "6to4 first", addr: "2002::", reason: "6to4"},
		{name: "6to4 last", addr: "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", reason: "6to4"},
		{name: "after 6to4", addr: "2003::1"},
		{name: "public 2001 outside the IETF block", addr: "2001:200::1"},
		{name: "teredo", addr: "2001:0:4136:e378:8000:63bf:3fff:fdd2", reason: "Teredo"},
		{name: "teredo first", addr: "2001::", reason: "Teredo"},
		{name: "teredo last", addr: "2001:0:ffff:ffff:ffff:ffff:ffff:ffff", reason: "Teredo"},
		{name: "nat64 first", addr: "64:ff9b::", reason: "NAT64"},
		{name: "nat64 last", addr: "64:ff9b::ffff:ffff", reason: "NAT64"},
		{name: "local nat64 last", addr: "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", reason: "local-use NAT64"},
		{name: "v6 documentation", addr: "2001:db8::1", reason: "documentation"},
		{name: "v6 reserved", addr: "4000::1", reason: "not global unicast"},
		{name: "aws v6 metadata", addr: "fd00:ec2::254", reason: "cloud metadata"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := netip.MustParseAddr(tt.addr)
			reason, bad := Forbidden(a)
			if tt.reason == "" {
				if bad {
					t.Fatalf("Forbidden(%s) = %q, want allowed", a, reason)
				}
				return
			}
			if !bad || !strings.Contains(reason, tt.reason) {
				t.Fatalf("Forbidden(%s) = %q, %v; want %q", a, reason, bad, tt.reason)
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
		Denied: []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16"), netip.MustParsePrefix("10.201.0.0/16")},
		Own:    func(a netip.Addr) bool { return a == own },
	}
	tests := []struct {
		name   string
		addr   string
		reason string
	}{
		{name: "extra allowed", addr: "127.0.0.2"},
		{name: "extra allowed mapped", addr: "::ffff:127.0.0.2"},
		{name: "rest of loopback", addr: "127.0.0.3", reason: "loopback"},
		{name: "own beats extra", addr: "127.0.0.9", reason: ReasonOwnAddress},
		{name: "own mapped", addr: "::ffff:127.0.0.9", reason: ReasonOwnAddress},
		{name: "extra allowed private", addr: "10.1.2.3"},
		{name: "another session's sandbox", addr: "10.200.7.2", reason: ReasonSandboxNetwork},
		{name: "another session's host side", addr: "10.200.7.1", reason: ReasonSandboxNetwork},
		{name: "pool first", addr: "10.200.0.0", reason: ReasonSandboxNetwork},
		{name: "pool last", addr: "10.200.255.255", reason: ReasonSandboxNetwork},
		{name: "installer pool", addr: "10.201.0.2", reason: ReasonSandboxNetwork},
		{name: "pool mapped", addr: "::ffff:10.200.7.2", reason: ReasonSandboxNetwork},
		{name: "next to pool", addr: "10.202.0.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reason, bad := v.Check(netip.MustParseAddr(tt.addr))
			if (tt.reason == "") == bad || !strings.Contains(reason, tt.reason) {
				t.Fatalf("Check(%s) = %q, %v; want %q", tt.addr, reason, bad, tt.reason)
			}
		})
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	p, err := New(true, []string{"*.Example.com", "api.example.org"})
	if err != nil || !p.Enabled || len(p.Domains) != 2 {
		t.Fatalf("New = %+v, %v", p, err)
	}
	if _, ok := p.Allows("a.example.com"); !ok {
		t.Fatal("wildcard not applied")
	}
	if _, err := New(true, []string{"ok.example.com", "*"}); !errors.Is(err, ErrInvalidPattern) {
		t.Fatalf("New with bad entry: %v", err)
	}
	if p, err := New(true, nil); err != nil || p.Domains != nil {
		t.Fatalf("New without list = %+v, %v", p, err)
	}
}
