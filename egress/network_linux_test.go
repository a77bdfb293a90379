package egress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// requireNetTools skips (or, under SANDBOXAPI_REQUIRE_RUNSC=1, fails) when
// the test cannot create namespaces and firewall rules.
func requireNetTools(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, tool := range []string{"ip", "nft", "curl", "getent"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("SANDBOXAPI_REQUIRE_RUNSC") == "1" {
		t.Fatalf("network test needs %v (SANDBOXAPI_REQUIRE_RUNSC=1)", missing)
	}
	t.Skipf("network test needs %v", missing)
}

func testNetwork(t *testing.T, cfg Config) *Network {
	t.Helper()
	tn := testenv.NewNet(t, 'n')
	cfg.Network.Pool, cfg.Network.Table, cfg.Network.Prefix = tn.Pool, tn.Table, tn.Prefix
	n, err := NewNetwork(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := n.Reconcile(ctx, nil); err != nil {
			t.Errorf("final reconcile: %v", err)
		}
		run(ctx, "", "nft", "delete", "table", "inet", cfg.Network.Table)
	})
	return n
}

func setupSession(t *testing.T, n *Network, id string) *Attachment {
	t.Helper()
	ctx := context.Background()
	att, err := n.Setup(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Teardown(context.Background(), id); err != nil {
			t.Errorf("teardown %s: %v", id, err)
		}
		os.RemoveAll(filepath.Join("/etc/netns", att.NetnsName))
		os.Remove("/etc/netns") // only if empty
	})
	// ip netns exec bind-mounts /etc/netns/NAME/resolv.conf over /etc/resolv.conf.
	dir := filepath.Join("/etc/netns", att.NetnsName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(att.ResolvConf()), 0o644); err != nil {
		t.Fatal(err)
	}
	return att
}

// inNetns runs a command inside the session's netns.
func inNetns(att *Attachment, timeout time.Duration, args ...string) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", att.NetnsName}, args...)...).CombinedOutput()
	return string(out), time.Since(start), err
}

