package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCluster runs 3 nodes on one PostgreSQL with one shared homes folder
// (issue 16) and checks, in order on the same cluster:
//
//   - every call works through every node, a session's calls are served by
//     the node that holds it, every reply names its node in
//     X-Sandbox-Node, and a forwarded call is metered once;
//   - 50 parallel creates of one PRO key sent to the 3 nodes give exactly 2
//     sessions, the rest 429 quota_exceeded;
//   - 90 parallel calls of one BASIC key (60 a minute), 30 to each node,
//     get at most 60 (and a token or two of refill) through, the rest 429
//     rate_limited;
//   - after a SIGKILL of a node, its sessions (one running, one
//     hibernated) resume on another node on their next call with their
//     file and installed package, while a watcher sees no home image
//     attached or mounted twice at any moment; the restarted node comes
//     back with a new epoch and takes new sessions;
//   - a SIGTERM of a node, while clients keep calling its sessions
//     through the other nodes, hands them over with no failed call.
//
// TestClusterWithoutSharedHomes covers nodes whose homes are their own.
//
// Run with:
//
//	SANDBOXAPI_REQUIRE_RUNSC=1 SANDBOXAPI_REQUIRE_POSTGRES=1 go test -count=1 ./internal/e2e -run TestCluster -v -timeout 20m
func TestCluster(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	dir := t.TempDir()
	c.admin.importOSV()
	c.admin.cliArgs([]string{"mirror", "add"}, writeWheel(t, dir, "cluster-pkg", "1.0.0"))
	st := c.openStore(t)
	nodes, err := st.Nodes(context.Background())
	if err != nil || len(nodes) != 3 {
		t.Fatalf("nodes in the store: %v %v", nodes, err)
	}
	for _, n := range nodes {
		if !n.Alive(time.Now()) || n.Draining || n.URL == "" {
			t.Fatalf("node %+v: want alive, not draining, with its URL", n)
		}
	}

	t.Run("every call through every node", func(t *testing.T) { testClusterEveryCall(t, c) })
	t.Run("50 parallel creates of one PRO key", func(t *testing.T) { testClusterQuota(t, c) })
	t.Run("one key's rate limit across nodes", func(t *testing.T) { testClusterRate(t, c) })
	t.Run("SIGKILL of a node", func(t *testing.T) { testClusterKill(t, c) })
	t.Run("SIGTERM of a node", func(t *testing.T) { testClusterDrain(t, c) })
}

