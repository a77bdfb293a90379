package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/host"
)

func TestBadInputGetsClearErrors(t *testing.T) {
	s := startServer(t, "server:\n  max_body_bytes: 65536\n")
	key := s.key("PRO")
	id := s.session(key, "python3")
	huge := append([]byte(`{"code":"`), bytes.Repeat([]byte("x"), 200<<10)...)
	huge = append(huge, `"}`...)
	cases := []struct {
		name   string
		method string
		path   string
		key    string
		body   any
		status int
		code   string
	}{
		{"no key", "GET", "/v1/sessions", "", nil, 401, "unauthenticated"},
		{"unknown key", "GET", "/v1/sessions", "sk_nope", nil, 401, "unauthenticated"},
		{"malformed json", "POST", "/v1/sessions", key, []byte(`{"language":`), 400, "invalid_json"},
		{"empty body", "POST", "/v1/sessions", key, []byte(``), 400, "invalid_json"},
		{"two objects", "POST", "/v1/sessions", key, []byte(`{"language":"bash"}{}`), 400, "invalid_json"},
		{"wrong type", "POST", "/v1/sessions", key, []byte(`{"language":5}`), 400, "invalid_json"},
		{"unknown field", "POST", "/v1/sessions", key, map[string]any{"language": "python3", "memory": 9}, 400, "unknown_field"},
		{"unknown language", "POST", "/v1/sessions", key, map[string]any{"language": "cobol"}, 400, "unknown_language"},
		{"missing language", "POST", "/v1/sessions", key, map[string]any{}, 400, "invalid_request"},
		{"idle_ttl too long", "POST", "/v1/sessions", key, map[string]any{"language": "bash", "idle_ttl": 1e7}, 400, "invalid_request"},
		{"negative timeout", "POST", "/v1/sessions/" + id + "/execute", key, map[string]any{"code": "1", "timeout": -1}, 400, "invalid_request"},
		{"timeout over plan", "POST", "/v1/sessions/" + id + "/execute", key, map[string]any{"code": "1", "timeout": 100000}, 400, "invalid_request"},
		{"missing code", "POST", "/v1/sessions/" + id + "/execute", key, map[string]any{}, 400, "invalid_request"},
		{"reserved env", "POST", "/v1/sessions/" + id + "/execute", key, map[string]any{"code": "1", "env": map[string]string{"PATH": "/x"}}, 400, "invalid_request"},
		{"huge body", "POST", "/v1/sessions/" + id + "/execute", key, huge, 413, "body_too_large"},
		{"unknown session", "POST", "/v1/sessions/sess_aaaaaaaaaaaaaaaaaaaaaaaaaa/execute", key, map[string]any{"code": "1"}, 404, "not_found"},
		{"unknown session get", "GET", "/v1/sessions/nope", key, nil, 404, "not_found"},
		{"unknown session delete", "DELETE", "/v1/sessions/nope", key, nil, 404, "not_found"},
		{"unknown route", "GET", "/v1/nothing", key, nil, 404, "no_route"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(tc.method, tc.path, tc.key, tc.body)
			if r.status != tc.status || r.errCode(t) != tc.code {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			if r.json(t)["error"].(map[string]any)["request_id"] == "" {
				t.Fatal("no request id")
			}
		})
	}
	// Nothing above broke the session.
	if out := s.exec(key, id, "print('still fine')"); out["stdout"] != "still fine\n" {
		t.Fatalf("session after bad input: %v", out)
	}
}

