package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseEntry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entry   string
		want    string // canonical form
		addr    bool
		wantErr string
	}{
		{name: "domain", entry: "API.Example.com.", want: "api.example.com"},
		{name: "wildcard", entry: "*.example.com", want: "*.example.com"},
		{name: "ipv4", entry: "203.0.113.7", want: "203.0.113.7", addr: true},
		{name: "ipv4 /32 is the address", entry: "203.0.113.7/32", want: "203.0.113.7", addr: true},
		{name: "ipv4 cidr", entry: "203.0.113.0/24", want: "203.0.113.0/24", addr: true},
		{name: "ipv4 /0", entry: "0.0.0.0/0", want: "0.0.0.0/0", addr: true},
		{name: "ipv6", entry: "2001:DB8::1", want: "2001:db8::1", addr: true},
		{name: "ipv6 /128 is the address", entry: "2001:db8::1/128", want: "2001:db8::1", addr: true},
		{name: "ipv6 cidr", entry: "2001:db8::/32", want: "2001:db8::/32", addr: true},
		{name: "ipv6 /0", entry: "::/0", want: "::/0", addr: true},
		{name: "mapped address unmapped", entry: "::ffff:203.0.113.7", want: "203.0.113.7", addr: true},
		{name: "mapped prefix unmapped", entry: "::ffff:203.0.113.0/120", want: "203.0.113.0/24", addr: true},
		{name: "mapped prefix too short", entry: "::ffff:0:0/95", wantErr: "host bits"},
		{name: "mapped /96 is v4 /0", entry: "::ffff:0.0.0.0/96", want: "0.0.0.0/0", addr: true},
		{name: "host bits set", entry: "203.0.113.7/24", wantErr: "host bits set (the network is 203.0.113.0/24)"},
		{name: "v6 host bits set", entry: "2001:db8::1/64", wantErr: "host bits"},
		{name: "prefix /33", entry: "203.0.113.0/33", wantErr: "not an IP address or CIDR"},
		{name: "prefix /129", entry: "2001:db8::/129", wantErr: "not an IP address or CIDR"},
		{name: "negative prefix", entry: "203.0.113.0/-1", wantErr: "not an IP address or CIDR"},
		{name: "prefix with leading zero", entry: "203.0.113.0/024", wantErr: "not an IP address or CIDR"},
		{name: "empty prefix", entry: "203.0.113.0/", wantErr: "not an IP address or CIDR"},
		{name: "name with prefix", entry: "example.com/24", wantErr: "not an IP address or CIDR"},
		{name: "zone", entry: "fe80::1%eth0", wantErr: "zoned"},
		{name: "zone with prefix", entry: "fe80::1%eth0/64", wantErr: "zoned"},
		{name: "v4 zone", entry: "10.0.0.1%eth0", wantErr: "zoned"},
		{name: "bracketed v6", entry: "[2001:db8::1]", wantErr: "bracketed"},
		{name: "octal ipv4", entry: "0177.0.0.1", wantErr: "numeric"},
		{name: "leading zero ipv4", entry: "010.0.0.1", wantErr: "numeric"},
		{name: "hex ipv4", entry: "0x7f.0.0.1", wantErr: "numeric"},
		{name: "short ipv4", entry: "127.1", wantErr: "numeric"},
		{name: "integer ipv4", entry: "2130706433", wantErr: "single-label"},
		{name: "hex integer ipv4", entry: "0x7f000001", wantErr: "single-label"},
		{name: "ipv4 with port", entry: "203.0.113.7:443", wantErr: "port"},
		{name: "bad v6", entry: "2001:db8:::1", wantErr: "not a valid IPv6"},
		{name: "v6 with port", entry: "[2001:db8::1]:443", wantErr: "bracketed"},
		{name: "five octets", entry: "1.2.3.4.5", wantErr: "numeric"},
		{name: "octet over 255", entry: "256.1.1.1", wantErr: "numeric"},
		{name: "cidr with spaces", entry: "10.0.0.0 /8", wantErr: "not an IP address or CIDR"},
		{name: "star", entry: "*", wantErr: "wildcard"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, list := range []List{ListAllowed, ListDenied} {
				e, err := ParseEntry(list, tt.entry)
				if tt.wantErr != "" {
					var pe *PatternError
					if err == nil || !errors.As(err, &pe) || !errors.Is(err, ErrInvalidPattern) || pe.List != list || pe.Entry != tt.entry ||
						!strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), string(list)) {
						t.Fatalf("ParseEntry(%s, %q) = %v, %v; want a PatternError of its list containing %q", list, tt.entry, e, err, tt.wantErr)
					}
					continue
				}
				if err != nil || e.String() != tt.want || e.IsAddress() != tt.addr {
					t.Fatalf("ParseEntry(%s, %q) = %q (address %v), %v; want %q (address %v)", list, tt.entry, e, e.IsAddress(), err, tt.want, tt.addr)
				}
				again, err := ParseEntry(list, e.String())
				if err != nil || again != e {
					t.Fatalf("canonical %q does not round-trip: %v, %v", e, again, err)
				}
			}
		})
	}
}

