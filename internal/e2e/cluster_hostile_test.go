package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawCall sends one request exactly as written (request target, headers
// and body untouched by a client library) to node i and reads the reply.
func (c *cluster) rawCall(t testing.TB, i int, method, target string, hdr http.Header, body string) reply {
	t.Helper()
	conn, err := net.DialTimeout("tcp", c.nodes[i].addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, c.nodes[i].addr)
	for k, vs := range hdr {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	if body != "" || method == "POST" || method == "PUT" || method == "PATCH" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	// A write cut short (the server answered and closed first) still
	// has its reply read.
	_, _ = io.WriteString(conn, b.String())
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s through %s: %v", method, target, c.names[i], err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: rb}
}

// code is the error code of a JSON error reply ("" for anything else).
func (r reply) code() string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error.Code
}

// TestClusterHostile sends what a hostile or careless client would to the
// node that owns a session and to one that does not, and wants the same
// answer from both (the node named in X-Sandbox-Node aside), with nothing
// run that should not have been.
func TestClusterHostile(t *testing.T) {
	c := startCluster(t, clusterOptions{nodes: 2})
	keyA, keyB := c.key(t, "MEGA"), c.key(t, "MEGA")
	id, owner := c.create(t, 0, keyA, map[string]any{"language": "bash"})
	own := c.index(owner)
	other := c.other(own, own)
	ended, _ := c.create(t, 0, keyA, map[string]any{"language": "bash"})
	if r := c.call(t, 0, request{method: "DELETE", path: "/v1/sessions/" + ended, key: keyA}); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	t.Logf("session %s on %s; through %s", id, owner, c.names[other])
	trail := func(t *testing.T) string {
		t.Helper()
		r := c.exec(t, own, keyA, id, "cat /home/sandbox/trail 2>/dev/null; true")
		return r.json(t)["stdout"].(string)
	}
	auth := func(key string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}}
		if key != "" {
			h.Set("X-RapidAPI-Key", key)
		}
		return h
	}
	with := func(h http.Header, k, v string) http.Header { h = h.Clone(); h.Set(k, v); return h }
	run := `{"code":"echo ran >> /home/sandbox/trail"}`
	long := strings.Repeat("a", 300)
	cases := []struct {
		name, method, target string
		hdr                  http.Header
		body                 string
		status               int
		code                 string
		allow                bool // the reply must have Allow
	}{
		{"no key", "GET", "/v1/sessions/" + id, auth(""), "", 401, "unauthenticated", false},
		{"unknown key", "POST", "/v1/sessions/" + id + "/execute", auth("nope-" + long), run, 401, "unauthenticated", false},
		{"another key's session", "POST", "/v1/sessions/" + id + "/execute", auth(keyB), run, 404, "not_found", false},
		{"another key's get", "GET", "/v1/sessions/" + id, auth(keyB), "", 404, "not_found", false},
		{"another key's delete", "DELETE", "/v1/sessions/" + id, auth(keyB), "", 404, "not_found", false},
		{"ended session", "POST", "/v1/sessions/" + ended + "/execute", auth(keyA), run, 404, "not_found", false},
		{"dot dot", "POST", "/v1/sessions/../sessions/" + id + "/execute", auth(keyA), run, 0, "", false},
		{"escaped dot dot", "POST", "/v1/sessions/%2e%2e/execute", auth(keyA), run, 404, "", false},
		{"escaped slash", "POST", "/v1/sessions/" + id + "%2Fexecute", auth(keyA), run, 405, "method_not_allowed", true},
		{"trailing slash", "GET", "/v1/sessions/" + id + "/", auth(keyA), "", 404, "", false},
		{"double slash", "POST", "/v1/sessions//" + id + "/execute", auth(keyA), run, 0, "", false},
		{"semicolon", "POST", "/v1/sessions/" + id + ";x=1/execute", auth(keyA), run, 404, "", false},
		{"query", "GET", "/v1/sessions/" + id + "?x=1&id=" + ended, auth(keyA), "", 200, "", false},
		{"long id", "GET", "/v1/sessions/" + long, auth(keyA), "", 404, "", false},
		{"long id with owner's prefix", "GET", "/v1/sessions/" + id + long, auth(keyA), "", 404, "", false},
		{"unicode id", "GET", "/v1/sessions/%E2%80%AE" + id, auth(keyA), "", 404, "", false},
		{"nul id", "GET", "/v1/sessions/%00", auth(keyA), "", 404, "not_found", false},
		{"nul id execute", "POST", "/v1/sessions/x%00/execute", auth(keyA), run, 404, "not_found", false},
		{"nul id egress", "GET", "/v1/sessions/%00/egress", auth(keyA), "", 404, "not_found", false},
		{"not utf-8 sbom", "GET", "/v1/sessions/%ff%fe/sbom", auth(keyA), "", 404, "not_found", false},
		{"not utf-8 files", "GET", "/v1/sessions/%c3%28/files?dir=/home/sandbox", auth(keyA), "", 404, "not_found", false},
		{"HEAD", "HEAD", "/v1/sessions/" + id, auth(keyA), "", 0, "", false},
		{"OPTIONS", "OPTIONS", "/v1/sessions/" + id + "/execute", auth(keyA), "", 405, "", true},
		{"PATCH", "PATCH", "/v1/sessions/" + id, auth(keyA), run, 405, "", true},
		{"PATCH execute", "PATCH", "/v1/sessions/" + id + "/execute", auth(keyA), run, 405, "", true},
		{"client sends X-Sandbox-Node", "GET", "/v1/sessions/" + id, with(auth(keyA), "X-Sandbox-Node", "node9"), "", 200, "", false},
		{"request id echoed", "GET", "/v1/sessions/" + id, with(auth(keyA), "X-Request-Id", "hostile-req-0001"), "", 200, "", false},
		{"bad request id replaced", "GET", "/v1/sessions/" + id, with(auth(keyA), "X-Request-Id", "bad id with spaces"), "", 200, "", false},
		{"forward header on a session call", "POST", "/v1/sessions/" + id + "/execute", with(auth(keyA), "X-Sandbox-Forwarded-By", "node1"), run, 401, "bad_node_signature", false},
		{"forward header on a create", "POST", "/v1/sessions", with(auth(keyA), "X-Sandbox-Forward-Time", "1"), `{"language":"bash"}`, 401, "bad_node_signature", false},
		{"forward header on execute", "POST", "/v1/execute", with(auth(keyA), "x-sandbox-forward-signature", "00"), `{"language":"bash","code":"echo"}`, 401, "bad_node_signature", false},
		{"forward header without a key", "GET", "/v1/sessions/" + id, with(auth(""), "X-Sandbox-Forward-Nonce", "x"), "", 401, "bad_node_signature", false},
		{"invalid json", "POST", "/v1/sessions/" + id + "/execute", auth(keyA), `{"code":`, 400, "invalid_json", false},
		{"huge header", "GET", "/v1/sessions/" + id, with(auth(keyA), "X-Junk", strings.Repeat("j", 2<<20)), "", 431, "", false},
		{"header just under the limit", "GET", "/v1/sessions/" + id, with(auth(keyA), "X-Junk", strings.Repeat("j", 1<<20+3500)), "", 0, "", false},
	}
	type seen struct {
		status int
		code   string
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]reply
			for k, i := range []int{own, other} {
				r := c.rawCall(t, i, tc.method, tc.target, tc.hdr, tc.body)
				got[k] = r
				if tc.status != 0 && r.status != tc.status {
					t.Errorf("through %s: %d %s, want %d", c.names[i], r.status, r.body, tc.status)
				}
				if tc.code != "" && r.code() != tc.code {
					t.Errorf("through %s: code %q (%s), want %s", c.names[i], r.code(), r.body, tc.code)
				}
				if tc.allow && r.header.Get("Allow") == "" {
					t.Errorf("through %s: %d without Allow", c.names[i], r.status)
				}
				if r.status != 431 {
					if n := servedBy(r); c.index(n) < 0 {
						t.Errorf("through %s: X-Sandbox-Node %q", c.names[i], n)
					}
					if rid := r.header.Get("X-Request-Id"); rid == "" {
						t.Errorf("through %s: no X-Request-Id", c.names[i])
					} else if want := tc.hdr.Get("X-Request-Id"); want == "hostile-req-0001" && rid != want {
						t.Errorf("through %s: X-Request-Id %q, want %q", c.names[i], rid, want)
					} else if want != "" && want != "hostile-req-0001" && rid == want {
						t.Errorf("through %s: X-Request-Id %q echoed", c.names[i], rid)
					}
				}
			}
			a, b := got[0], got[1]
			if (b.code() == "not_found" || b.status == http.StatusUnauthorized) && servedBy(b) != c.names[other] {
				t.Errorf("the non-owner's %d names node %s: a refused call must not say where the session is", b.status, servedBy(b))
			}
			if (seen{a.status, a.code()}) != (seen{b.status, b.code()}) || a.header.Get("Allow") != b.header.Get("Allow") ||
				a.header.Get("Location") != b.header.Get("Location") || (a.header.Get("Retry-After") == "") != (b.header.Get("Retry-After") == "") {
				t.Errorf("owner %s: %d %v %s\nnon-owner %s: %d %v %s", owner, a.status, a.header, a.body, c.names[other], b.status, b.header, b.body)
			}
			t.Logf("%s %s: %d %s (Allow %q, Location %q, node %s / %s)", tc.method, tc.target[:min(len(tc.target), 60)], a.status, a.code(),
				a.header.Get("Allow"), a.header.Get("Location"), servedBy(a), servedBy(b))
		})
	}
	if got := trail(t); got != "" {
		t.Errorf("hostile calls ran code in the session: %q", got)
	}

	t.Run("body over max_body_bytes", func(t *testing.T) {
		// max_body_bytes (4 MiB) bounds JSON bodies, limits.max_file_bytes
		// (64 MiB) uploads.
		code := []byte(`{"code":"` + strings.Repeat("x", 4<<20) + `"}`)
		for _, tc := range []struct {
			method, path, code string
			big                []byte
		}{
			{"PUT", filesURL(id, "path", "/home/sandbox/big.bin"), "too_large", make([]byte, 64<<20+1)},
			{"POST", "/v1/sessions/" + id + "/execute", "body_too_large", code},
		} {
			big := tc.big
			var got []reply
			for _, i := range []int{own, other} {
				r, err := c.try(i, request{method: tc.method, path: tc.path, key: keyA, body: big})
				if err != nil {
					t.Fatalf("through %s: %v", c.names[i], err)
				}
				if r.status != http.StatusRequestEntityTooLarge || r.code() != tc.code {
					t.Errorf("%s %s through %s: %d %s, want 413 %s", tc.method, tc.path, c.names[i], r.status, r.body, tc.code)
				}
				got = append(got, r)
			}
			if string(got[0].body[:20]) != string(got[1].body[:20]) {
				t.Errorf("owner %s, non-owner %s", got[0].body, got[1].body)
			}
		}
		r := c.exec(t, other, keyA, id, "ls /home/sandbox")
		if strings.Contains(r.json(t)["stdout"].(string), "big.bin") {
			t.Errorf("a refused upload left a file: %s", r.body)
		}
	})

	t.Run("plan quota through both nodes", func(t *testing.T) {
		pro := c.key(t, "PRO")
		for range 2 {
			c.create(t, 0, pro, map[string]any{"language": "bash"})
		}
		var got []reply
		for _, i := range []int{own, other} {
			r := c.call(t, i, request{method: "POST", path: "/v1/sessions", key: pro, body: map[string]any{"language": "bash"}})
			if r.status != http.StatusTooManyRequests || r.code() != "quota_exceeded" {
				t.Errorf("third create through %s: %d %s", c.names[i], r.status, r.body)
			}
			got = append(got, r)
		}
		if (got[0].header.Get("Retry-After") == "") != (got[1].header.Get("Retry-After") == "") {
			t.Errorf("Retry-After %q vs %q", got[0].header.Get("Retry-After"), got[1].header.Get("Retry-After"))
		}
	})

	t.Run("MCP through both nodes", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"bash","code":"echo mcp-ok"}}}`
		for _, i := range []int{own, other} {
			h := auth(keyA)
			h.Set("Accept", "application/json, text/event-stream")
			r := c.rawCall(t, i, "POST", "/mcp", h, body)
			if r.status != http.StatusOK || !strings.Contains(string(r.body), "mcp-ok") || servedBy(r) != c.names[i] {
				t.Errorf("MCP through %s: %d %v %s", c.names[i], r.status, r.header, r.body)
			}
			r = c.rawCall(t, i, "POST", "/mcp", with(h, "X-Sandbox-Forwarded-By", "node1"), body)
			if r.status != http.StatusUnauthorized || r.code() != "bad_node_signature" {
				t.Errorf("MCP with a forward header through %s: %d %s", c.names[i], r.status, r.body)
			}
		}
	})

	t.Run("client disconnects mid-stream through the non-owner", func(t *testing.T) {
		req, _ := http.NewRequest("POST", c.nodes[other].url("/v1/sessions/"+id+"/execute"),
			strings.NewReader(`{"code":"touch /home/sandbox/running; echo started; sleep 30; touch /home/sandbox/finished","stream":true,"timeout":60}`))
		req.Header.Set("X-RapidAPI-Key", keyA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if servedBy(reply{header: resp.Header}) != owner {
			t.Errorf("stream served by %s, want %s", resp.Header.Get("X-Sandbox-Node"), owner)
		}
		buf := make([]byte, 256)
		if _, err := resp.Body.Read(buf); err != nil || !strings.Contains(string(buf), "started") {
			t.Fatalf("first chunk: %q %v", buf, err)
		}
		resp.Body.Close()
		start := time.Now()
		r := c.exec(t, other, keyA, id, "ls /home/sandbox; ps -eo comm | grep -c '^sleep$' || true")
		if time.Since(start) > 15*time.Second {
			t.Fatalf("the session stayed busy for %v after the client left", time.Since(start))
		}
		if got := r.json(t)["stdout"].(string); !strings.Contains(got, "running") || strings.Contains(got, "finished") || !strings.HasSuffix(got, "0\n") {
			t.Fatalf("after disconnect: %q", got)
		}
	})

	t.Run("slow client body", func(t *testing.T) {
		// Headers and a part of the body, then nothing: each node gives
		// the call up at read_timeout (30 s), the owner as the non-owner
		// does, with the same answer, and nothing is left of the upload.
		type result struct {
			raw  string
			took time.Duration
		}
		var got [2]chan result
		for k, i := range []int{own, other} {
			got[k] = make(chan result, 1)
			go func() {
				conn, err := net.Dial("tcp", c.nodes[i].addr)
				if err != nil {
					got[k] <- result{raw: err.Error()}
					return
				}
				defer conn.Close()
				fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: x\r\nX-RapidAPI-Key: %s\r\nX-Request-Id: slow-%d\r\nContent-Length: 100000\r\n\r\nabc",
					filesURL(id, "path", fmt.Sprintf("/home/sandbox/slow%d.bin", k)), keyA, k)
				start := time.Now()
				_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
				raw, _ := io.ReadAll(conn)
				got[k] <- result{string(raw), time.Since(start)}
			}()
		}
		var status [2]string
		for k, i := range []int{own, other} {
			r := <-got[k]
			t.Logf("through %s after %v: %q", c.names[i], r.took, r.raw)
			if r.took > 45*time.Second {
				t.Errorf("%s held a stalled body for %v", c.names[i], r.took)
			}
			status[k], _, _ = strings.Cut(r.raw, "\r\n")
			if !strings.Contains(r.raw, "X-Sandbox-Node: ") || !strings.Contains(r.raw, fmt.Sprintf("X-Request-Id: slow-%d", k)) {
				t.Errorf("through %s: no X-Sandbox-Node or request id", c.names[i])
			}
		}
		if status[0] != "HTTP/1.1 400 Bad Request" {
			t.Errorf("owner answered %q, want 400", status[0])
		}
		if status[0] != status[1] {
			t.Errorf("owner answered %q, non-owner %q", status[0], status[1])
		}
		r := c.exec(t, own, keyA, id, "ls -a /home/sandbox")
		if strings.Contains(r.json(t)["stdout"].(string), "slow") {
			t.Errorf("a stalled upload left a file: %s", r.body)
		}
	})
}
