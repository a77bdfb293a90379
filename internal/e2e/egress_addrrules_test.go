package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// addPrivateService puts a TCP listener on a private address (a /32 on
// the fake internet namespace's lo, routed from the root namespace
// through its veth) that extra_allowed_cidrs does not cover, and checks
// that the host itself reaches it: the proxy refusing it is then its
// policy, not a missing route.
func addPrivateService(t *testing.T, f *fakeInternet) netip.Addr {
	t.Helper()
	priv := netip.AddrFrom4([4]byte{172, 31, f.web.As4()[2], 9})
	sh(t, "ip", "-n", f.netns, "addr", "add", priv.String()+"/32", "dev", "lo")
	sh(t, "ip", "route", "add", priv.String()+"/32", "via", f.web.String(), "dev", f.hostLink)
	t.Cleanup(func() { _ = exec.Command("ip", "route", "del", priv.String()+"/32").Run() })
	var ln net.Listener
	if err := inNetns("/var/run/netns/"+f.netns, func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(priv, 443).String())
		return err
	}); err != nil {
		t.Fatalf("listening on %s: %v", priv, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(priv, 443).String(), 5*time.Second)
	if err != nil {
		t.Fatalf("the host cannot reach %s itself, so a refusal would prove nothing: %v", priv, err)
	}
	c.Close()
	return priv
}