func TestParseTarget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    Target
		wantErr string
	}{
		{name: "name", in: "Example.COM.:443", want: Target{Host: "example.com", Port: 443}},
		{name: "ipv4", in: "203.0.113.7:443", want: Target{Addr: netip.MustParseAddr("203.0.113.7"), Port: 443}},
		{name: "ipv6", in: "[2001:DB8::1]:443", want: Target{Addr: netip.MustParseAddr("2001:db8::1"), Port: 443}},
		{name: "mapped v6 is v4", in: "[::ffff:203.0.113.7]:443", want: Target{Addr: netip.MustParseAddr("203.0.113.7"), Port: 443}},
		{name: "v6 escaped zone", in: "[fe80::1%25eth0]:443", wantErr: "zoned"},
		{name: "v6 raw zone", in: "[fe80::1%eth0]:443", wantErr: "zoned"},
		{name: "bracketed v4", in: "[203.0.113.7]:443", wantErr: "bracketed IPv4"},
		{name: "bracketed name", in: "[example.com]:443", wantErr: "bracketed"},
		{name: "nested brackets", in: "[[::1]]:443", wantErr: "bracketed"},
		{name: "unbracketed v6", in: "2001:db8::1:443", wantErr: "colon"},
		{name: "v6 without port", in: "[2001:db8::1]", wantErr: "without port"},
		{name: "octal", in: "0177.0.0.1:443", wantErr: "numeric"},
		{name: "hex", in: "0x7f.0.0.1:443", wantErr: "numeric"},
		{name: "short", in: "127.1:443", wantErr: "numeric"},
		{name: "integer", in: "2130706433:443", wantErr: "single-label"},
		{name: "leading zeros", in: "127.000.000.001:443", wantErr: "numeric"},
		{name: "port not allowed", in: "203.0.113.7:80", wantErr: "port 80 not allowed"},
		{name: "v6 port not allowed", in: "[2001:db8::1]:22", wantErr: "port 22 not allowed"},
		{name: "nul", in: "203.0.113.7\x00:443", wantErr: "NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTarget(tt.in, nil)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalidHost) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTarget(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseTarget(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

// TestDecideHostile is the table of hostile cases for the decision:
// address rules never open forbidden ranges, deny wins, and names are
// allowed by names only.
func TestDecideHostile(t *testing.T) {
	t.Parallel()
	own := netip.MustParseAddr("198.51.100.9")
	v := Vetter{
		ExtraAllowed: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/24"), netip.MustParsePrefix("198.51.100.0/24")},
		SandboxNets:  []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16")},
		Own:          func(a netip.Addr) bool { return a == own },
	}
	pol := func(allow []string, deny ...string) Policy {
		p, err := New(Rules{Enabled: true, Allowed: allow, Denied: deny})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	addr := netip.MustParseAddr
	tests := []struct {
		name  string
		pol   Policy
		host  string
		addr  string
		sni   string
		mode  Mode
		want  Cause
		rule  string // the decision's Rule.String(); "" none
		class AddrClass
	}{
		{name: "ip rule allows its address", pol: pol([]string{"93.184.216.34"}), addr: "93.184.216.34", want: CauseAllowed, rule: `allowed_domains "93.184.216.34"`, class: ClassPublic},
		{name: "ip rule allows only its address", pol: pol([]string{"93.184.216.34"}), addr: "93.184.216.35", want: CauseAddrNotAllowed, class: ClassPublic},
		{name: "cidr rule allows inside", pol: pol([]string{"93.184.216.0/24"}), addr: "93.184.216.200", want: CauseAllowed, rule: `allowed_domains "93.184.216.0/24"`, class: ClassPublic},
		{name: "cidr rule not next door", pol: pol([]string{"93.184.216.0/24"}), addr: "93.184.217.1", want: CauseAddrNotAllowed, class: ClassPublic},
		{name: "v6 rule", pol: pol([]string{"2606:2800:220::/48"}), addr: "2606:2800:220:1::1", want: CauseAllowed, class: ClassPublic, rule: `allowed_domains "2606:2800:220::/48"`},
		{name: "mapped destination matches v4 rule", pol: pol([]string{"93.184.216.34"}), addr: "::ffff:93.184.216.34", want: CauseAllowed, class: ClassPublic, rule: `allowed_domains "93.184.216.34"`},
		{name: "mapped rule matches v4 destination", pol: pol([]string{"::ffff:93.184.216.34"}), addr: "93.184.216.34", want: CauseAllowed, class: ClassPublic, rule: `allowed_domains "93.184.216.34"`},
		{name: "v6 rule does not match v4", pol: pol([]string{"::/0"}), addr: "93.184.216.34", want: CauseAddrNotAllowed, class: ClassPublic},
		{name: "v4 rule does not match v6", pol: pol([]string{"0.0.0.0/0"}), addr: "2606:2800:220:1::1", want: CauseAddrNotAllowed, class: ClassPublic},
		{name: "private rule does not open private", pol: pol([]string{"10.0.0.0/8"}), addr: "10.1.2.3", want: CauseForbiddenAddr, rule: `allowed_domains "10.0.0.0/8"`, class: ClassPrivate},
		{name: "/0 allows public", pol: pol([]string{"0.0.0.0/0"}), addr: "93.184.216.34", want: CauseAllowed, class: ClassPublic, rule: `allowed_domains "0.0.0.0/0"`},
		{name: "/0 does not open private", pol: pol([]string{"0.0.0.0/0"}), addr: "192.168.1.1", want: CauseForbiddenAddr, class: ClassPrivate, rule: `allowed_domains "0.0.0.0/0"`},
		{name: "/0 does not open loopback", pol: pol([]string{"0.0.0.0/0"}), addr: "127.0.0.1", want: CauseForbiddenAddr, class: ClassLoopback, rule: `allowed_domains "0.0.0.0/0"`},
		{name: "/0 does not open metadata", pol: pol([]string{"0.0.0.0/0"}), addr: "169.254.169.254", want: CauseForbiddenAddr, class: ClassMetadata, rule: `allowed_domains "0.0.0.0/0"`},
		{name: "/0 does not open link-local", pol: pol([]string{"0.0.0.0/0"}), addr: "169.254.3.4", want: CauseForbiddenAddr, class: ClassLinkLocal, rule: `allowed_domains "0.0.0.0/0"`},
		{name: "/0 does not open unspecified", pol: pol([]string{"0.0.0.0/0"}), addr: "0.0.0.0", want: CauseForbiddenAddr, class: ClassUnspecified, rule: `allowed_domains "0.0.0.0/0"`},
		{name: "/0 does not open multicast", pol: pol([]string{"0.0.0.0/0"}), addr: "224.0.0.251", want: CauseForbiddenAddr, class: ClassMulticast, rule: `allowed_domains "0.0.0.0/0"`},
		{name: "/0 does not open cgnat", pol: pol([]string{"0.0.0.0/0"}), addr: "100.100.100.200", want: CauseForbiddenAddr, class: ClassCGNAT, rule: `allowed_domains "0.0.0.0/0"`},
		{name: "/0 does not open own address", pol: pol([]string{"0.0.0.0/0"}), addr: "198.51.100.9", want: CauseForbiddenAddr, class: ClassOwn, rule: `allowed_domains "0.0.0.0/0"`},
		{name: "/0 does not open sandbox nets", pol: pol([]string{"0.0.0.0/0"}), addr: "10.200.0.2", want: CauseForbiddenAddr, class: ClassSandboxNet, rule: `allowed_domains "0.0.0.0/0"`},
		{name: "v6 /0 does not open ula", pol: pol([]string{"::/0"}), addr: "fd00::1", want: CauseForbiddenAddr, class: ClassUniqueLocal, rule: `allowed_domains "::/0"`},
		{name: "v6 /0 does not open mapped loopback", pol: pol([]string{"::/0", "0.0.0.0/0"}), addr: "::ffff:127.0.0.1", want: CauseForbiddenAddr, class: ClassLoopback, rule: `allowed_domains "0.0.0.0/0"`},
		{name: "v6 /0 does not open 6to4 of private", pol: pol([]string{"::/0"}), addr: "2002:a00:1::1", want: CauseForbiddenAddr, class: Class6to4, rule: `allowed_domains "::/0"`},
		{name: "private inside a public-looking cidr", pol: pol([]string{"172.0.0.0/8"}), addr: "172.16.5.4", want: CauseForbiddenAddr, class: ClassPrivate, rule: `allowed_domains "172.0.0.0/8"`},
		{name: "public next to private in that cidr", pol: pol([]string{"172.0.0.0/8"}), addr: "172.15.5.4", want: CauseAllowed, class: ClassPublic, rule: `allowed_domains "172.0.0.0/8"`},
		{name: "extra_allowed opens a benchmarking address", pol: pol([]string{"198.18.64.2"}), addr: "198.18.64.2", want: CauseAllowed, class: ClassExtraAllowed, rule: `allowed_domains "198.18.64.2"`},
		{name: "extra_allowed does not stretch past its prefix", pol: pol([]string{"198.18.0.0/15"}), addr: "198.18.65.2", want: CauseForbiddenAddr, class: ClassBenchmarking, rule: `allowed_domains "198.18.0.0/15"`},
		{name: "extra_allowed alone allows nothing", pol: pol([]string{"example.com"}), addr: "198.18.64.2", want: CauseAddrNotAllowed, class: ClassExtraAllowed},
		{name: "address target needs an address rule", pol: pol(nil), addr: "93.184.216.34", want: CauseAddrNotAllowed, class: ClassPublic},
		{name: "domain rule does not allow an address", pol: pol([]string{"*.example.com"}), addr: "93.184.216.34", want: CauseAddrNotAllowed, class: ClassPublic},
		{name: "deny beats allow ip", pol: pol([]string{"93.184.216.0/24"}, "93.184.216.7"), addr: "93.184.216.7", want: CauseDenied, rule: `denied "93.184.216.7"`, class: ClassPublic},
		{name: "deny ip leaves the rest", pol: pol([]string{"93.184.216.0/24"}, "93.184.216.7"), addr: "93.184.216.8", want: CauseAllowed, class: ClassPublic, rule: `allowed_domains "93.184.216.0/24"`},
		{name: "deny beats identical allow", pol: pol([]string{"93.184.216.7"}, "93.184.216.7/32"), addr: "93.184.216.7", want: CauseDenied, rule: `denied "93.184.216.7"`, class: ClassPublic},
		{name: "overlapping: narrow allow in wide deny", pol: pol([]string{"93.184.216.7"}, "93.184.0.0/16"), addr: "93.184.216.7", want: CauseDenied, rule: `denied "93.184.0.0/16"`, class: ClassPublic},
		{name: "overlapping allows pick the first", pol: pol([]string{"93.184.216.0/24", "93.184.0.0/16"}), addr: "93.184.216.7", want: CauseAllowed, class: ClassPublic, rule: `allowed_domains "93.184.216.0/24"`},
		{name: "deny mapped form", pol: pol([]string{"0.0.0.0/0"}, "::ffff:93.184.216.7"), addr: "93.184.216.7", want: CauseDenied, rule: `denied "93.184.216.7"`, class: ClassPublic},
		{name: "deny v4 catches mapped destination", pol: pol([]string{"0.0.0.0/0"}, "93.184.216.7"), addr: "::ffff:93.184.216.7", want: CauseDenied, rule: `denied "93.184.216.7"`, class: ClassPublic},
		{name: "deny /0 refuses everything", pol: pol([]string{"93.184.216.7", "*.example.com"}, "0.0.0.0/0"), addr: "93.184.216.7", want: CauseDenied, rule: `denied "0.0.0.0/0"`, class: ClassPublic},
		{name: "wildcard deny beats wildcard allow", pol: pol([]string{"*.example.test"}, "*.evil.example.test"), host: "a.evil.example.test", want: CauseDenied, rule: `denied "*.evil.example.test"`},
		{name: "exact deny beats wildcard allow", pol: pol([]string{"*.example.test"}, "evil.example.test"), host: "evil.example.test", want: CauseDenied, rule: `denied "evil.example.test"`},
		{name: "exact deny leaves siblings", pol: pol([]string{"*.example.test"}, "evil.example.test"), host: "good.example.test", want: CauseAllowed, rule: `allowed_domains "*.example.test"`},
		{name: "exact deny not its subdomains", pol: pol([]string{"*.example.test"}, "evil.example.test"), host: "x.evil.example.test", want: CauseAllowed, rule: `allowed_domains "*.example.test"`},
		{name: "deny applies without allow list", pol: pol(nil, "evil.example.test"), host: "evil.example.test", want: CauseDenied, rule: `denied "evil.example.test"`},
		{name: "allowed name resolving into denied cidr", pol: pol([]string{"*.example.test"}, "93.184.216.0/24"), host: "www.example.test", addr: "93.184.216.34", want: CauseDenied, rule: `denied "93.184.216.0/24"`, class: ClassPublic},
		{name: "allowed name resolving to private", pol: pol([]string{"*.example.test"}), host: "www.example.test", addr: "10.0.0.1", want: CauseForbiddenAddr, class: ClassPrivate, rule: `allowed_domains "*.example.test"`},
		{name: "name not allowed by its address", pol: pol([]string{"93.184.216.0/24"}), host: "www.example.test", addr: "93.184.216.34", want: CauseNotAllowed, class: ClassPublic},
		{name: "address target with denied sni", pol: pol([]string{"93.184.216.0/24"}, "*.evil.test"), addr: "93.184.216.34", sni: "x.evil.test", want: CauseDenied, rule: `denied "*.evil.test"`, class: ClassPublic},
		{name: "address target with other sni", pol: pol([]string{"93.184.216.0/24"}, "*.evil.test"), addr: "93.184.216.34", sni: "ok.test", want: CauseAllowed, class: ClassPublic, rule: `allowed_domains "93.184.216.0/24"`},
		{name: "transparent name", mode: ModeTransparent, pol: pol([]string{"*.example.test"}), host: "a.example.test", addr: "93.184.216.34", want: CauseAllowed, class: ClassPublic, rule: `allowed_domains "*.example.test"`},
		{name: "transparent address", mode: ModeTransparent, pol: pol([]string{"93.184.216.34"}), addr: "93.184.216.34", want: CauseAllowed, class: ClassPublic, rule: `allowed_domains "93.184.216.34"`},
		{name: "zoned destination", pol: pol([]string{"::/0"}), addr: "fe80::1%eth0", want: CauseAddrNotAllowed, class: ClassInvalid},
		{name: "disabled", pol: Policy{Allow: MustParseEntries(ListAllowed, "93.184.216.34")}, addr: "93.184.216.34", want: CauseNetworkDisabled, class: ClassPublic},
		{name: "nothing to decide", pol: pol(nil), want: CauseNoTarget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := Args{Policy: tt.pol, Mode: tt.mode, Host: tt.host, SNI: tt.sni, Port: 443}
			if tt.addr != "" {
				a.Addr = addr(tt.addr)
			}
			d := v.Decide(a)
			allow := tt.want == CauseAllowed || tt.want == CauseAllowedAny
			if d.Cause != tt.want || d.Allowed() != allow || d.Rule.String() != tt.rule || d.Class != tt.class {
				t.Fatalf("Decide = %+v (%s); want cause %s, rule %q, class %q", d, d, tt.want, tt.rule, tt.class)
			}
			if d.String() == "" {
				t.Fatal("decision without words")
			}
		})
	}
}
