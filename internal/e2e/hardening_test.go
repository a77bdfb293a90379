package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// TestNetworkRequestWithEgressOff is issue 13 item 1 as the report saw
// it: on the embedded defaults (egress off) a PRO key asks sixteen times
// for a session with network. Each answer is 503 network_unavailable (and
// the access log says 503); afterwards nothing is taken: a BASIC stateless
// call works, the PRO key gets its two sessions, no row is left creating
// and no sandbox, mount or loop device stays once they are deleted.
func TestNetworkRequestWithEgressOff(t *testing.T) {
	s := startServer(t, "")
	pro, basic := s.key("PRO"), s.key("BASIC")
	for i := range 16 {
		r := s.do("POST", "/v1/sessions", pro, map[string]any{"language": "python3", "network": map[string]any{"enabled": true}})
		if r.status != http.StatusServiceUnavailable || r.errCode(t) != "network_unavailable" {
			t.Fatalf("request %d: %d %s, want 503 network_unavailable", i+1, r.status, r.body)
		}
	}
	r := s.do("POST", "/v1/execute", basic, map[string]any{"language": "python3", "code": "print(6*7)"})
	if r.status != http.StatusOK || r.json(t)["stdout"] != "42\n" {
		t.Fatalf("BASIC stateless after the refusals: %d %s", r.status, r.body)
	}
	ids := []string{s.session(pro, "bash"), s.session(pro, "bash")}
	for _, id := range ids {
		if res := s.exec(pro, id, "echo ok"); res["status"] != "ok" {
			t.Fatalf("session %s: %v", id, res)
		}
	}

	// The access log: sixteen 503s for the creates, not 200 or 500.
	n503 := 0
	sc := bufio.NewScanner(strings.NewReader(s.logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg    string `json:"msg"`
			Route  string `json:"route"`
			Status int    `json:"status"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "request" || l.Route != "POST /v1/sessions" {
			continue
		}
		switch l.Status {
		case http.StatusServiceUnavailable:
			n503++
		case http.StatusCreated:
		default:
			t.Errorf("access log: POST /v1/sessions with status %d", l.Status)
		}
	}
	if n503 != 16 {
		t.Errorf("access log holds %d creates answered 503, want 16", n503)
	}
	if strings.Contains(s.logs.String(), `"panic"`) {
		t.Errorf("the server logged a panic:\n%s", tail(s.logs.String(), 40))
	}

	st, err := store.Open(context.Background(), filepath.Join(s.dataDir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := st.SessionsInStates(context.Background(), "creating", "failed")
	st.Close()
	if err != nil || len(rows) != 0 {
		t.Fatalf("rows creating or failed: %+v %v", rows, err)
	}
	for _, id := range ids {
		if r := s.do("DELETE", "/v1/sessions/"+id, pro, nil); r.status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
	}
	s.stop()
	s.waitNoLeftovers(t, ids...)
}

// hostOOMCode commits 2 GiB in one system call (a memfd's fallocate),
// faster than the guest's memory watchdog looks, so the host cgroup's OOM
// killer takes the whole sandbox.
const hostOOMCode = "import os\nfd = os.memfd_create('x')\nos.posix_fallocate(fd, 0, 2 << 30)\nprint('survived')"

// TestOOMStatusThroughAPI is issue 13 item 7: a program that exceeds
// memory is answered 200 with status "oom", both when the guest's
// watchdog stops it (the session lives on) and when the host's OOM killer
// takes the whole sandbox (the session is gone afterwards), as JSON and
// as the final SSE result event.
func TestOOMStatusThroughAPI(t *testing.T) {
	s := startServer(t, "")
	key := s.key("PRO")

	// The guest's watchdog: the session survives.
	id := s.session(key, "python3")
	res := s.exec(key, id, "x = b'x' * (2 << 30)\nprint(len(x))")
	if res["status"] != "oom" {
		t.Fatalf("memory bomb: %v, want status oom", res)
	}
	if res := s.exec(key, id, "print('alive')"); res["stdout"] != "alive\n" {
		t.Fatalf("after the watchdog's oom: %v", res)
	}

	// The host's OOM killer: 200 oom, then the session is gone.
	r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": hostOOMCode, "timeout": 30})
	if r.status != http.StatusOK {
		t.Fatalf("host oom: %d %s, want 200 with status oom\n%s", r.status, r.body, tail(s.logs.String(), 20))
	}
	if m := r.json(t); m["status"] != "oom" || m["exit_code"] != float64(137) || m["signal"] != "SIGKILL" {
		t.Fatalf("host oom: %s, want status oom, exit 137, SIGKILL", r.body)
	}
	waitGone(t, s, key, id)

	// The same as a stream: the last event is the result, status oom.
	id2 := s.session(key, "python3")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"code": hostOOMCode, "timeout": 30, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", s.url("/v1/sessions/"+id2+"/execute"), strings.NewReader(string(body)))
	req.Header.Set("X-RapidAPI-Key", key)
	resp, err := s.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var event, data string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		} else if v, ok := strings.CutPrefix(line, "data: "); ok {
			data = v
		}
	}
	if event != "result" {
		t.Fatalf("stream ended with event %q %s, want result", event, data)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(data), &m); err != nil || m["status"] != "oom" {
		t.Fatalf("streamed result %s (%v), want status oom", data, err)
	}
	waitGone(t, s, key, id2)
	s.stop()
	s.waitNoLeftovers(t, id, id2)
}

// waitGone waits until the session whose sandbox was lost is no longer
// listed as running.
func waitGone(t *testing.T, s *server, key, id string) {
	t.Helper()
	var r reply
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		r = s.do("GET", "/v1/sessions/"+id, key, nil)
		if r.status == http.StatusNotFound {
			return
		}
	}
	t.Fatalf("session %s after its sandbox was lost: %d %s", id, r.status, r.body)
}
