package egress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Network errors.
var (
	ErrPoolExhausted   = errors.New("sandbox address pool exhausted")
	ErrFirewallMissing = errors.New("sandbox firewall rules missing")
	ErrNetworkCommand  = errors.New("network command failed")
	ErrNameCollision   = errors.New("sandbox network name collides with another session")
	// ErrFirewallRepaired is reported by a check that found the rules
	// damaged and rebuilt them: they count as verified only once a later
	// check finds them intact.
	ErrFirewallRepaired = errors.New("sandbox firewall rules were damaged and have been rebuilt")
)

// Attachment is a session's sandbox network: a named netns holding one
// veth end (eth0, SandboxAddr/30, no default route) whose peer in the root
// netns carries HostAddr, where the proxy and DNS listen. Put NetnsPath in
// the OCI spec's linux.namespaces (type "network") and run runsc with
// --network=sandbox.
type Attachment struct {
	SessionID   string       `json:"session_id"`
	NetnsName   string       `json:"netns_name"`
	NetnsPath   string       `json:"netns_path"`
	HostIface   string       `json:"host_iface"`
	HostAddr    netip.Addr   `json:"host_addr"`
	SandboxAddr netip.Addr   `json:"sandbox_addr"`
	Prefix      netip.Prefix `json:"prefix"`
}

// ResolvConf returns an /etc/resolv.conf for the sandbox pointing at the
// session's DNS.
func (a *Attachment) ResolvConf() string {
	return "nameserver " + a.HostAddr.String() + "\noptions ndots:1 timeout:2 attempts:2\n"
}

// ProxyEnv returns the proxy variables to set inside the sandbox.
func (a *Attachment) ProxyEnv(connectPort uint16) []string {
	u := fmt.Sprintf("http://%s:%d", a.HostAddr, connectPort)
	return []string{"HTTPS_PROXY=" + u, "https_proxy=" + u, "NO_PROXY=", "no_proxy="}
}

// Network creates and removes per-session network namespaces, veth pairs
// and nftables rules with the ip and nft tools (root only). Its methods are
// safe for concurrent use; the zero value is not usable, use NewNetwork.
//
// The table is checked before every Setup and by Heal: when it was
// deleted or altered from outside, the table and every live session's
// chain are rebuilt in one nft transaction and the OnRepair hook is told.
type Network struct {
	cfg      NetworkConfig
	tcp      []uint16 // proxy ports reachable from the sandbox
	dns      uint16
	log      *slog.Logger
	pool     netip.Prefix
	mu       sync.Mutex
	slots    map[int]string // slot -> session id
	atts     map[string]*Attachment
	onRepair func(reason string)
	built    bool // the table was in place once: missing parts are damage
}

// OnRepair sets fn to be called (with the network's lock held: it must
// not call back into the Network, and should return quickly) each time
// damaged rules were rebuilt, with what was missing. Nil (the default)
// only logs.
func (n *Network) OnRepair(fn func(reason string)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.onRepair = fn
}

// NewNetwork validates cfg and returns a Network. It changes nothing on
// the host until Setup or Reconcile.
func NewNetwork(cfg Config, logger *slog.Logger) (*Network, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("creating sandbox network: %w", err)
	}
	pool, err := netip.ParsePrefix(cfg.Network.Pool)
	if err != nil {
		return nil, fmt.Errorf("creating sandbox network: %w", ErrInvalidConfig)
	}
	if cfg.ConnectPort == 0 || cfg.TransparentPort == 0 || cfg.DNSPort == 0 {
		return nil, fmt.Errorf("creating sandbox network: %w: proxy ports must be fixed", ErrInvalidConfig)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Network{
		cfg:   cfg.Network,
		tcp:   []uint16{cfg.ConnectPort, cfg.TransparentPort, cfg.DNSPort},
		dns:   cfg.DNSPort,
		log:   logger,
		pool:  pool,
		slots: map[int]string{},
		atts:  map[string]*Attachment{},
	}, nil
}

func shortID(sessionID string) string {
	sum := sha256.Sum256([]byte(sessionID))
	return hex.EncodeToString(sum[:4])
}