// TestEgressAddressRules drives real sandboxes through the real proxy
// against the fake internet: IP and CIDR entries allow exactly their
// addresses, deny entries win over allows (by address, by name, and for a
// name that resolves into a denied address), a private destination stays
// refused even when an allow entry covers it, and the denied list is
// shown, stored and kept over hibernation.
func TestEgressAddressRules(t *testing.T) {
	f := startFakeInternet(t)
	priv := addPrivateService(t, f)
	ee := newEgressEnv(t)
	s := startServer(t, ee.yaml(f))
	sweepAfter(t, s)
	key := s.key("MEGA")
	web, other := f.web.String(), f.other.String()

	// curlTo reaches name's server by the given address through the
	// explicit proxy: --connect-to makes curl send CONNECT addr:443 and
	// still verify the certificate for name.
	curlTo := func(name, addr string) string {
		return fmt.Sprintf(`curl -sS --max-time 30 --connect-to %s:443:%s:443 https://%s/; echo " rc=$?"`, name, addr, name)
	}
	type check struct {
		name string
		code string
		want string // in stdout+stderr
		deny bool   // want the CONNECT refused (curl 56, 403) and no reply
	}
	runChecks := func(t *testing.T, id string, checks []check) {
		t.Helper()
		for _, c := range checks {
			t.Run(c.name, func(t *testing.T) {
				res := s.run(key, id, c.code, caEnv)
				o := res["stdout"].(string) + res["stderr"].(string)
				if c.deny {
					if strings.Contains(o, "hello") || !strings.Contains(o, "rc=56") || !strings.Contains(o, "403") {
						t.Fatalf("want the CONNECT refused with 403: %s", out(res))
					}
					return
				}
				if !strings.Contains(o, c.want) || !strings.Contains(o, " rc=0") {
					t.Fatalf("want %q: %s", c.want, out(res))
				}
			})
		}
	}
	// decisions waits until the session's audit holds a decision whose
	// reason contains each of wants.
	decisions := func(t *testing.T, id string, wants ...string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			r := s.do("GET", "/v1/sessions/"+id+"/egress", key, nil)
			if r.status != http.StatusOK {
				t.Fatalf("egress log: %d %s", r.status, r.body)
			}
			missing := []string{}
			for _, w := range wants {
				if !strings.Contains(string(r.body), w) {
					missing = append(missing, w)
				}
			}
			if len(missing) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("egress log lacks %q: %s", missing, r.body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	t.Run("ip rule", func(t *testing.T) {
		id := s.networkSession(key, map[string]any{"enabled": true, "allowed_domains": []string{web}})
		s.installCA(key, id, f)
		runChecks(t, id, []check{
			{name: "its address, verified name", code: curlTo("www.allowed.test", web), want: "hello www.allowed.test from " + web},
			{name: "its address, no server name", code: fmt.Sprintf(`curl -sS -k --max-time 30 https://%s/; echo " rc=$?"`, web), want: "hello  from " + web},
			{name: "another address", code: curlTo("www.allowed.test", other), deny: true},
			{name: "a name resolving to it", code: `curl -sS --max-time 30 https://www.allowed.test/; echo " rc=$?"`, deny: true},
		})
		decisions(t, id, `matched allowed_domains \"`+web+`\"`, "address not in allowed_domains", "host not in allowed_domains")
	})

	// web is .2 and other .3 of the fake internet's /24: a /31 ending
	// just below web allows neither, the /31 holding both allows both.
	t.Run("cidr rule allows exactly its addresses", func(t *testing.T) {
		below := netip.PrefixFrom(f.web.Prev().Prev(), 31).Masked()
		pair := netip.PrefixFrom(f.web, 31).Masked()
		if below.Contains(f.web) || !pair.Contains(f.web) || !pair.Contains(f.other) {
			t.Fatalf("prefixes %s and %s do not split %s and %s as this test needs", below, pair, f.web, f.other)
		}
		id := s.networkSession(key, map[string]any{"enabled": true, "allowed_domains": []string{below.String()}})
		s.installCA(key, id, f)
		runChecks(t, id, []check{
			{name: "next door to the prefix", code: curlTo("www.allowed.test", web), deny: true},
			{name: "next door, other address", code: curlTo("www.allowed.test", other), deny: true},
		})
		decisions(t, id, "address not in allowed_domains")
		id = s.networkSession(key, map[string]any{"enabled": true, "allowed_domains": []string{pair.String()}})
		s.installCA(key, id, f)
		runChecks(t, id, []check{
			{name: "first of the pair", code: curlTo("www.allowed.test", web), want: "hello www.allowed.test from " + web},
			{name: "second of the pair", code: curlTo("www.allowed.test", other), want: "hello www.allowed.test from " + other},
		})
		decisions(t, id, `matched allowed_domains \"`+pair.String()+`\"`)
	})

	t.Run("cidr rule with a denied address", func(t *testing.T) {
		id := s.networkSession(key, map[string]any{"enabled": true, "allowed_domains": []string{f.prefix.String()}, "denied": []string{other + "/32"}})
		r := s.do("GET", "/v1/sessions/"+id, key, nil)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"denied":["`+other+`/32"]`) {
			t.Fatalf("GET session does not show the denied list: %d %s", r.status, r.body)
		}
		s.installCA(key, id, f)
		checks := []check{
			{name: "inside the prefix", code: curlTo("api.allowed.test", web), want: "hello api.allowed.test from " + web},
			{name: "deny beats allow", code: curlTo("www.allowed.test", other), deny: true},
		}
		runChecks(t, id, checks)
		decisions(t, id, `matched allowed_domains \"`+f.prefix.String()+`\"`, `matched denied \"`+other+`\"`)

		// The lists are stored with the session: a resumed sandbox gets
		// the same policy.
		if r := s.do("POST", "/v1/sessions/"+id+"/hibernate", key, nil); r.status != http.StatusOK {
			t.Fatalf("hibernate: %d %s", r.status, r.body)
		}
		t.Run("after resume", func(t *testing.T) { runChecks(t, id, checks) })
	})

	// NO_PROXY names 127.0.0.1, so that case sets --noproxy '' to go
	// through the proxy all the same.
	t.Run("private stays refused", func(t *testing.T) {
		id := s.networkSession(key, map[string]any{"enabled": true, "allowed_domains": []string{"172.31.0.0/16", "0.0.0.0/0"}})
		runChecks(t, id, []check{
			{name: "private address under an allow entry", code: fmt.Sprintf(`curl -sS -k --max-time 30 https://%s/; echo " rc=$?"`, priv), deny: true},
			{name: "the proxy host's loopback under 0.0.0.0/0", code: `curl -sS -k --noproxy '' --max-time 30 https://127.0.0.1/; echo " rc=$?"`, deny: true},
		})
		decisions(t, id, "forbidden address (private)", "forbidden address (loopback)")
	})

	t.Run("denied names", func(t *testing.T) {
		id := s.networkSession(key, map[string]any{"enabled": true, "allowed_domains": []string{"*.allowed.test", "*.public.test"},
			"denied": []string{"api.allowed.test", other}})
		s.installCA(key, id, f)
		runChecks(t, id, []check{
			{name: "allowed sibling", code: `curl -sS --max-time 30 https://www.allowed.test/; echo " rc=$?"`, want: "hello www.allowed.test from " + web},
			{name: "denied name", code: `curl -sS --max-time 30 https://api.allowed.test/; echo " rc=$?"`, deny: true},
			{name: "allowed name resolving to a denied address", code: `curl -sS --max-time 30 https://open.public.test/; echo " rc=$?"`, deny: true},
		})
		t.Run("denied name gets no DNS answer", func(t *testing.T) {
			res := s.run(key, id, `curl -sS --noproxy '*' --max-time 30 https://api.allowed.test/; echo " rc=$?"`, caEnv)
			if o := res["stdout"].(string); strings.Contains(o, "hello") || !strings.Contains(o, "rc=6") {
				t.Fatalf("want could not resolve (6): %s", out(res))
			}
		})
		decisions(t, id, `matched denied \"api.allowed.test\"`, `matched denied \"`+other+`\"`)
	})
}
