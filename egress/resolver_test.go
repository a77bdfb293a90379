package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestResolver(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	// A closed port first: the resolver falls back to the next server.
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.LocalAddr().String()
	dead.Close()
	r, err := NewResolver([]string{deadAddr, f.dnsAddr}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		host    string
		want    []netip.Addr
		wantErr error
	}{
		{name: "A", host: "ok.example.com", want: []netip.Addr{publicIP}},
		{name: "truncated then TCP", host: "trunc.example.com", want: []netip.Addr{publicIP}},
		{name: "CNAME in answer", host: "cnameok.example.com", want: []netip.Addr{publicIP}},
		{name: "CNAME re-queried", host: "cnameext.evil.test", want: []netip.Addr{netip.MustParseAddr("169.254.169.254")}},
		{name: "mixed v4 first", host: "mixed6.evil.test", want: []netip.Addr{publicIP, netip.MustParseAddr("::ffff:127.0.0.1")}},
		{name: "CNAME loop", host: "cnameloop.evil.test", wantErr: ErrCNAMEDepth},
		{name: "injected other owner", host: "inject.evil.test", wantErr: ErrNoAddresses},
		{name: "nxdomain", host: "nope.evil.test", wantErr: ErrNXDomain},
		{name: "servfail", host: "servfail.evil.test", wantErr: ErrResolverFail},
	}
	t.Cleanup(func() {
		if n := f.count("trunc.example.com.", dns.TypeA); n < 2 {
			t.Errorf("truncated name queried %d times, want UDP then TCP", n)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := r.Resolve(context.Background(), tt.host)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Resolve(%s) = %v, %v; want %v", tt.host, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("Resolve(%s) = %v, %v; want %v", tt.host, got, err, tt.want)
			}
		})
	}
}

func TestResolverAllServersDown(t *testing.T) {
	t.Parallel()
	pc, _ := net.ListenPacket("udp", "127.0.0.1:0") // open but silent
	defer pc.Close()
	r, err := NewResolver([]string{pc.LocalAddr().String()}, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resolve(context.Background(), "ok.example.com"); !errors.Is(err, ErrResolverFail) {
		t.Fatalf("err = %v", err)
	}
}

// TestGoproxyDefaultsReplaced checks the three unsafe goproxy defaults are
// gone: TLS verification is on, HTTPS_PROXY from the environment is not
// used, and no CONNECT dial happens outside the vetted path.
func TestGoproxyDefaultsReplaced(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:9")
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:9")
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	tr := p.gp.Tr
	if tr.Proxy != nil || tr.TLSClientConfig == nil || tr.TLSClientConfig.InsecureSkipVerify {
		t.Fatalf("unsafe transport: proxy=%v tls=%+v", tr.Proxy != nil, tr.TLSClientConfig)
	}
	if p.gp.ConnectDial != nil {
		t.Fatal("ConnectDial (from environment) still set")
	}
	if _, err := p.gp.ConnectDialWithReq(&http.Request{}, "tcp", "127.0.0.2:443"); !errors.Is(err, ErrDirectDial) {
		t.Fatalf("ConnectDialWithReq = %v", err)
	}
	s := addSession(t, p)
	resp, err := f.httpClient(s).Get("https://ok.example.com:" + strconv.Itoa(int(f.httpsAP.Port())) + "/")
	if err != nil {
		t.Fatalf("CONNECT with HTTPS_PROXY set in env: %v", err)
	}
	resp.Body.Close()
}
