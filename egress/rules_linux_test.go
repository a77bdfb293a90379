package egress

import (
	"net/netip"
	"strings"
	"testing"
)

// The rules are data rendered for nft and matched by the checks: the
// rendering stays what it was, and every needle the checks look for is in
// the rule it was rendered from.
func TestRulesRenderedOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Resolvers = []string{"127.0.0.1"}
	cfg.ConnectPort, cfg.TransparentPort, cfg.DNSPort = 3128, 443, 53
	cfg.Network.Table, cfg.Network.Prefix = "sbxt", "sx"
	n, err := NewNetwork(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantBase := "table inet sbxt {\n\tmap sessions {\n\t\ttype ifname : verdict\n\t}\n" +
		"\tchain input {\n\t\ttype filter hook input priority -10; policy accept;\n\t\tiifname vmap @sessions\n\t\tiifname \"sxh*\" drop\n\t}\n" +
		"\tchain forward {\n\t\ttype filter hook forward priority -10; policy accept;\n\t\tiifname \"sxh*\" drop\n\t\toifname \"sxh*\" drop\n\t}\n}\n"
	if got := n.baseRules(); got != wantBase {
		t.Errorf("baseRules:\n%s\nwant:\n%s", got, wantBase)
	}
	host, sbx := netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("10.9.0.2")
	wantSession := `add chain inet sbxt s_abcd
add rule inet sbxt s_abcd ip saddr 10.9.0.2 ip daddr 10.9.0.1 tcp dport { 3128, 443, 53 } accept
add rule inet sbxt s_abcd ip saddr 10.9.0.2 ip daddr 10.9.0.1 udp dport 53 accept
add rule inet sbxt s_abcd meta l4proto tcp reject with tcp reset
add rule inet sbxt s_abcd reject with icmpx admin-prohibited
add element inet sbxt sessions { "sxhabcd" : jump s_abcd }
`
	if got := n.sessionRules("abcd", host, sbx); got != wantSession {
		t.Errorf("sessionRules:\n%s\nwant:\n%s", got, wantSession)
	}
	for _, r := range append(n.skeleton(), n.sessionRuleSet("abcd", host, sbx)...) {
		if !strings.Contains(r.text, r.match) {
			t.Errorf("rule %q in %s is checked by %q, which it does not contain", r.text, r.block, r.match)
		}
	}
	// A listing with the session's chain but not its map entry lacks
	// exactly that entry.
	listing := "table inet sbxt {\n\tmap sessions {\n\t\ttype ifname : verdict\n\t}\n\tchain s_abcd {\n" +
		"\t\tip saddr 10.9.0.2 ip daddr 10.9.0.1 tcp dport { 53, 443, 3128 } accept\n\t\tip saddr 10.9.0.2 ip daddr 10.9.0.1 udp dport 53 accept\n" +
		"\t\tmeta l4proto tcp reject with tcp reset\n\t\treject with icmpx admin-prohibited\n\t}\n}\n"
	got := missingIn(listing, n.sessionRuleSet("abcd", host, sbx))
	if len(got) != 1 || got[0] != `map sessions: "sxhabcd" : jump s_abcd` {
		t.Errorf("missing = %q", got)
	}
}
