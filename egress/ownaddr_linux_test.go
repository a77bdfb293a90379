package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// ownAddrChild names, in the environment of the re-executed test binary,
// the address the child adds to its namespace's interface.
const ownAddrChild = "SANDBOXAPI_TEST_OWNADDR_CHILD"

// An address added to a host interface after the proxy started is the
// proxy's own address from that moment: a name that resolves to it is
// refused on the CONNECT and the transparent path. The proxy runs in a
// namespace of the test's own (the whole test binary is re-executed there
// with nsenter), so the host's interfaces are never touched.
func TestOwnAddressAddedAfterStart(t *testing.T) {
	if a := os.Getenv(ownAddrChild); a != "" {
		ownAddressChild(t, netip.MustParseAddr(a))
		return
	}
	requireNetTools(t)
	if _, err := exec.LookPath("nsenter"); err != nil {
		testenv.Skip(t, "needs nsenter: %v", err)
	}
	tn := testenv.NewNet(t, 'o') // its cleanup removes namespaces named PREFIX-*
	ns := tn.Prefix + "-own"
	ctx := context.Background()
	if err := run(ctx, "", "ip", "netns", "add", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run(context.Background(), "", "ip", "netns", "del", ns) })
	if err := run(ctx, "", "ip", "-n", ns, "link", "set", "lo", "up"); err != nil {
		t.Fatal(err)
	}
	added := netip.MustParsePrefix(tn.Pool).Addr().Next().Next().Next() // .3
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "nsenter", "--net=/var/run/netns/"+ns, os.Args[0],
		"-test.run=^TestOwnAddressAddedAfterStart$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), ownAddrChild+"="+added.String())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestOwnAddressAddedAfterStart") {
		t.Fatalf("child in netns %s: %v\n%s", ns, err, out)
	}
	t.Logf("child:\n%s", out)
}

// ownAddressChild runs inside the test's namespace.
func ownAddressChild(t *testing.T, added netip.Addr) {
	ctx := context.Background()
	// The test's own DNS server: own.allowed.test is the added address.
	pc, tl, _, err := listenUDPTCP(ctx, "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; strings.EqualFold(q.Name, "own.allowed.test.") && q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: added.AsSlice()})
		}
		w.WriteMsg(m)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: tl, Handler: h}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		t.Cleanup(func() { srv.Shutdown() })
	}
	const svcPort = 8443
	cfg := DefaultConfig()
	cfg.ConnectPort, cfg.TransparentPort, cfg.DNSPort = 0, 0, 0
	cfg.AllowedPorts = []uint16{svcPort}
	cfg.TransparentUpstreamPort = svcPort
	cfg.Resolvers = []string{pc.LocalAddr().String()}
	// The operator allows the address's network: only the own-address
	// rule stands between a session and the service on it.
	cfg.ExtraAllowedCIDRs = []string{netip.PrefixFrom(added, 32).String()}
	cfg.HandshakeTimeout = 2 * time.Second
	p := newTestProxy(t, cfg)
	sess := Session{ID: "own", HostAddr: netip.MustParseAddr("127.0.0.1"), SandboxAddr: netip.MustParseAddr("127.0.0.2"),
		Policy: policy.Policy{Enabled: true, Allow: policy.MustParseEntries(policy.ListAllowed, "*.allowed.test")}}
	ep, err := p.AddSession(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	s := testSession{Session: sess, ep: ep}

	// After start: the address appears, and a service listens on it.
	if err := run(ctx, "", "ip", "addr", "add", added.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	svc, err := net.Listen("tcp", netip.AddrPortFrom(added, svcPort).String())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	go func() {
		for {
			c, err := svc.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	want := reasonForbiddenAddr + " (" + policy.ClassOwn.Describe() + ")"

	code, _ := rawConnect(t, s, s.SandboxAddr, fmt.Sprintf("own.allowed.test:%d", svcPort))
	if d := lastDecision(t, p, s.ID); code != 403 || d.Outcome != OutcomeDeny || d.Reason != want || d.Addr != added {
		t.Fatalf("CONNECT to an address added after start: %d %+v", code, d)
	}

	n := len(p.Decisions(s.ID))
	c := dialFrom(t, s.SandboxAddr, ep.Transparent)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, &tls.Config{ServerName: "own.allowed.test", InsecureSkipVerify: true}) //nolint:gosec // the handshake must not complete
	if err := tc.Handshake(); err == nil {
		t.Fatal("transparent TLS to an address added after start completed a handshake")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(p.Decisions(s.ID)) == n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if d := lastDecision(t, p, s.ID); d.Mode != ModeTransparent || d.Outcome != OutcomeDeny || d.Reason != want || d.Addr != added {
		t.Fatalf("transparent connection to an address added after start: %+v", d)
	}

	// Removed again, it is no longer the proxy's: the vetter follows the
	// host both ways (the operator's extra_allowed_cidrs apply again).
	if err := run(ctx, "", "ip", "addr", "del", added.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	if c := p.vet.Class(added); !c.Dialable() {
		t.Fatalf("removed address still refused: %s", c)
	}
}
