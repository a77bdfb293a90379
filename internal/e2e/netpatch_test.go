package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// holdScript (bash running Python) keeps one explicit-proxy (CONNECT) and one transparent TLS
// connection to www.allowed.test open, sending a keep-alive request on
// each every 300 ms, and says when each is closed under it; then it tries
// both again. It writes /home/sandbox/held once both have answered.
const holdScript = `python3 - <<'PY'
import http.client, os, ssl, time, urllib.parse
ctx = ssl.create_default_context(cafile="/home/sandbox/fake-ca.pem")
p = urllib.parse.urlparse(os.environ["HTTPS_PROXY"])
def connect():
    c = http.client.HTTPSConnection(p.hostname, p.port, context=ctx, timeout=10)
    c.set_tunnel("www.allowed.test", 443)
    return c
def transparent():
    return http.client.HTTPSConnection("www.allowed.test", 443, context=ctx, timeout=10)
conns = {"connect": connect(), "transparent": transparent()}
for i in range(100):
    for name, c in list(conns.items()):
        try:
            c.request("GET", "/")
            c.getresponse().read()
            print("ok", name, i, flush=True)
        except Exception as e:
            print("closed", name, i, type(e).__name__, flush=True)
            c.close()
            del conns[name]
    if i == 0:
        open("/home/sandbox/held", "w").close()
    if not conns:
        break
    time.sleep(0.3)
for name, mk in (("connect", connect), ("transparent", transparent)):
    try:
        c = mk()
        c.request("GET", "/")
        print("reopened", name, c.getresponse().status, flush=True)
    except Exception as e:
        print("refused", name, type(e).__name__, flush=True)
PY
`

