package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// tcpFromNetns connects from inside the session's netns to addr with
// curl and returns curl's exit code: 7 when refused (the firewall's
// reset), 52 or 56 when a server accepted and closed (nothing stood
// between).
func tcpFromNetns(t *testing.T, att *Attachment, addr netip.AddrPort) int {
	t.Helper()
	_, _, err := inNetns(att, 10*time.Second, "curl", "-sS", "--max-time", "5", "http://"+addr.String()+"/")
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if !errors.As(err, &ee) {
		t.Fatalf("curl from %s: %v", att.NetnsName, err)
	}
	return ee.ExitCode()
}

// A table deleted (or gutted) from outside is noticed by the next Setup
// and by Heal, and rebuilt with the chains of the live sessions.
func TestNetworkHealsDeletedTable(t *testing.T) {
	requireNetTools(t)
	cfg := DefaultConfig()
	cfg.Resolvers = []string{"127.0.0.1"}
	n := testNetwork(t, cfg)
	var mu sync.Mutex
	var repairs []string
	n.OnRepair(func(reason string) {
		t.Logf("repair: %s", reason)
		mu.Lock()
		repairs = append(repairs, reason)
		mu.Unlock()
	})
	ctx := context.Background()
	live := setupSession(t, n, "heal-live")

	// A service on the live session's host address, on a port the
	// session's chain refuses: reachable only while the rules are gone.
	ln, err := net.Listen("tcp", netip.AddrPortFrom(live.HostAddr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	svc := ln.Addr().(*net.TCPAddr).AddrPort()
	if rc := tcpFromNetns(t, live, svc); rc != 7 {
		t.Fatalf("before: curl to a host service exited %d, want 7 (refused by the firewall)", rc)
	}

	if err := run(ctx, "", "nft", "delete", "table", "inet", n.cfg.Table); err != nil {
		t.Fatal(err)
	}
	if rc := tcpFromNetns(t, live, svc); rc != 52 && rc != 56 {
		t.Fatalf("without the table: curl exited %d, want 52 or 56 (connected: the hole this test is about)", rc)
	}
	if err := n.FirewallIntact(ctx); !errors.Is(err, ErrFirewallMissing) {
		t.Fatalf("FirewallIntact without the table: %v", err)
	}

	// The next network operation rebuilds, and the new session works.
	fresh := setupSession(t, n, "heal-new")
	if err := n.FirewallIntact(ctx); err != nil {
		t.Fatalf("after Setup: %v", err)
	}
	for _, att := range []*Attachment{live, fresh} {
		if rc := tcpFromNetns(t, att, svc); rc != 7 {
			t.Errorf("%s after rebuild: curl to a host service exited %d, want 7", att.SessionID, rc)
		}
	}
	// The new session's own rules work: its host address answers on an
	// allowed port (53/tcp here, a listener of the test's).
	dl, err := net.Listen("tcp", netip.AddrPortFrom(fresh.HostAddr, cfg.DNSPort).String())
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	go func() {
		for {
			c, err := dl.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if rc := tcpFromNetns(t, fresh, netip.AddrPortFrom(fresh.HostAddr, cfg.DNSPort)); rc != 52 && rc != 56 {
		t.Errorf("new session to its proxy port: curl exited %d, want 52 or 56 (connected)", rc)
	}

	// Readiness's Heal repairs partial damage too, and only once.
	for _, damage := range [][]string{
		{"delete", "table", "inet", n.cfg.Table},
		{"flush", "chain", "inet", n.cfg.Table, "input"},
		{"flush", "chain", "inet", n.cfg.Table, n.chainName(shortID(live.SessionID))},
		{"delete", "chain", "inet", n.cfg.Table, n.chainName(shortID(live.SessionID))},
	} {
		if damage[0] == "delete" && damage[1] == "chain" {
			// A chain still referenced by the map cannot be deleted: drop the entry first.
			run(ctx, "", "nft", "delete", "element", "inet", n.cfg.Table, "sessions", "{", `"`+live.HostIface+`"`, "}")
		}
		t.Logf("damage: %v", damage)
		if err := run(ctx, "", "nft", damage...); err != nil {
			t.Fatal(err)
		}
		repaired, err := n.Heal(ctx)
		if err != nil || !repaired {
			t.Fatalf("Heal after nft %s: %v %v", strings.Join(damage, " "), repaired, err)
		}
		if err := n.FirewallIntact(ctx); err != nil {
			t.Fatalf("after Heal (nft %s): %v", strings.Join(damage, " "), err)
		}
		if repaired, err := n.Heal(ctx); err != nil || repaired {
			t.Fatalf("second Heal: %v %v", repaired, err)
		}
		if rc := tcpFromNetns(t, live, svc); rc != 7 {
			t.Errorf("after Heal (nft %s): curl exited %d, want 7", strings.Join(damage, " "), rc)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(repairs) != 5 || !strings.Contains(repairs[0], "table inet "+n.cfg.Table+" missing") {
		t.Fatalf("repairs reported: %q", repairs)
	}
}

func TestNftBlocks(t *testing.T) {
	t.Parallel()
	listing := "table inet t {\n\tmap sessions {\n\t\ttype ifname : verdict\n\t\telements = { \"ah1\" : jump s_1,\n\t\t\t     \"ah2\" : jump s_2 }\n\t}\n\n" +
		"\tchain input {\n\t\ttype filter hook input priority filter - 10; policy accept;\n\t\tiifname vmap @sessions\n\t}\n\n" +
		"\tchain forward {\n\t\tiifname \"ah*\" drop\n\t}\n\n\tchain s_1 {\n\t}\n}\n"
	tests := []struct {
		block, rule string
		want        bool
	}{
		{block: "map sessions", rule: `"ah2" : jump s_2`, want: true},
		{block: "chain input", rule: "iifname vmap @sessions", want: true},
		{block: "chain input", rule: `iifname "ah*" drop`, want: false}, // only in forward
		{block: "chain forward", rule: `iifname "ah*" drop`, want: true},
		{block: "chain s_1", rule: "reject", want: false},
		{block: "chain s_2", rule: "accept", want: false}, // no such block
	}
	blocks := nftBlocks(listing)
	if _, ok := blocks["chain s_1"]; !ok || len(blocks) != 4 {
		t.Fatalf("blocks: %q", blocks)
	}
	for _, tt := range tests {
		if got := strings.Contains(blocks[tt.block], tt.rule); got != tt.want {
			t.Errorf("%s has %q = %v, want %v", tt.block, tt.rule, got, tt.want)
		}
	}
}