func TestNetworkEndToEnd(t *testing.T) {
	requireNetTools(t)
	f := sharedFakeNet(t)
	cfg := testConfig(f)
	cfg.ConnectPort, cfg.TransparentPort, cfg.DNSPort = 3128, 443, 53
	n := testNetwork(t, cfg)
	p := newTestProxy(t, cfg)

	a := setupSession(t, n, "netsess-a")
	b := setupSession(t, n, "netsess-b")
	if a.HostAddr == b.HostAddr || !a.Prefix.Contains(a.SandboxAddr) || a.NetnsPath != "/var/run/netns/"+a.NetnsName {
		t.Fatalf("attachments %+v %+v", a, b)
	}
	for _, att := range []*Attachment{a, b} {
		sess := Session{ID: att.SessionID, HostAddr: att.HostAddr, SandboxAddr: att.SandboxAddr}
		sess.Policy.Enabled = true
		if att == a {
			sess.Policy.Allow = mustPatterns(t, "*.example.com")
		}
		if _, err := p.AddSession(context.Background(), sess); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.FirewallIntact(context.Background()); err != nil {
		t.Fatal(err)
	}
	port := f.httpsAP.Port()

	// Explicit proxy from inside the netns works.
	out, _, err := inNetns(a, 10*time.Second, "curl", "-sS", "--fail", "--noproxy", "", "--proxy",
		fmt.Sprintf("http://%s:3128", a.HostAddr), "--cacert", f.caFile, fmt.Sprintf("https://ok.example.com:%d/", port))
	if err != nil || out != "hello ok.example.com" {
		t.Fatalf("curl via proxy: %q %v", out, err)
	}
	// In-sandbox DNS: allowed names resolve to the proxy, others do not.
	out, _, err = inNetns(a, 10*time.Second, "getent", "ahostsv4", "www.example.com")
	if err != nil || !strings.Contains(out, a.HostAddr.String()) {
		t.Fatalf("getent allowed: %q %v", out, err)
	}
	if out, _, err = inNetns(a, 10*time.Second, "getent", "ahostsv4", "evilexample.com"); err == nil {
		t.Fatalf("getent denied name resolved: %q", out)
	}
	// Transparent mode: plain curl, DNS points at the proxy which reads SNI.
	out, _, err = inNetns(a, 10*time.Second, "curl", "-sS", "--fail", "--cacert", f.caFile, "https://www.example.com/")
	if err != nil || out != "hello www.example.com" {
		t.Fatalf("transparent curl: %q %v", out, err)
	}

	// Everything else fails fast.
	fast := []struct {
		name string
		args []string
	}{
		{name: "other port on proxy address", args: []string{"curl", "-sS", fmt.Sprintf("http://%s:8080/", a.HostAddr)}},
		{name: "direct to public server", args: []string{"curl", "-sS", "--cacert", f.caFile, fmt.Sprintf("https://%s:%d/", publicIP, port)}},
		{name: "another session's proxy", args: []string{"curl", "-sS", "--proxy", fmt.Sprintf("http://%s:3128", b.HostAddr), fmt.Sprintf("https://ok.example.com:%d/", port)}},
		{name: "outside address", args: []string{"curl", "-sS", "http://10.231.8.1/"}},
	}
	for _, tt := range fast {
		out, took, err := inNetns(a, 10*time.Second, tt.args...)
		if err == nil || took > 2*time.Second {
			t.Errorf("%s: %q err=%v after %v, want fast failure", tt.name, out, err, took)
		}
	}
	// Even with a default route the sandbox cannot add, the firewall still
	// refuses other host addresses (here session b's) quickly.
	if _, _, err := inNetns(a, 5*time.Second, "ip", "route", "add", "default", "via", a.HostAddr.String()); err != nil {
		t.Fatal(err)
	}
	out, took, err := inNetns(a, 10*time.Second, "curl", "-sS", "--noproxy", "", "--proxy", fmt.Sprintf("http://%s:3128", b.HostAddr), fmt.Sprintf("https://ok.example.com:%d/", port))
	// Exit 7 (could not connect): the firewall refused it before the
	// proxy (which would answer 403, exit 56) saw it.
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 7 || took > 2*time.Second {
		t.Errorf("cross-session via default route: %q err=%v after %v", out, err, took)
	}

	// Teardown removes everything; FirewallIntact notices missing rules.
	if err := n.Teardown(context.Background(), b.SessionID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.NetnsPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("netns still there: %v", err)
	}
	if _, err := os.Stat("/sys/class/net/" + b.HostIface); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("veth still there: %v", err)
	}
	if err := n.FirewallIntact(context.Background()); err != nil {
		t.Fatal(err)
	}
	run(context.Background(), "", "nft", "delete", "element", "inet", n.cfg.Table, "sessions", "{", `"`+a.HostIface+`"`, "}")
	if err := n.FirewallIntact(context.Background()); !errors.Is(err, ErrFirewallMissing) {
		t.Fatalf("FirewallIntact with a missing rule: %v", err)
	}
}

func TestNetworkReconcile(t *testing.T) {
	requireNetTools(t)
	cfg := DefaultConfig()
	cfg.Resolvers = []string{"127.0.0.1"}
	n := testNetwork(t, cfg)
	ctx := context.Background()
	keep := setupSession(t, n, "keep")
	gone := setupSession(t, n, "gone")

	// A fresh Network (as after a restart) adopts live sessions and removes the rest.
	n2, err := NewNetwork(Config{}.withNetwork(n), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n2.Reconcile(ctx, []string{"keep"}); err != nil {
		t.Fatal(err)
	}
	got, ok := n2.Attachment("keep")
	if !ok || *got != *keep {
		t.Fatalf("adopted %+v, want %+v", got, keep)
	}
	if _, err := os.Stat(gone.NetnsPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover netns not removed: %v", err)
	}
	if err := n2.FirewallIntact(ctx); err != nil {
		t.Fatal(err)
	}
	// The adopted slot is not handed out again.
	att, err := n2.Setup(ctx, "new")
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Teardown(ctx, "new")
	if att.HostAddr == keep.HostAddr {
		t.Fatalf("slot reused: %v", att.HostAddr)
	}
	if !netip.MustParsePrefix(n.cfg.Pool).Contains(att.HostAddr) {
		t.Fatalf("address outside pool: %v", att.HostAddr)
	}
}

func mustPatterns(t *testing.T, entries ...string) []policy.Entry {
	t.Helper()
	p, err := policy.ParseEntries(policy.ListAllowed, entries)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// withNetwork returns a config equal to the one n was built from.
func (Config) withNetwork(n *Network) Config {
	cfg := DefaultConfig()
	cfg.Resolvers = []string{"127.0.0.1"}
	cfg.Network = n.cfg
	return cfg
}