func TestPlanQuotaIsAtomic(t *testing.T) {
	s := startServer(t, "executor:\n  max_sandboxes: 30\n  warm_pool: 1\n  home_size: 32M\n")
	key := s.key("PRO")
	var wg sync.WaitGroup
	statuses := make([]int, 20)
	retry := make([]string, 20)
	for i := range statuses {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := s.do("POST", "/v1/sessions", key, map[string]any{"language": "bash"})
			statuses[i], retry[i] = r.status, r.header.Get("Retry-After")
		}(i)
	}
	wg.Wait()
	created, limited := 0, 0
	for i, st := range statuses {
		switch st {
		case 201:
			created++
		case 429:
			limited++
			if retry[i] == "" {
				t.Errorf("429 without Retry-After")
			}
		default:
			t.Errorf("unexpected status %d", st)
		}
	}
	if created != 2 || limited != 18 {
		t.Fatalf("PRO: %d created, %d limited; want exactly 2 and 18", created, limited)
	}
}

func TestBasicPlanGetsStatelessOnly(t *testing.T) {
	s := startServer(t, "")
	r := s.do("POST", "/v1/sessions", s.key("BASIC"), map[string]any{"language": "python3"})
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), "plan PRO has it") {
		t.Fatalf("BASIC session: %d %s", r.status, r.body)
	}
	r = s.do("POST", "/v1/sessions", s.key("PRO"), map[string]any{"language": "python3", "network": map[string]any{"enabled": true, "allowed_domains": []string{"example.com"}}})
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), "plan ULTRA has it") {
		t.Fatalf("PRO allowed_domains: %d %s", r.status, r.body)
	}
}

func TestKeysCannotSeeEachOthersSessions(t *testing.T) {
	s := startServer(t, "")
	owner, other := s.key("PRO"), s.key("MEGA")
	id := s.session(owner, "bash")
	s.exec(owner, id, "echo secret > /home/sandbox/f")
	// Every session route, as another key: 404 with code not_found, as if
	// the session did not exist, and nothing changes. The code matters: a
	// route that is not mounted is a 404 too (no_route). GET
	// /v1/sessions/{id}/egress is mounted with egress off too (this
	// server); its isolation with egress on is tested in egress_test.go
	// ("another key's egress log", "another key reads the trail").
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/sessions/" + id, nil},
		{"POST", "/v1/sessions/" + id + "/execute", map[string]any{"code": "echo hi"}},
		{"GET", "/v1/sessions/" + id + "/egress", nil},
		{"GET", "/v1/sessions/" + id + "/files?path=f", nil},
		{"GET", "/v1/sessions/" + id + "/files?dir=/home/sandbox", nil},
		{"PUT", "/v1/sessions/" + id + "/files?path=f", []byte("overwritten")},
		{"POST", "/v1/sessions/" + id + "/install", map[string]any{"manager": "pip", "packages": []string{"wheel==0.43.0"}}},
		{"DELETE", "/v1/sessions/" + id, nil},
	} {
		r := s.do(tc.method, tc.path, other, tc.body)
		if r.status != http.StatusNotFound {
			t.Errorf("%s %s as another key: %d %s", tc.method, tc.path, r.status, r.body)
			continue
		}
		if code := r.errCode(t); code != "not_found" {
			t.Errorf("%s %s as another key: code %q, want not_found: %s", tc.method, tc.path, code, r.body)
		}
	}
	r := s.do("GET", "/v1/sessions", other, nil)
	if strings.Contains(string(r.body), id) {
		t.Fatalf("other key lists the session: %s", r.body)
	}
	if out := s.exec(owner, id, "cat /home/sandbox/f; echo mine"); out["stdout"] != "secret\nmine\n" {
		t.Fatalf("owner lost the session: %v", out)
	}
}

