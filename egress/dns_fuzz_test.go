package egress

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/sandboxapi/sandboxapi/egress/policy"
)

// fakeDNSWriter captures the reply of a dns.Handler.
type fakeDNSWriter struct {
	dns.ResponseWriter
	remote net.Addr
	got    *dns.Msg
}

func (w *fakeDNSWriter) RemoteAddr() net.Addr      { return w.remote }
func (w *fakeDNSWriter) WriteMsg(m *dns.Msg) error { w.got = m; return nil }

// FuzzAnswerDNS feeds arbitrary queries to the in-sandbox DNS: it must
// never answer anything but the proxy's address, and only for allowed
// names.
func FuzzAnswerDNS(f *testing.F) {
	for _, name := range []string{"www.allowed.test.", "allowed.test.", "evil.test.", "x\\000.allowed.test.", "A.ALLOWED.TEST."} {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		b, _ := m.Pack()
		f.Add(b)
	}
	p := &Proxy{log: discardLogger()}
	s := &session{Session: Session{
		ID: "fuzz", HostAddr: netip.MustParseAddr("10.9.0.1"), SandboxAddr: netip.MustParseAddr("10.9.0.2"),
		Policy: policy.Policy{Enabled: true, Allow: policy.MustParseEntries(policy.ListAllowed, "*.allowed.test")},
	}}
	remote := &net.UDPAddr{IP: net.ParseIP("10.9.0.2"), Port: 5353}
	f.Fuzz(func(t *testing.T, data []byte) {
		q := new(dns.Msg)
		if q.Unpack(data) != nil {
			return
		}
		w := &fakeDNSWriter{remote: remote}
		p.answerDNS(s, w, q)
		if w.got == nil {
			t.Fatal("no reply")
		}
		for _, rr := range w.got.Answer {
			a, ok := rr.(*dns.A)
			if !ok || a.A.String() != "10.9.0.1" {
				t.Fatalf("answer %v", rr)
			}
			name := strings.ToLower(strings.TrimSuffix(rr.Header().Name, "."))
			if !strings.HasSuffix(name, ".allowed.test") {
				t.Fatalf("answered non-allowed name %q", rr.Header().Name)
			}
		}
	})
}