func testClusterEveryCall(t *testing.T, c *cluster) {
	key := c.key(t, "MEGA")
	n := len(c.nodes)
	type sess struct{ id, owner string }
	var ss []sess
	executes := 0
	for i := range c.nodes {
		id, owner := c.create(t, i, key, map[string]any{"language": "bash"})
		ss = append(ss, sess{id, owner})
		t.Logf("session %s created through %s is held by %s", id, c.names[i], owner)
	}
	ownedBy := func(t *testing.T, r reply, s sess, what string) {
		t.Helper()
		if got := servedBy(r); got != s.owner {
			t.Errorf("%s of %s served by %s, want its holder %s", what, s.id, got, s.owner)
		}
	}
	for k, s := range ss {
		for i := range c.nodes {
			at := c.names[i]
			code := fmt.Sprintf("echo %s >> /home/sandbox/trail; wc -l < /home/sandbox/trail", at)
			r := c.exec(t, i, key, s.id, code)
			executes++
			ownedBy(t, r, s, "execute through "+at)
			if got, want := r.json(t)["stdout"], fmt.Sprintf("%d\n", i+1); got != want {
				t.Errorf("execute in %s through %s: stdout %q, want %q", s.id, at, got, want)
			}

			ev := c.stream(t, i, key, s.id, "echo first; sleep 1; echo second")
			executes++
			ownedBy(t, ev.reply, s, "streamed execute through "+at)
			if !strings.Contains(ev.text, "event: result") || !strings.Contains(ev.text, `"status":"ok"`) || !strings.Contains(ev.text, "second") {
				t.Errorf("stream through %s: %q", at, ev.text)
			}
			if ev.firstAt == 0 || ev.total-ev.firstAt < 600*time.Millisecond {
				t.Errorf("stream through %s: first line at %v of %v: not streamed as it ran", at, ev.firstAt, ev.total)
			}

			// Uploads through this node (one with a length, one
			// chunked), read back through the next.
			blob := make([]byte, 300<<10)
			_, _ = rand.Read(blob)
			path := fmt.Sprintf("/home/sandbox/up-%d.bin", i)
			r = c.call(t, i, request{method: "PUT", path: filesURL(s.id, "path", path), key: key, body: blob})
			if r.status != http.StatusOK || r.json(t)["size"] != float64(len(blob)) {
				t.Fatalf("upload through %s: %d %s", at, r.status, r.body)
			}
			ownedBy(t, r, s, "upload through "+at)
			r = c.call(t, i, request{method: "PUT", path: filesURL(s.id, "path", path+".chunked"), key: key, body: bytes.NewReader(blob)})
			if r.status != http.StatusOK || r.json(t)["size"] != float64(len(blob)) {
				t.Fatalf("chunked upload through %s: %d %s", at, r.status, r.body)
			}
			for _, p := range []string{path, path + ".chunked"} {
				r = c.call(t, (i+1)%n, request{method: "GET", path: filesURL(s.id, "path", p), key: key})
				if r.status != http.StatusOK || !bytes.Equal(r.body, blob) {
					t.Fatalf("download of %s through %s: %d, %d bytes (want %d)", p, c.names[(i+1)%n], r.status, len(r.body), len(blob))
				}
				ownedBy(t, r, s, "download through "+c.names[(i+1)%n])
			}

			r = c.call(t, i, request{method: "GET", path: "/v1/sessions/" + s.id, key: key})
			if r.status != http.StatusOK || r.json(t)["id"] != s.id {
				t.Errorf("get through %s: %d %s", at, r.status, r.body)
			}
			ownedBy(t, r, s, "get through "+at)
			r = c.call(t, i, request{method: "GET", path: "/v1/sessions/" + s.id + "/egress", key: key})
			if r.status != http.StatusOK || r.json(t)["session_id"] != s.id {
				t.Errorf("egress through %s: %d %s", at, r.status, r.body)
			}
			r = c.call(t, i, request{method: "GET", path: "/v1/sessions/" + s.id + "/sbom", key: key})
			if r.status != http.StatusOK || r.json(t)["bomFormat"] != "CycloneDX" {
				t.Errorf("sbom through %s: %d %s", at, r.status, r.body)
			}
			if k == 0 {
				// The list is the key's sessions on every node.
				r = c.call(t, i, request{method: "GET", path: "/v1/sessions", key: key})
				got := listedIDs(t, r)
				for _, s := range ss {
					if !slices.Contains(got, s.id) {
						t.Errorf("list through %s lacks %s (held by %s): %s", at, s.id, s.owner, r.body)
					}
				}
			}
		}
	}

	// A client cannot pass for a node: a call with forwarding headers
	// that do not verify is refused, and nothing runs.
	forged := http.Header{}
	for k, v := range map[string]string{"X-Sandbox-Forwarded-By": c.names[1], "X-Sandbox-Forward-Time": fmt.Sprint(time.Now().Unix()),
		"X-Sandbox-Forward-Nonce": "00112233445566778899aabbccddeeff", "X-Sandbox-Forward-Signature": strings.Repeat("ab", 32)} {
		forged.Set(k, v)
	}
	for i := range c.nodes {
		r := c.call(t, i, request{method: "POST", path: "/v1/sessions/" + ss[0].id + "/execute", key: key,
			body: map[string]any{"code": "echo forged >> /home/sandbox/trail"}, header: forged})
		if r.status != http.StatusUnauthorized || r.errCode(t) != "bad_node_signature" {
			t.Errorf("a forged forward through %s: %d %s, want 401 bad_node_signature", c.names[i], r.status, r.body)
		}
	}

	// Hibernate through one node, resume through the next; fork through
	// a third and use the child through a fourth.
	for k, s := range ss {
		i := k % n
		r := c.call(t, i, request{method: "POST", path: "/v1/sessions/" + s.id + "/hibernate", key: key})
		if r.status != http.StatusOK || r.json(t)["state"] != "hibernated" {
			t.Fatalf("hibernate through %s: %d %s", c.names[i], r.status, r.body)
		}
		ownedBy(t, r, s, "hibernate through "+c.names[i])
		r = c.exec(t, (i+1)%n, key, s.id, "wc -l < /home/sandbox/trail")
		executes++
		if r.json(t)["stdout"] != fmt.Sprintf("%d\n", n) || r.header.Get("X-Sandbox-Resumed") == "" {
			t.Errorf("execute after hibernate through %s: resumed %q, %s", c.names[(i+1)%n], r.header.Get("X-Sandbox-Resumed"), r.body)
		}
		ownedBy(t, r, s, "resume through "+c.names[(i+1)%n])

		r = c.call(t, (i+2)%n, request{method: "POST", path: "/v1/sessions/" + s.id + "/fork", key: key})
		if r.status != http.StatusCreated || r.json(t)["forked_from"] != s.id {
			t.Fatalf("fork through %s: %d %s", c.names[(i+2)%n], r.status, r.body)
		}
		child := sess{id: r.json(t)["id"].(string), owner: servedBy(r)}
		r = c.exec(t, (i+1)%n, key, child.id, "wc -l < /home/sandbox/trail; echo child >> /home/sandbox/trail")
		executes++
		if r.json(t)["stdout"] != fmt.Sprintf("%d\n", n) {
			t.Errorf("fork child through %s: %s", c.names[(i+1)%n], r.body)
		}
		ownedBy(t, r, child, "the fork's execute")
		r = c.call(t, i, request{method: "DELETE", path: "/v1/sessions/" + child.id, key: key})
		if r.status != http.StatusNoContent {
			t.Fatalf("delete of the fork through %s: %d %s", c.names[i], r.status, r.body)
		}
	}

	// A network session's egress audit through every node.
	netID, netOwner := c.create(t, 0, key, map[string]any{"language": "bash",
		"network": map[string]any{"enabled": true, "allowed_domains": []string{"www.allowed.test"}}})
	c.proxyDenied(t, 1, key, netID)
	executes++
	for i := range c.nodes {
		deadline := time.Now().Add(30 * time.Second)
		for {
			r := c.call(t, i, request{method: "GET", path: "/v1/sessions/" + netID + "/egress", key: key})
			if r.status != http.StatusOK {
				t.Fatalf("egress through %s: %d %s", c.names[i], r.status, r.body)
			}
			if denied(r.json(t), "evil.denied.test") {
				ownedBy(t, r, sess{netID, netOwner}, "egress through "+c.names[i])
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("egress through %s: no deny for evil.denied.test: %s", c.names[i], r.body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// Every forwarded execute was metered once, by the node that ran it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := c.call(t, 0, request{method: "GET", path: "/v1/usage", key: key})
		got := routeRequests(t, r, "POST /v1/sessions/{id}/execute")
		if got == int64(executes) {
			break
		}
		if got > int64(executes) || time.Now().After(deadline) {
			t.Fatalf("usage counts %d executes, the client made %d: %s", got, executes, r.body)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Delete through a node that does not hold the session; then every
	// node answers 404.
	for _, s := range append(ss, sess{netID, netOwner}) {
		i := c.other(0, c.index(s.owner))
		if r := c.call(t, i, request{method: "DELETE", path: "/v1/sessions/" + s.id, key: key}); r.status != http.StatusNoContent {
			t.Fatalf("delete through %s: %d %s", c.names[i], r.status, r.body)
		}
		for j := range c.nodes {
			if r := c.call(t, j, request{method: "GET", path: "/v1/sessions/" + s.id, key: key}); r.status != http.StatusNotFound {
				t.Errorf("get of a deleted session through %s: %d %s", c.names[j], r.status, r.body)
			}
		}
	}
}

// deniedCurl is a request the egress proxy of a session with network
// refuses (CONNECT 403, curl's exit 56) without any traffic leaving the
// host: the name is not on the session's allow-list.
const deniedCurl = `curl -sS --max-time 20 https://evil.denied.test/ 2>&1; echo "rc=$?"`

// proxyDenied runs deniedCurl in session id through node i and checks
// that the session's proxy answered (and refused).
func (c *cluster) proxyDenied(t testing.TB, i int, key, id string) reply {
	t.Helper()
	r := c.exec(t, i, key, id, deniedCurl)
	if o := r.json(t)["stdout"].(string); !strings.Contains(o, "rc=56") || !strings.Contains(o, "403") {
		t.Errorf("%s through %s: want the proxy's CONNECT refusal (403, rc=56): %s", id, c.names[i], r.body)
	}
	return r
}

// denies counts the deny decisions for evil.denied.test in session id's
// egress audit, read through node i.
func (c *cluster) denies(t testing.TB, i int, key, id string) int {
	t.Helper()
	r := c.call(t, i, request{method: "GET", path: "/v1/sessions/" + id + "/egress", key: key})
	if r.status != http.StatusOK {
		t.Fatalf("egress of %s through %s: %d %s", id, c.names[i], r.status, r.body)
	}
	n := 0
	ds, _ := r.json(t)["decisions"].([]any)
	for _, d := range ds {
		if m, ok := d.(map[string]any); ok && m["outcome"] == "deny" && m["host"] == "evil.denied.test" {
			n++
		}
	}
	return n
}

// sseReply is a streamed execute as the client saw it.
type sseReply struct {
	reply
	text           string
	firstAt, total time.Duration // first stdout event, end of stream
}

// stream runs code in session id through node i as Server-Sent Events.
func (c *cluster) stream(t testing.TB, i int, key, id, code string) sseReply {
	t.Helper()
	body := fmt.Sprintf(`{"code":%q}`, code)
	req, _ := http.NewRequest("POST", c.url(i, "/v1/sessions/"+id+"/execute"), strings.NewReader(body))
	req.Header.Set("X-RapidAPI-Key", key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatalf("stream through %s: %v", c.names[i], err)
	}
	defer resp.Body.Close()
	var out sseReply
	var all bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		all.Write(buf[:n])
		if out.firstAt == 0 && strings.Contains(all.String(), "event: stdout") {
			out.firstAt = time.Since(start)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("stream through %s: %v", c.names[i], err)
		}
	}
	out.total = time.Since(start)
	out.reply = reply{status: resp.StatusCode, header: resp.Header, body: all.Bytes()}
	out.text = all.String()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream through %s: %d %q %s", c.names[i], resp.StatusCode, resp.Header.Get("Content-Type"), out.text)
	}
	if err := checkOpenAPI("POST", req.URL.Path, resp, out.body); err != nil {
		t.Errorf("stream through %s does not match api/openapi.json: %v", c.names[i], err)
	}
	if c.index(servedBy(out.reply)) < 0 {
		t.Errorf("stream through %s: X-Sandbox-Node %q", c.names[i], servedBy(out.reply))
	}
	return out
}

// listedIDs reads the ids of GET /v1/sessions.
func listedIDs(t testing.TB, r reply) []string {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var out []string
	items, _ := r.json(t)["sessions"].([]any)
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m["id"].(string))
		}
	}
	return out
}