func TestKilledServerRestartsWithoutLeaks(t *testing.T) {
	s := startServer(t, "executor:\n  warm_pool: 0\n")
	key := s.key("PRO")
	id := s.session(key, "python3")
	s.exec(key, id, "open('/home/sandbox/keep','w').write('survived')")
	// An execution in flight when the server dies.
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", s.url("/v1/sessions/"+id+"/execute"), strings.NewReader(`{"code":"import time; time.sleep(20)"}`))
		req.Header.Set("X-RapidAPI-Key", key)
		resp, err := s.client().Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("in-flight call answered %d", resp.StatusCode)
		}
		done <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	s.waitExecutionsRunning(t, id) // in flight in the server, not on its way to it
	s.kill()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("in-flight call: %v (want a broken connection, never a success)", err)
	}
	s.start()
	out := s.exec(key, id, "print(open('/home/sandbox/keep').read())")
	if out["stdout"] != "survived\n" {
		t.Fatalf("after restart: %v", out)
	}
	// Usage recorded before the crash survived it.
	u := s.do("GET", "/v1/usage", key, nil)
	if !strings.Contains(string(u.body), `"route":"POST /v1/sessions"`) {
		t.Fatalf("usage lost: %s", u.body)
	}
	if r := s.do("DELETE", "/v1/sessions/"+id, key, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	s.stop()
	// Nothing is left of the sandbox: no runsc process, mount, cgroup or folder.
	if n := countProcs(s.dataDir); n != 0 {
		t.Errorf("%d runsc processes left", n)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), s.dataDir) {
		t.Errorf("mounts left under %s", s.dataDir)
	}
	for _, cg := range host.CgroupDirs() {
		if strings.Contains(cg, id) {
			t.Errorf("cgroup left: %s", cg)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(s.dataDir, "sessions", "*")); len(m) != 0 {
		t.Errorf("session folders left: %v", m)
	}
}

func countProcs(dataDir string) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), filepath.Join(dataDir, "runsc")) {
			n++
		}
	}
	return n
}

// TestHostedProductClientWorksUnchanged runs a client written the way the
// hosted product's documentation shows, with only the base URL changed.
func TestHostedProductClientWorksUnchanged(t *testing.T) {
	s := startServer(t, "")
	key := s.key("PRO")
	python := ""
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import requests").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		t.Fatal("no python3 with requests on this machine (apt-get install python3-requests)")
	}
	script := `
import os, requests

BASE_URL = os.environ["BASE_URL"]
HEADERS = {
    "X-RapidAPI-Key": os.environ["RAPIDAPI_KEY"],
    "X-RapidAPI-Host": "code-sandbox.p.rapidapi.com",
    "Content-Type": "application/json",
}

def api(method, path, **body):
    resp = requests.request(method, BASE_URL + path, headers=HEADERS, json=body or None, timeout=120)
    resp.raise_for_status()
    return resp.json() if resp.content else {}

session = api("POST", "/v1/sessions", language="python3", idle_ttl=600)
sid = session["id"]
api("POST", f"/v1/sessions/{sid}/execute", code="open('data.txt','w').write('hello')", timeout=60)
result = api("POST", f"/v1/sessions/{sid}/execute", code="print(open('data.txt').read().upper())", timeout=60)
print("OUT:" + result["stdout"].strip())
print("ERR:" + result["stderr"].strip())
api("DELETE", f"/v1/sessions/{sid}")
print("DONE")
`
	cmd := exec.Command(python, "-c", script)
	cmd.Env = append(os.Environ(), "BASE_URL=http://"+s.addr, "RAPIDAPI_KEY="+key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "OUT:HELLO\nERR:\nDONE") {
		t.Fatalf("client output: %s", out)
	}
}

func TestStreamingDeliversChunksWhileRunning(t *testing.T) {
	s := startServer(t, "")
	key := s.key("PRO")
	id := s.session(key, "python3")
	body := strings.NewReader(`{"code":"import time\nfor i in range(5):\n    print('line', i, flush=True)\n    time.sleep(0.2)","stream":true}`)
	req, _ := http.NewRequest("POST", s.url("/v1/sessions/"+id+"/execute"), body)
	req.Header.Set("X-RapidAPI-Key", key)
	start := time.Now()
	resp, err := s.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	buf := make([]byte, 4096)
	var all strings.Builder
	var firstAt time.Duration
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if firstAt == 0 && strings.Contains(all.String()+string(buf[:n]), "event: stdout") {
				firstAt = time.Since(start)
			}
			all.Write(buf[:n])
		}
		if err != nil {
			break
		}
	}
	total := time.Since(start)
	if !strings.Contains(all.String(), "event: result") || !strings.Contains(all.String(), `"status":"ok"`) {
		t.Fatalf("stream: %s", all.String())
	}
	// The program runs for about a second; the first line must arrive long
	// before it ends.
	if firstAt == 0 || total-firstAt < 600*time.Millisecond {
		t.Fatalf("first chunk at %v of %v: not streamed", firstAt, total)
	}
}

