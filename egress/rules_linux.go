package egress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// The nftables rules of a sandbox network exist once, as data: the same
// list renders the rules that Setup and ensureTable load and the needles
// that the firewall checks look for in `nft list table`.

// nftRule is one line of the table: the block it belongs in ("chain
// input", "map sessions"), its text as written, and the part of it that
// nft lists back verbatim (nft rewrites priorities and reorders sets).
// An empty match is written but not checked.
type nftRule struct {
	block, text, match string
}

// skeleton is the table's fixed part: a verdict map from host-side veth
// to the session's chain, a catch-all drop for any of our veths without a
// session, and no forwarding to or from them.
func (n *Network) skeleton() []nftRule {
	veths := `"` + n.cfg.Prefix + `h*"`
	return []nftRule{
		{"map sessions", "type ifname : verdict", ""},
		{"chain input", "type filter hook input priority -10; policy accept;", "hook input priority"},
		{"chain input", "iifname vmap @sessions", "iifname vmap @sessions"},
		{"chain input", "iifname " + veths + " drop", "iifname " + veths + " drop"},
		{"chain forward", "type filter hook forward priority -10; policy accept;", "hook forward priority"},
		{"chain forward", "iifname " + veths + " drop", "iifname " + veths + " drop"},
		{"chain forward", "oifname " + veths + " drop", "oifname " + veths + " drop"},
	}
}

// sessionRuleSet is one session's chain (only packets from its sandbox
// address to its host address on the proxy and DNS ports pass; the rest
// is rejected) and its entry in the sessions map.
func (n *Network) sessionRuleSet(short string, host, sbx netip.Addr) []nftRule {
	ports := make([]string, 0, len(n.tcp))
	for _, p := range n.tcp {
		ports = append(ports, fmt.Sprint(p))
	}
	ch := "chain " + n.chainName(short)
	pair := "ip saddr " + sbx.String() + " ip daddr " + host.String()
	entry := `"` + n.hostIface(short) + `" : jump ` + n.chainName(short)
	return []nftRule{
		{ch, pair + " tcp dport { " + strings.Join(ports, ", ") + " } accept", pair + " tcp dport"},
		{ch, pair + fmt.Sprintf(" udp dport %d accept", n.dns), pair + " udp dport"},
		{ch, "meta l4proto tcp reject with tcp reset", "reject with tcp reset"},
		{ch, "reject with icmpx admin-prohibited", "reject with icmpx admin-prohibited"},
		{"map sessions", entry, entry},
	}
}

// baseRules renders the skeleton as a table definition for `nft -f`.
func (n *Network) baseRules() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", n.cfg.Table)
	var blocks []string
	byBlock := map[string][]string{}
	for _, r := range n.skeleton() {
		if _, ok := byBlock[r.block]; !ok {
			blocks = append(blocks, r.block)
		}
		byBlock[r.block] = append(byBlock[r.block], r.text)
	}
	for _, blk := range blocks {
		fmt.Fprintf(&b, "\t%s {\n", blk)
		for _, t := range byBlock[blk] {
			fmt.Fprintf(&b, "\t\t%s\n", t)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// sessionRules renders one session's rules as `nft -f` commands.
func (n *Network) sessionRules(short string, host, sbx netip.Addr) string {
	var b strings.Builder
	fmt.Fprintf(&b, "add chain inet %s %s\n", n.cfg.Table, n.chainName(short))
	for _, r := range n.sessionRuleSet(short, host, sbx) {
		if name, ok := strings.CutPrefix(r.block, "map "); ok {
			fmt.Fprintf(&b, "add element inet %s %s { %s }\n", n.cfg.Table, name, r.text)
			continue
		}
		fmt.Fprintf(&b, "add rule inet %s %s %s\n", n.cfg.Table, strings.TrimPrefix(r.block, "chain "), r.text)
	}
	return b.String()
}

// FirewallIntact checks that the table, its hooks and every known
// session's chain and map entry are in place (for readiness). It only
// looks; Heal also repairs.
func (n *Network) FirewallIntact(ctx context.Context) error {
	n.mu.Lock()
	missing, err := n.missingLocked(ctx)
	n.mu.Unlock()
	if err != nil {
		return fmt.Errorf("checking firewall: %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("checking firewall: %w: %q", ErrFirewallMissing, missing)
	}
	return nil
}

// listTable returns `nft list table` of the network's table ("" when the
// table does not exist). Whether it exists is read from `nft list tables`
// (nft's exit status does not say why a listing failed), before the
// listing and again when the listing fails: a table deleted in between
// is missing, not a failure.
func (n *Network) listTable(ctx context.Context) (string, error) {
	if ok, err := n.tableExists(ctx); err != nil || !ok {
		return "", err
	}
	out, err := output(ctx, "nft", "list", "table", "inet", n.cfg.Table)
	if err != nil {
		// Anything but a missing table (no nft, no permission) is not
		// something a rebuild can fix.
		if ok, lerr := n.tableExists(ctx); lerr == nil && !ok {
			return "", nil
		}
		return "", fmt.Errorf("%w: %w", ErrFirewallMissing, err)
	}
	return string(out), nil
}

// tableExists reports whether `nft list tables inet` names the network's
// table.
func (n *Network) tableExists(ctx context.Context) (bool, error) {
	out, err := output(ctx, "nft", "list", "tables", "inet")
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrFirewallMissing, err)
	}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" && f[1] == "inet" && f[2] == n.cfg.Table {
			return true, nil
		}
	}
	return false, nil
}