// denied reports whether an egress audit holds a deny of host.
func denied(audit map[string]any, host string) bool {
	ds, _ := audit["decisions"].([]any)
	for _, d := range ds {
		if m, ok := d.(map[string]any); ok && m["outcome"] == "deny" && m["host"] == host {
			return true
		}
	}
	return false
}

// routeRequests sums the requests of route in a GET /v1/usage reply.
func routeRequests(t testing.TB, r reply, route string) int64 {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("usage: %d %s", r.status, r.body)
	}
	var n int64
	rows, _ := r.json(t)["usage"].([]any)
	for _, row := range rows {
		if m, ok := row.(map[string]any); ok && m["route"] == route {
			n += int64(m["requests"].(float64))
		}
	}
	return n
}

func testClusterQuota(t *testing.T, c *cluster) {
	key := c.key(t, "PRO")
	const n = 50
	var wg sync.WaitGroup
	start := make(chan struct{})
	replies := make([]reply, n)
	errs := make([]error, n)
	for k := 0; k < n; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[k], errs[k] = c.try(k%len(c.nodes), request{method: "POST", path: "/v1/sessions", key: key, body: map[string]any{"language": "bash"}})
		}()
	}
	close(start)
	wg.Wait()
	var created []string
	refused := 0
	by := map[string]int{}
	for k, r := range replies {
		switch {
		case errs[k] != nil:
			t.Errorf("create %d: %v", k, errs[k])
		case r.status == http.StatusCreated:
			created = append(created, r.json(t)["id"].(string))
			by[servedBy(r)]++
		case r.status == http.StatusTooManyRequests && r.errCode(t) == "quota_exceeded":
			refused++
		default:
			t.Errorf("create %d through %s: %d %s", k, c.names[k%len(c.nodes)], r.status, r.body)
		}
	}
	t.Cleanup(func() { c.deleteAll(t, key, created) })
	if len(created) != 2 || refused != n-2 {
		t.Fatalf("50 parallel creates of one PRO key: %d created, %d refused with quota_exceeded; want 2 and 48", len(created), refused)
	}
	t.Logf("2 sessions created (held by %v), 48 refused", by)
	for i := range c.nodes {
		got := listedIDs(t, c.call(t, i, request{method: "GET", path: "/v1/sessions", key: key}))
		slices.Sort(got)
		slices.Sort(created)
		if !slices.Equal(got, created) {
			t.Errorf("list through %s: %v, want %v", c.names[i], got, created)
		}
	}
}