// A streaming client that goes away kills its program: the session is free
// again at once and nothing of the call survives.
func TestDisconnectKillsTheProgram(t *testing.T) {
	s := startServer(t, "")
	key := s.key("PRO")
	id := s.session(key, "bash")
	req, _ := http.NewRequest("POST", s.url("/v1/sessions/"+id+"/execute"),
		strings.NewReader(`{"code":"touch /home/sandbox/running; echo started; sleep 30; touch /home/sandbox/finished","stream":true,"timeout":60}`))
	req.Header.Set("X-RapidAPI-Key", key)
	resp, err := s.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	if _, err := resp.Body.Read(buf); err != nil || !strings.Contains(string(buf), "started") {
		t.Fatalf("first chunk: %q %v", buf, err)
	}
	resp.Body.Close() // the client goes away mid-run
	start := time.Now()
	out := s.exec(key, id, "ls /home/sandbox; ps -eo comm | grep -c '^sleep$' || true")
	t.Logf("next call done %v after the disconnect", time.Since(start))
	if time.Since(start) > 15*time.Second {
		t.Fatalf("the session stayed busy for %v after the client left", time.Since(start))
	}
	if got := out["stdout"].(string); !strings.Contains(got, "running") || strings.Contains(got, "finished") || !strings.HasSuffix(got, "0\n") {
		t.Fatalf("after disconnect: %q", got)
	}
}

// SIGTERM drains: a call that fits in the grace period finishes and is
// answered; one that does not is cut off; the server then exits and leaves
// no sandbox behind.
//
// Not parallel: the short call must end within the 4 s grace period,
// with a margin that other tests' load could eat.
func TestSigtermDrains(t *testing.T) {
	s := startServer(t, "server:\n  shutdown_grace: 4s\n")
	key := s.key("PRO")
	short, long := s.session(key, "bash"), s.session(key, "bash")
	type outcome struct {
		status int
		body   string
		err    error
	}
	call := func(id, code string, ch chan<- outcome) {
		req, _ := http.NewRequest("POST", s.url("/v1/sessions/"+id+"/execute"), strings.NewReader(`{"code":"`+code+`","timeout":60}`))
		req.Header.Set("X-RapidAPI-Key", key)
		resp, err := s.client().Do(req)
		if err != nil {
			ch <- outcome{err: err}
			return
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		ch <- outcome{status: resp.StatusCode, body: b.String()}
	}
	shortCh, longCh := make(chan outcome, 1), make(chan outcome, 1)
	go call(short, "sleep 2; echo finished", shortCh)
	go call(long, "sleep 50; echo never", longCh)
	time.Sleep(700 * time.Millisecond)
	s.waitExecutionsRunning(t, short, long) // both under way, not new work
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if o := <-shortCh; o.err != nil || o.status != 200 || !strings.Contains(o.body, `"stdout":"finished\n"`) {
		t.Fatalf("call within the grace period: %+v", o)
	}
	if o := <-longCh; o.err == nil && strings.Contains(o.body, "never") {
		t.Fatalf("call past the grace period completed: %+v", o)
	}
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("server did not exit after SIGTERM")
	}
	if took := time.Since(start); took > 40*time.Second {
		t.Fatalf("shutdown took %v", took)
	}
	if n := countProcs(s.dataDir); n != 0 {
		t.Fatalf("%d runsc processes left after shutdown", n)
	}
}
