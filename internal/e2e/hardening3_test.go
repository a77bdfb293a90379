package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestConsoleLoginRefusesNullOrigin posts an admin key to the real
// server's console sign-in: "Origin: null" (a sandboxed frame, a data: or
// file: page) and another site's origin get 403 and no cookie; the
// console's own origin signs in, and its pages ask for the same-origin
// referrer policy, under which a browser sends that origin.
func TestConsoleLoginRefusesNullOrigin(t *testing.T) {
	s := startServer(t, "")
	admin := strings.TrimSpace(s.cli("keys", "create", "--admin", "--name", "ops"))
	admin = admin[strings.LastIndexByte(admin, '\n')+1:]
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(origin string) *http.Response {
		req, _ := http.NewRequest("POST", s.url("/console/login"), strings.NewReader(url.Values{"key": {admin}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, o := range []string{"null", "http://attacker.test"} {
		if r := login(o); r.StatusCode != http.StatusForbidden || len(r.Cookies()) != 0 {
			t.Errorf("sign-in with Origin %s: %d, cookies %v; want 403 and none", o, r.StatusCode, r.Cookies())
		}
	}
	r := login("http://" + s.addr)
	if r.StatusCode != http.StatusSeeOther || len(r.Cookies()) != 1 {
		t.Errorf("sign-in from the console's own origin: %d, cookies %v", r.StatusCode, r.Cookies())
	}
	if got := r.Header.Get("Referrer-Policy"); got != "same-origin" {
		t.Errorf("Referrer-Policy %q, want same-origin", got)
	}
}

// TestResumedHeaderOnEveryWaitingCall hibernates a session of the real
// server and sends it six calls at once, three JSON and three streamed:
// one resumes it, the others wait for that resume, and every reply
// carries X-Sandbox-Resumed (and a JSON result resumed_ms). The next call,
// on the running session, carries none. A stream's headers wait for the
// resume up to one heartbeat: 30 s here, as a resume on a loaded CI
// machine has taken 8 s (past the 5 s default, the result's resumed_ms
// still says it).
func TestResumedHeaderOnEveryWaitingCall(t *testing.T) {
	s := startServer(t, "server:\n  drain_delay: 0s\n  stream_heartbeat: 30s\n")
	key := s.key("PRO")
	id := s.session(key, "bash")
	if r := s.do("POST", "/v1/sessions/"+id+"/hibernate", key, nil); r.status != 200 {
		t.Fatalf("hibernate: %d %s", r.status, r.body)
	}
	const n = 6
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := map[string]any{"code": fmt.Sprintf("sleep 0.2; echo %d", i), "stream": i%2 == 1}
			replies[i] = s.do("POST", "/v1/sessions/"+id+"/execute", key, body)
		}()
	}
	wg.Wait()
	for i, r := range replies {
		if r.status != 200 || !strings.Contains(string(r.body), fmt.Sprintf(`"stdout":"%d\n"`, i)) {
			t.Errorf("call %d: %d %s", i, r.status, r.body)
			continue
		}
		if r.header.Get("X-Sandbox-Resumed") == "" {
			t.Errorf("call %d (stream %v) waited for the resume and has no X-Sandbox-Resumed: %s", i, i%2 == 1, r.body)
		}
		if !strings.Contains(string(r.body), `"resumed_ms":`) {
			t.Errorf("call %d: result without resumed_ms: %s", i, r.body)
		}
	}
	if r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": "true"}); r.status != 200 || r.header.Get("X-Sandbox-Resumed") != "" {
		t.Errorf("call on the running session: %d resumed %q", r.status, r.header.Get("X-Sandbox-Resumed"))
	}
}

// TestSigtermGraceOverRepliesDraining: calls still running when SIGTERM's
// grace period ends are killed and still answered, not cut off: a JSON
// call gets 503 "draining" with Retry-After, a stream an `error` event
// "draining"; then the server exits and leaves nothing behind.
func TestSigtermGraceOverRepliesDraining(t *testing.T) {
	s := startServer(t, "server:\n  drain_delay: 1s\n  shutdown_grace: 2s\n")
	key := s.key("PRO")
	ids := []string{s.session(key, "bash"), s.session(key, "bash")}
	type result struct {
		status int
		header http.Header
		body   string
		err    error
	}
	results := make([]chan result, 2)
	for i, stream := range []bool{false, true} {
		results[i] = make(chan result, 1)
		go func() {
			b, _ := json.Marshal(map[string]any{"code": "sleep 60", "timeout": 90, "stream": stream})
			req, _ := http.NewRequest("POST", s.url("/v1/sessions/"+ids[i]+"/execute"), bytes.NewReader(b))
			req.Header.Set("X-RapidAPI-Key", key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				results[i] <- result{err: err}
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			results[i] <- result{resp.StatusCode, resp.Header, string(body), err}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	s.waitExecutionsRunning(t, ids...) // both running
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"json", "stream"} {
		var r result
		select {
		case r = <-results[i]:
		case <-time.After(60 * time.Second):
			t.Fatalf("%s call: no reply 60 s after SIGTERM", want)
		}
		switch {
		case r.err != nil:
			t.Errorf("%s call cut by the grace period: %v (no reply)", want, r.err)
		case want == "json" && (r.status != 503 || !strings.Contains(r.body, `"code":"draining"`) || r.header.Get("Retry-After") == ""):
			t.Errorf("json call: %d Retry-After %q %s; want 503 draining with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
		case want == "stream" && (r.status != 200 || !strings.Contains(r.body, "event: error\ndata: {\"code\":\"draining\"")):
			t.Errorf("stream: %d %s; want an error event draining", r.status, r.body)
		}
	}
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("server did not exit after SIGTERM")
	}
	s.waitNoLeftovers(t, ids...)
}

// TestSecondServeRefusedClearly starts the real server, then a second
// `serve` with the same config, data dir and listen address (README's
// first command run twice on one host): the second exits non-zero at once
// with a message naming each setting to change (--listen, --data-dir, the
// installer's nftables table), and the first is untouched: its session,
// sandbox and all, still runs.
func TestSecondServeRefusedClearly(t *testing.T) {
	s := startServer(t, "")
	key := s.key("PRO")
	id := s.session(key, "bash")
	s.exec(key, id, "echo before > /home/sandbox/f")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, s.bin, "serve", "--config", s.config, "--data-dir", s.dataDir, "--listen", s.addr).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("second serve: %v (ctx %v)\n%s", err, ctx.Err(), out)
	}
	for _, want := range []string{"--listen", "SANDBOXAPI_LISTEN", s.addr, "--data-dir", "installer.table", "in use by another running sandboxapi serve"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("second serve's message lacks %q:\n%s", want, out)
		}
	}
	if r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": "cat /home/sandbox/f"}); r.status != 200 || !strings.Contains(string(r.body), `"stdout":"before\n"`) ||
		r.header.Get("X-Sandbox-Resumed") != "" {
		t.Fatalf("first server's session after the second serve: %d resumed %q %s", r.status, r.header.Get("X-Sandbox-Resumed"), r.body)
	}
}