func (n *Network) netnsName(short string) string { return n.cfg.Prefix + "-" + short }
func (n *Network) hostIface(short string) string { return n.cfg.Prefix + "h" + short }
func (n *Network) peerIface(short string) string { return n.cfg.Prefix + "s" + short }
func (n *Network) chainName(short string) string { return "s_" + short }

func run(ctx context.Context, stdin string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running %s %s: %w: %w: %s", name, strings.Join(args, " "), ErrNetworkCommand, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func output(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("running %s %s: %w: %w: %s", name, strings.Join(args, " "), ErrNetworkCommand, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// ensureTable checks the table and every live session's chain and map
// entry, and rebuilds them when anything is missing (a table deleted or
// flushed from outside). It reports whether it rebuilt. Callers hold n.mu.
func (n *Network) ensureTable(ctx context.Context) (repaired bool, err error) {
	missing, err := n.missingLocked(ctx)
	if err != nil {
		return false, err
	}
	if len(missing) == 0 {
		n.built = true
		return false, nil
	}
	first := !n.built
	reason := "missing: " + strings.Join(missing, ", ")
	if len(missing) > 6 {
		reason = fmt.Sprintf("missing: %s and %d more", strings.Join(missing[:6], ", "), len(missing)-6)
	}
	if ok, lerr := n.tableExists(ctx); lerr == nil && !ok {
		reason = "table inet " + n.cfg.Table + " missing"
	}
	// One transaction: the table (whatever is left of it) goes and comes
	// back whole, with the chain and map entry of every live session.
	var script strings.Builder
	fmt.Fprintf(&script, "add table inet %[1]s\ndelete table inet %[1]s\n", n.cfg.Table)
	script.WriteString(n.baseRules())
	ids := n.liveIDsLocked()
	for _, id := range ids {
		a := n.atts[id]
		script.WriteString(n.sessionRules(shortID(id), a.HostAddr, a.SandboxAddr))
	}
	if err := run(ctx, script.String(), "nft", "-f", "-"); err != nil {
		return false, fmt.Errorf("rebuilding nftables table (%s): %w", reason, err)
	}
	if still, err := n.missingLocked(ctx); err != nil || len(still) > 0 {
		return false, fmt.Errorf("rebuilding nftables table: %w: still missing %q after rebuild (%v)", ErrFirewallMissing, still, err)
	}
	n.built = true
	if first {
		n.log.Info("sandbox firewall created", slog.String("table", n.cfg.Table))
		return false, nil
	}
	n.log.Warn("sandbox firewall rebuilt", slog.String("table", n.cfg.Table), slog.String("reason", reason), slog.Int("sessions", len(ids)))
	if n.onRepair != nil {
		n.onRepair(reason)
	}
	return true, nil
}

// Heal checks the table and every live session's rules and rebuilds them
// if anything is missing (see ensureTable); it reports whether it had to.
// Readiness calls it on each run so damage is repaired without waiting
// for the next session.
func (n *Network) Heal(ctx context.Context) (repaired bool, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	repaired, err = n.ensureTable(ctx)
	if err != nil {
		return false, fmt.Errorf("healing sandbox firewall: %w", err)
	}
	return repaired, nil
}

// Setup creates the session's netns, veth pair and firewall rules. A
// leftover of the same session is removed first. On error nothing is left
// behind.
func (n *Network) Setup(ctx context.Context, sessionID string) (att *Attachment, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.ensureTable(ctx); err != nil {
		return nil, fmt.Errorf("setting up network for %s: %w", sessionID, err)
	}
	short := shortID(sessionID)
	if old := n.atts[sessionID]; old != nil {
		return old, nil
	}
	for id := range n.atts {
		if shortID(id) == short {
			return nil, fmt.Errorf("setting up network for %s: %w: %s", sessionID, ErrNameCollision, id)
		}
	}
	n.teardownShort(ctx, short)
	slot := -1
	max := 1 << (32 - n.pool.Bits() - 2)
	for i := range max {
		if _, used := n.slots[i]; !used {
			slot = i
			break
		}
	}
	if slot < 0 {
		return nil, fmt.Errorf("setting up network for %s: %w", sessionID, ErrPoolExhausted)
	}
	base := n.pool.Addr().As4()
	off := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3]) + uint32(slot)*4
	ip := func(i uint32) netip.Addr {
		v := off + i
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	host, sbx := ip(1), ip(2)
	ns, hif, pif := n.netnsName(short), n.hostIface(short), n.peerIface(short)
	att = &Attachment{
		SessionID: sessionID, NetnsName: ns, NetnsPath: filepath.Join(n.cfg.NetnsDir, ns),
		HostIface: hif, HostAddr: host, SandboxAddr: sbx, Prefix: netip.PrefixFrom(ip(0), 30),
	}
	defer func() {
		if err != nil {
			n.teardownShort(context.WithoutCancel(ctx), short)
			att = nil
		}
	}()
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", hif, "type", "veth", "peer", "name", pif, "netns", ns},
		{"ip", "addr", "add", host.String() + "/30", "dev", hif},
		{"ip", "-n", ns, "link", "set", pif, "name", "eth0"},
		{"ip", "-n", ns, "addr", "add", sbx.String() + "/30", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(ctx, "", s[0], s[1:]...); err != nil {
			return nil, fmt.Errorf("setting up network for %s: %w", sessionID, err)
		}
	}
	// No IPv6 on either end: nothing link-local to talk to.
	os.WriteFile("/proc/sys/net/ipv6/conf/"+hif+"/disable_ipv6", []byte("1"), 0o644)
	run(ctx, "", "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	if err := run(ctx, n.sessionRules(short, host, sbx), "nft", "-f", "-"); err != nil {
		// The table may have gone since the check: rebuild, then retry once.
		if _, herr := n.ensureTable(ctx); herr != nil {
			return nil, fmt.Errorf("setting up firewall for %s: %w", sessionID, errors.Join(err, herr))
		}
		if err := run(ctx, n.sessionRules(short, host, sbx), "nft", "-f", "-"); err != nil {
			return nil, fmt.Errorf("setting up firewall for %s: %w", sessionID, err)
		}
	}
	for _, s := range [][]string{{"ip", "link", "set", hif, "up"}, {"ip", "-n", ns, "link", "set", "eth0", "up"}} {
		if err := run(ctx, "", s[0], s[1:]...); err != nil {
			return nil, fmt.Errorf("setting up network for %s: %w", sessionID, err)
		}
	}
	n.slots[slot] = sessionID
	n.atts[sessionID] = att
	n.log.Info("sandbox network up", slog.String("session", sessionID), slog.String("netns", ns),
		slog.String("host_addr", host.String()), slog.String("sandbox_addr", sbx.String()))
	return att, nil
}