// deleteAll deletes sessions of key, each through a node that does not
// hold it when there is one, and checks that no node lists any of them
// afterwards.
func (c *cluster) deleteAll(t testing.TB, key string, ids []string) {
	t.Helper()
	alive := []int{}
	for i, s := range c.nodes {
		select {
		case <-s.exited:
		default:
			alive = append(alive, i)
		}
	}
	for k, id := range ids {
		i := alive[k%len(alive)]
		if r := c.call(t, i, request{method: "DELETE", path: "/v1/sessions/" + id, key: key}); r.status != http.StatusNoContent && r.status != http.StatusNotFound {
			t.Errorf("delete of %s through %s: %d %s", id, c.names[i], r.status, r.body)
		}
	}
	for _, i := range alive {
		if got := listedIDs(t, c.call(t, i, request{method: "GET", path: "/v1/sessions", key: key})); len(got) != 0 {
			t.Errorf("after deleting every session of the key, %s lists %v", c.names[i], got)
		}
	}
}

func testClusterRate(t *testing.T, c *cluster) {
	key := c.key(t, "BASIC") // 60 requests a minute, a bucket of 60
	const n = 90
	var wg sync.WaitGroup
	start := make(chan struct{})
	replies := make([]reply, n)
	errs := make([]error, n)
	for k := 0; k < n; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[k], errs[k] = c.try(k%len(c.nodes), request{method: "GET", path: "/v1/runtimes", key: key})
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(t0)
	ok, limited := 0, 0
	by := map[string]int{}
	for k, r := range replies {
		switch {
		case errs[k] != nil:
			t.Errorf("call %d: %v", k, errs[k])
		case r.status == http.StatusOK:
			ok++
			by[servedBy(r)]++
		case r.status == http.StatusTooManyRequests && r.errCode(t) == "rate_limited":
			limited++
		default:
			t.Errorf("call %d through %s: %d %s", k, c.names[k%len(c.nodes)], r.status, r.body)
		}
	}
	// The bucket refills at one token a second while the burst runs.
	if most := 60 + int(took.Seconds()) + 1; ok < 60 || ok > most || ok+limited != n {
		t.Fatalf("90 parallel calls of one BASIC key over 3 nodes in %v: %d passed (by node %v), %d rate_limited; want 60 to %d passed", took.Round(time.Millisecond), ok, by, limited, most)
	}
	t.Logf("%d passed (by node %v), %d rate_limited, in %v", ok, by, limited, took.Round(time.Millisecond))
}
