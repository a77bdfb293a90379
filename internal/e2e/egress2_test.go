package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// TestEgressProxyStoppedDuringUse destroys a live session's proxy
// listening sockets from outside the server (shut down through duplicates
// of the server's descriptors, as a failure of that part of the proxy
// would leave them) and checks that requests from the
// sandbox then fail fast and cleanly, that the server notices once rather
// than spinning, and that other sessions and cleanup are unaffected.
func TestEgressProxyStoppedDuringUse(t *testing.T) {
	if _, err := exec.LookPath("ss"); err != nil {
		testenv.Skip(t, "needs ss (iproute2): %v", err)
	}
	f := startFakeInternet(t)
	ee := newEgressEnv(t)
	s := startServer(t, ee.yaml(f))
	sweepAfter(t, s)
	ultra := s.key("ULTRA")
	id := s.networkSession(ultra, map[string]any{"enabled": true, "allowed_domains": []string{"*.allowed.test"}})
	s.installCA(ultra, id, f)
	both := `try() { start=$(date +%s%N); curl -sS "$@" --max-time 20 https://www.allowed.test/; echo " rc=$? ms=$(( ($(date +%s%N)-start)/1000000 ))"; }; try; try --noproxy '*'`
	res := s.run(ultra, id, both, caEnv)
	if o := res["stdout"].(string); strings.Count(o, "hello www.allowed.test") != 2 {
		t.Fatalf("before the fault: %s", out(res))
	}
	host := strings.TrimSpace(s.run(ultra, id, `awk '/^nameserver/{print $2}' /etc/resolv.conf`, nil)["stdout"].(string))
	if !strings.HasPrefix(host, "10.") {
		t.Fatalf("session host address %q", host)
	}

	// Shut the server's CONNECT and transparent listening sockets down
	// through a duplicate of their descriptors: accept on them then fails
	// as it would on a socket destroyed under the process.
	killed := 0
	for _, line := range strings.Split(sh(t, "ss", "-t", "-l", "-n", "-p"), "\n") {
		if !strings.Contains(line, " "+host+":3128 ") && !strings.Contains(line, " "+host+":443 ") {
			continue
		}
		var pid, fd int
		if i := strings.Index(line, "pid="); i >= 0 {
			fmt.Sscanf(line[i:], "pid=%d,fd=%d", &pid, &fd)
		}
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			t.Fatalf("pidfd_open %d: %v", pid, err)
		}
		dup, err := unix.PidfdGetfd(pidfd, fd, 0)
		unix.Close(pidfd)
		if err != nil {
			t.Fatalf("pidfd_getfd %d/%d: %v", pid, fd, err)
		}
		if err := unix.Shutdown(dup, unix.SHUT_RDWR); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		unix.Close(dup)
		killed++
	}
	if killed != 2 {
		t.Fatalf("found %d of the session's 2 proxy listeners", killed)
	}
	res = s.run(ultra, id, both, caEnv)
	o := res["stdout"].(string)
	if strings.Contains(o, "hello") || strings.Count(o, "rc=7 ") != 2 {
		t.Fatalf("want both paths refused (curl rc 7) once the listeners are gone: %s", out(res))
	}
	for _, part := range strings.Split(o, "ms=")[1:] {
		var ms int
		fmt.Sscanf(part, "%d", &ms)
		if ms > 5000 {
			t.Fatalf("a request took %d ms to fail: %s", ms, out(res))
		}
	}
	t.Logf("after the listeners died: %s", strings.ReplaceAll(strings.TrimSpace(o), "\n", "; "))

	// The server saw each listener end once and did not spin on accept.
	time.Sleep(500 * time.Millisecond)
	logs := s.logs.String()
	for _, which := range []string{`"listener":"CONNECT"`, `"listener":"transparent"`} {
		if n := countLines(logs, "egress listener failed", which); n != 1 {
			t.Errorf("%s: %d failure lines, want 1", which, n)
		}
	}
	if n := strings.Count(logs, "accepting transparent connection"); n > 0 {
		t.Errorf("accept loop retried %d times on a dead socket", n)
	}
	// Readiness reflects it: the egress check names the session.
	if st, detail := s.waitCheck("egress", "fail", 40*time.Second); st != "fail" || !strings.Contains(detail, id) {
		t.Errorf("readiness egress after the fault: %s %q, want fail naming %s", st, detail, id)
	}

	// Other sessions are unaffected, and cleanup still removes everything.
	other := s.networkSession(ultra, map[string]any{"enabled": true, "allowed_domains": []string{"*.allowed.test"}})
	s.installCA(ultra, other, f)
	if res := s.run(ultra, other, both, caEnv); strings.Count(res["stdout"].(string), "hello www.allowed.test") != 2 {
		t.Fatalf("a new session after the fault: %s", out(res))
	}
	for _, sid := range []string{id, other} {
		if r := s.do("DELETE", "/v1/sessions/"+sid, ultra, nil); r.status != http.StatusNoContent {
			t.Fatalf("delete %s: %d %s", sid, r.status, r.body)
		}
	}
	if left := ee.leftovers(t); len(left) != 0 {
		t.Fatalf("left after delete: %q", left)
	}
	// With the broken session gone, the check passes again.
	if st, detail := s.waitCheck("egress", "pass", 40*time.Second); st != "pass" {
		t.Errorf("readiness egress after the session ended: %s %q, want pass", st, detail)
	}
}

// waitCheck polls /readyz (refreshing) until the named check has status
// want or within passes, and returns the check's last status and detail.
func (s *server) waitCheck(name, want string, within time.Duration) (string, string) {
	s.t.Helper()
	var st, detail string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		r := s.do("GET", "/readyz?refresh=1", "", nil)
		var body struct {
			Checks []struct{ Name, Status, Detail string } `json:"checks"`
		}
		_ = json.Unmarshal(r.body, &body)
		for _, c := range body.Checks {
			if c.Name == name {
				st, detail = c.Status, c.Detail
			}
		}
		if st == want {
			break
		}
	}
	return st, detail
}

// countLines counts the lines of logs containing every one of subs.
func countLines(logs string, subs ...string) int {
	n := 0
	for _, line := range strings.Split(logs, "\n") {
		all := true
		for _, sub := range subs {
			all = all && strings.Contains(line, sub)
		}
		if all {
			n++
		}
	}
	return n
}