// Attachment returns the session's attachment, if set up.
func (n *Network) Attachment(sessionID string) (*Attachment, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a, ok := n.atts[sessionID]
	return a, ok
}

// Teardown removes the session's rules, veth and netns. It is idempotent.
func (n *Network) Teardown(ctx context.Context, sessionID string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	short := shortID(sessionID)
	err := n.teardownShort(ctx, short)
	for slot, id := range n.slots {
		if id == sessionID {
			delete(n.slots, slot)
		}
	}
	delete(n.atts, sessionID)
	if err != nil {
		return fmt.Errorf("tearing down network for %s: %w", sessionID, err)
	}
	return nil
}

// teardownShort removes whatever exists of one session and reports only
// failures to remove something that is still there.
func (n *Network) teardownShort(ctx context.Context, short string) error {
	ns, hif := n.netnsName(short), n.hostIface(short)
	run(ctx, "", "nft", "delete", "element", "inet", n.cfg.Table, "sessions", "{", `"`+hif+`"`, "}")
	run(ctx, "", "nft", "flush", "chain", "inet", n.cfg.Table, n.chainName(short))
	run(ctx, "", "nft", "delete", "chain", "inet", n.cfg.Table, n.chainName(short))
	run(ctx, "", "ip", "link", "del", hif)
	run(ctx, "", "ip", "netns", "del", ns)
	var errs []error
	if _, err := os.Stat(filepath.Join(n.cfg.NetnsDir, ns)); err == nil {
		errs = append(errs, fmt.Errorf("netns %s still exists: %w", ns, ErrNetworkCommand))
	}
	if _, err := os.Stat("/sys/class/net/" + hif); err == nil {
		errs = append(errs, fmt.Errorf("veth %s still exists: %w", hif, ErrNetworkCommand))
	}
	return errors.Join(errs...)
}