// missingIn lists the rules of want that the listing lacks, each looked
// for inside its own block.
func missingIn(listing string, want []nftRule) []string {
	blocks := nftBlocks(listing)
	var missing []string
	for _, w := range want {
		if w.match != "" && !strings.Contains(blocks[w.block], w.match) {
			missing = append(missing, w.block+": "+w.match)
		}
	}
	return missing
}

// missingLocked lists what the table lacks: every rule of the skeleton
// and the chain and map entry of each live session (all of them when the
// table is gone). An error means nft itself could not be asked. Callers
// hold n.mu, so no session comes or goes in between.
func (n *Network) missingLocked(ctx context.Context) ([]string, error) {
	text, err := n.listTable(ctx)
	if err != nil {
		return nil, err
	}
	want := n.skeleton()
	for _, id := range n.liveIDsLocked() {
		a := n.atts[id]
		want = append(want, n.sessionRuleSet(shortID(id), a.HostAddr, a.SandboxAddr)...)
	}
	return missingIn(text, want), nil
}

// liveIDsLocked returns the ids of the sessions set up, sorted. Callers
// hold n.mu.
func (n *Network) liveIDsLocked() []string {
	ids := make([]string, 0, len(n.atts))
	for id := range n.atts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// nftBlocks splits an `nft list table` listing into the bodies of its
// top-level blocks, by header ("chain input", "map sessions"). Rules are
// matched inside their own block, so a rule that also appears in another
// chain cannot stand in for a missing one.
func nftBlocks(listing string) map[string]string {
	out := map[string]string{}
	var head string
	var body strings.Builder
	for _, line := range strings.Split(listing, "\n") {
		switch {
		case head == "" && strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "\t\t") && strings.HasSuffix(line, " {"):
			head = strings.TrimSuffix(line[1:], " {")
			body.Reset()
		case head != "" && line == "\t}":
			out[head] = body.String()
			head = ""
		case head != "":
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	return out
}

// FirewallCheck is one readiness firewall check of a Network
// (readiness.FirewallChecker).
type FirewallCheck struct {
	check func(context.Context) error
}

// FirewallIntact runs the check.
func (c FirewallCheck) FirewallIntact(ctx context.Context) error { return c.check(ctx) }

// ChainsCheck checks that each hook chain holds its own skeleton rules,
// without the sessions' chains: the part of the table every network has
// whether or not a session is live. Missing rules are rebuilt at once
// (Heal), and that run fails with ErrFirewallRepaired.
func (n *Network) ChainsCheck() FirewallCheck {
	return FirewallCheck{func(ctx context.Context) error {
		text, err := n.listTable(ctx)
		if err != nil {
			return fmt.Errorf("checking chains of %s: %w", n.cfg.Table, err)
		}
		if missing := missingIn(text, n.skeleton()); len(missing) > 0 {
			err := fmt.Errorf("checking chains of %s: %w: %q", n.cfg.Table, ErrFirewallMissing, missing)
			// Damage seen is damage healed, whichever check sees it first.
			repaired, herr := n.Heal(ctx)
			if repaired {
				return fmt.Errorf("%w; verifying them on the next run: %w", ErrFirewallRepaired, err)
			}
			return errors.Join(err, herr)
		}
		return nil
	}}
}

// HealingCheck is the firewall check of a sandbox network: it first
// rebuilds rules deleted or altered from outside (Heal), and a run that
// had to rebuild fails with ErrFirewallRepaired, so installs stay closed
// until a later run finds the rebuilt rules intact. FirewallIntact lists
// the rules and then the live networks, so a network set up in between
// looks like a missing chain for a moment: a failing check is retried
// briefly. A rule that is really gone by then was deleted during this
// run, after the first Heal: it is healed at once too, so every damage
// the check sees is reported as rebuilt, never left for the next run.
func (n *Network) HealingCheck() FirewallCheck {
	heal := func(ctx context.Context) (bool, error) {
		repaired, err := n.Heal(ctx)
		if err != nil {
			return false, err
		}
		if repaired {
			return true, fmt.Errorf("%w; verifying them on the next run", ErrFirewallRepaired)
		}
		return false, nil
	}
	return FirewallCheck{func(ctx context.Context) error {
		if _, err := heal(ctx); err != nil {
			return err
		}
		var err error
		for range 3 {
			if err = n.FirewallIntact(ctx); err == nil {
				return nil
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(200 * time.Millisecond):
			}
		}
		if repaired, herr := heal(ctx); repaired || herr != nil {
			return errors.Join(herr, err)
		}
		return err
	}}
}