// TestLiveAllowList changes the allow-list of running and hibernated
// sessions with PATCH /v1/sessions/{id}/network, against real runsc
// sandboxes, the real proxy and the fake internet.
func TestLiveAllowList(t *testing.T) {
	f := startFakeInternet(t)
	ee := newEgressEnv(t)
	s := startServer(t, ee.yaml(f))
	sweepAfter(t, s)
	ultra := s.key("ULTRA")
	id := s.networkSession(ultra, map[string]any{"enabled": true, "allowed_domains": []string{"www.allowed.test"}})
	s.installCA(ultra, id, f)
	curl := func(host string) string {
		return `curl -sS --max-time 20 https://` + host + `/ 2>&1; echo "rc=$?"`
	}
	reaches := func(when, id, host string) bool {
		t.Helper()
		o := s.run(ultra, id, curl(host), caEnv)["stdout"].(string)
		ok := strings.Contains(o, "hello "+host) && strings.Contains(o, "rc=0")
		if !ok && !strings.Contains(o, "403") && !strings.Contains(o, "Could not resolve") {
			t.Fatalf("%s: curl %s neither reached it nor was refused: %s", when, host, o)
		}
		return ok
	}
	patch := func(id string, network map[string]any) reply {
		t.Helper()
		return s.do("PATCH", "/v1/sessions/"+id+"/network", ultra, network)
	}
	network := func(r reply) (bool, []string, string) {
		t.Helper()
		var v struct {
			State   string `json:"state"`
			Network struct {
				Enabled        bool     `json:"enabled"`
				AllowedDomains []string `json:"allowed_domains"`
			} `json:"network"`
		}
		if err := json.Unmarshal(r.body, &v); err != nil {
			t.Fatalf("session reply %q: %v", r.body, err)
		}
		return v.Network.Enabled, v.Network.AllowedDomains, v.State
	}

	// A running session: refused, added live, reached.
	if reaches("before", id, "api.allowed.test") {
		t.Fatal("api.allowed.test reached before it was allowed")
	}
	r := patch(id, map[string]any{"enabled": true, "allowed_domains": []string{"www.allowed.test", "api.allowed.test"}})
	if r.status != http.StatusOK {
		t.Fatalf("PATCH add: %d %s", r.status, r.body)
	}
	if en, doms, st := network(r); !en || len(doms) != 2 || st != "running" {
		t.Fatalf("PATCH add reply: %s", r.body)
	}
	if !reaches("after adding", id, "api.allowed.test") {
		t.Fatal("api.allowed.test refused after it was added")
	}

	// Long-lived connections (CONNECT and transparent) to a host a PATCH
	// removes are closed, and cannot be opened again.
	type result struct {
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		b, _ := json.Marshal(map[string]any{"code": holdScript, "env": caEnv, "timeout": 90})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", s.url("/v1/sessions/"+id+"/execute"), bytes.NewReader(b))
		req.Header.Set("X-RapidAPI-Key", ultra)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		done <- result{body: string(body), err: err}
	}()
	// Files move beside a running execute: wait for the script's mark.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if r := s.do("GET", "/v1/sessions/"+id+"/files?path=/home/sandbox/held", ultra, nil); r.status == http.StatusOK {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the script ended before holding its connections: %v %s", r.err, r.body)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the script never held its connections")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := patch(id, map[string]any{"enabled": true, "allowed_domains": []string{"api.allowed.test"}}); r.status != http.StatusOK {
		t.Fatalf("PATCH remove: %d %s", r.status, r.body)
	}
	var held result
	select {
	case held = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the script holding connections did not end")
	}
	if held.err != nil {
		t.Fatalf("execute holding connections: %v", held.err)
	}
	var res struct {
		Stdout string `json:"stdout"`
	}
	_ = json.Unmarshal([]byte(held.body), &res)
	for _, want := range []string{"ok connect 0", "ok transparent 0", "closed connect", "closed transparent", "refused connect", "refused transparent"} {
		if !strings.Contains(res.Stdout, want) {
			t.Fatalf("held connections: no %q in %s", want, held.body)
		}
	}
	if strings.Contains(res.Stdout, "ok connect 99") {
		t.Fatalf("a connection outlived the change: %s", res.Stdout)
	}
	if reaches("after removing", id, "www.allowed.test") || !reaches("after removing", id, "api.allowed.test") {
		t.Fatal("the new list is not enforced after removing www.allowed.test")
	}
	// The audit says why the tunnels ended; the log who changed the list.
	var audited bool
	for end := time.Now().Add(10 * time.Second); !audited && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		r := s.do("GET", "/v1/sessions/"+id+"/egress", ultra, nil)
		audited = strings.Count(string(r.body), "no longer allows this host") >= 2
	}
	if !audited {
		t.Errorf("the egress trail does not record the two tunnels the change closed")
	}
	if logs := s.logs.String(); !strings.Contains(logs, "session network changed") || !strings.Contains(logs, "egress policy changed") {
		t.Errorf("the change is not logged")
	}

	// A hibernated session: stored, not resumed; the resume honours it.
	if r := s.do("POST", "/v1/sessions/"+id+"/hibernate", ultra, nil); r.status != http.StatusOK {
		t.Fatalf("hibernate: %d %s", r.status, r.body)
	}
	r = patch(id, map[string]any{"enabled": true, "allowed_domains": []string{"www.allowed.test"}})
	if en, doms, st := network(r); r.status != http.StatusOK || !en || len(doms) != 1 || doms[0] != "www.allowed.test" || st != "hibernated" {
		t.Fatalf("PATCH a hibernated session: %d %s", r.status, r.body)
	}
	if _, _, st := network(s.do("GET", "/v1/sessions/"+id, ultra, nil)); st != "hibernated" {
		t.Fatalf("the PATCH resumed the session: %s", st)
	}
	if !reaches("after resume", id, "www.allowed.test") || reaches("after resume", id, "api.allowed.test") {
		t.Fatal("the resume did not attach the new list")
	}

	// A session made without network runs without a namespace: 409 while
	// running, and network arrives with the resume after a hibernation.
	plain := s.session(ultra, "bash")
	s.installCA(ultra, plain, f)
	if r := patch(plain, map[string]any{"enabled": true, "allowed_domains": []string{"www.allowed.test"}}); r.status != http.StatusConflict || r.errCode(t) != "network_not_attached" {
		t.Fatalf("enable network on a running session without it: %d %s", r.status, r.body)
	}
	if r := s.do("POST", "/v1/sessions/"+plain+"/hibernate", ultra, nil); r.status != http.StatusOK {
		t.Fatalf("hibernate: %d %s", r.status, r.body)
	}
	if r := patch(plain, map[string]any{"enabled": true, "allowed_domains": []string{"www.allowed.test"}}); r.status != http.StatusOK {
		t.Fatalf("enable network on a hibernated session: %d %s", r.status, r.body)
	}
	if !reaches("network enabled while hibernated", plain, "www.allowed.test") {
		t.Fatal("a session given network while hibernated cannot reach its host")
	}

	// Plan and input rules as at create.
	if r := s.do("PATCH", "/v1/sessions/"+id+"/network", s.key("PRO"), map[string]any{"enabled": true}); r.status != http.StatusNotFound {
		t.Fatalf("another key's session: %d %s", r.status, r.body)
	}
	if r := patch(id, map[string]any{"enabled": true, "allowed_domains": []string{"*"}}); r.status != http.StatusBadRequest {
		t.Fatalf("bad entry: %d %s", r.status, r.body)
	}

	// The list survives a restart.
	s.stop()
	s.start()
	if en, doms, _ := network(s.do("GET", "/v1/sessions/"+id, ultra, nil)); !en || len(doms) != 1 || doms[0] != "www.allowed.test" {
		t.Fatal("the new list did not survive the restart")
	}
	if !reaches("after restart", id, "www.allowed.test") || reaches("after restart", id, "api.allowed.test") {
		t.Fatal("the new list is not enforced after the restart")
	}

	// Disabling network on a running session refuses everything; its
	// namespace goes with the session.
	if r := patch(id, map[string]any{"enabled": false}); r.status != http.StatusOK {
		t.Fatalf("disable: %d %s", r.status, r.body)
	}
	if reaches("disabled", id, "www.allowed.test") {
		t.Fatal("reached a host with network disabled")
	}
	for _, sid := range []string{id, plain} {
		if r := s.do("DELETE", "/v1/sessions/"+sid, ultra, nil); r.status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
	}
	// A topology check re-run meanwhile (a busy machine can fail it, and
	// /readyz re-runs failing checks) holds a canary network for a few
	// seconds: what is left must go within them.
	s.readinessCheck("topology", 90*time.Second)
	left := ee.leftovers(t)
	for end := time.Now().Add(30 * time.Second); len(left) != 0 && time.Now().Before(end); left = ee.leftovers(t) {
		time.Sleep(time.Second)
	}
	if len(left) != 0 {
		t.Fatalf("left after delete: %q", left)
	}
}