// Reconcile removes the namespaces, veths and rules of sessions not in
// live (leftovers of a crash) and re-adopts those of live sessions, so
// their Attachment is available again. It also (re)creates the table.
func (n *Network) Reconcile(ctx context.Context, live []string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.ensureTable(ctx); err != nil {
		return fmt.Errorf("reconciling sandbox network: %w", err)
	}
	liveShort := map[string]string{}
	for _, id := range live {
		liveShort[shortID(id)] = id
	}
	found := map[string]bool{}
	if ents, err := os.ReadDir(n.cfg.NetnsDir); err == nil {
		for _, e := range ents {
			if s, ok := strings.CutPrefix(e.Name(), n.cfg.Prefix+"-"); ok {
				found[s] = true
			}
		}
	}
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			if s, ok := strings.CutPrefix(e.Name(), n.cfg.Prefix+"h"); ok {
				found[s] = true
			}
		}
	}
	if out, err := output(ctx, "nft", "-j", "list", "table", "inet", n.cfg.Table); err == nil {
		var doc struct {
			Nftables []struct {
				Chain *struct{ Name string } `json:"chain"`
			} `json:"nftables"`
		}
		if json.Unmarshal(out, &doc) == nil {
			for _, o := range doc.Nftables {
				if o.Chain != nil {
					if s, ok := strings.CutPrefix(o.Chain.Name, "s_"); ok {
						found[s] = true
					}
				}
			}
		}
	}
	var errs []error
	for short := range found {
		id, isLive := liveShort[short]
		if isLive && n.adopt(ctx, id, short) {
			continue
		}
		n.log.Info("removing leftover sandbox network", slog.String("short", short), slog.Bool("live", isLive))
		if err := n.teardownShort(ctx, short); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("reconciling sandbox network: %w", err)
	}
	return nil
}

// adopt rebuilds the in-memory record of a live session's network if all
// its parts exist. Callers hold n.mu.
func (n *Network) adopt(ctx context.Context, id, short string) bool {
	if _, ok := n.atts[id]; ok {
		return true
	}
	ns, hif := n.netnsName(short), n.hostIface(short)
	if _, err := os.Stat(filepath.Join(n.cfg.NetnsDir, ns)); err != nil {
		return false
	}
	if run(ctx, "", "nft", "list", "chain", "inet", n.cfg.Table, n.chainName(short)) != nil {
		return false
	}
	out, err := output(ctx, "ip", "-j", "-4", "addr", "show", "dev", hif)
	if err != nil {
		return false
	}
	var links []struct {
		AddrInfo []struct {
			Local     string `json:"local"`
			Prefixlen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if json.Unmarshal(out, &links) != nil || len(links) != 1 || len(links[0].AddrInfo) != 1 {
		return false
	}
	host, err := netip.ParseAddr(links[0].AddrInfo[0].Local)
	if err != nil || !n.pool.Contains(host) {
		return false
	}
	pfx := netip.PrefixFrom(host, 30).Masked()
	slot := int((ipUint(pfx.Addr()) - ipUint(n.pool.Addr())) / 4)
	if _, used := n.slots[slot]; used {
		return false
	}
	n.slots[slot] = id
	n.atts[id] = &Attachment{
		SessionID: id, NetnsName: ns, NetnsPath: filepath.Join(n.cfg.NetnsDir, ns), HostIface: hif,
		HostAddr: host, SandboxAddr: host.Next(), Prefix: pfx,
	}
	return true
}

func ipUint(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
