package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEgressFirewallHeals deletes the session networks' nft table under a
// running server: a new network session then works (it was a 500 until a
// restart), the live session's rules are back (a host service on its host
// address is refused again), and readiness closes the install gate until
// it has verified the rebuilt rules.
func TestEgressFirewallHeals(t *testing.T) {
	f := startFakeInternet(t)
	ee := newEgressEnv(t)
	s := startServer(t, ee.yaml(f))
	sweepAfter(t, s)
	ultra := s.key("ULTRA")
	netReq := map[string]any{"enabled": true, "allowed_domains": []string{"*.allowed.test"}}
	both := `for p in "" "--noproxy *"; do curl -sS $p --max-time 20 https://www.allowed.test/; echo " rc=$?"; done`
	works := func(id, when string) {
		t.Helper()
		if res := s.run(ultra, id, both, caEnv); strings.Count(res["stdout"].(string), "hello www.allowed.test") != 2 {
			t.Fatalf("%s: session %s: %s", when, id, out(res))
		}
	}
	live := s.networkSession(ultra, netReq)
	s.installCA(ultra, live, f)
	works(live, "before")
	host := strings.TrimSpace(s.run(ultra, live, `awk '/^nameserver/{print $2}' /etc/resolv.conf`, nil)["stdout"].(string))
	// A service on the live session's host address, on a port its chain
	// refuses (curl rc 7); with the rules gone it would connect.
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
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
	probe := `curl -sS --noproxy '*' --max-time 5 http://` + ln.Addr().String() + `/; echo " rc=$?"`
	fenced := func(when string) {
		t.Helper()
		if o := s.run(ultra, live, probe, nil)["stdout"].(string); !strings.Contains(o, "rc=7") {
			t.Fatalf("%s: the live session reached a host service: %q", when, o)
		}
	}
	fenced("before")
	if st, d := s.waitCheck("firewall", "pass", 60*time.Second); st != "pass" {
		t.Fatalf("firewall before: %s %s", st, d)
	}

	sh(t, "nft", "delete", "table", "inet", ee.table)
	fresh := s.networkSession(ultra, netReq) // 500 "add chain ... No such file or directory" before the fix
	r := s.do("GET", "/readyz", "", nil)
	var body struct {
		Ready  bool `json:"ready"`
		Checks []struct{ Name, Status, Detail string }
	}
	_ = json.Unmarshal(r.body, &body)
	closed := false
	for _, c := range body.Checks {
		if (c.Name == "firewall" || c.Name == "topology") && c.Status == "fail" && strings.Contains(c.Detail, "rebuilt") {
			closed = true
		}
	}
	if body.Ready || !closed {
		t.Errorf("readiness right after the rebuild: %s, want not ready with firewall or topology saying the rules were rebuilt", r.body)
	}
	s.installCA(ultra, fresh, f)
	works(fresh, "after the table was deleted")
	works(live, "after the table was deleted")
	fenced("after the rebuild")
	sum := sha256.Sum256([]byte(live))
	if l := sh(t, "nft", "list", "table", "inet", ee.table); !strings.Contains(l, "chain s_"+hex.EncodeToString(sum[:4])+" {") {
		t.Fatalf("the live session's chain is not back:\n%s", l)
	}
	for _, name := range []string{"firewall", "topology"} {
		if st, d := s.waitCheck(name, "pass", 120*time.Second); st != "pass" {
			t.Fatalf("%s after the rebuild: %s %s", name, st, d)
		}
	}
	if n := countLines(s.logs.String(), "sandbox firewall rebuilt"); n < 1 {
		t.Errorf("no rebuild logged")
	}
	for _, id := range []string{live, fresh} {
		if r := s.do("DELETE", "/v1/sessions/"+id, ultra, nil); r.status != http.StatusNoContent {
			t.Fatalf("delete %s: %d %s", id, r.status, r.body)
		}
	}
	if left := ee.leftovers(t); len(left) != 0 {
		t.Fatalf("left after delete: %q", left)
	}
}
