package cluster

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHostileIDs: a session id the store cannot hold (a NUL byte, bytes
// that are not UTF-8) is no session: the local API answers it (its 404,
// as on one node), not a 503 from a failed owner look-up.
func TestHostileIDs(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a := startSteadyNode(t, st, "a", 4)
	for _, path := range []string{"/v1/sessions/%00", "/v1/sessions/s%00/execute", "/v1/sessions/%ff%fe", "/v1/sessions/%c3%28/files"} {
		before := a.calls.Load()
		resp, body := call(t, "GET", a.url+path, nil, nil)
		if resp.StatusCode != http.StatusOK || a.calls.Load() != before+1 || resp.Header.Get(HeaderNode) != "a" {
			t.Errorf("GET %s: %d %s (API calls %d, want %d)", path, resp.StatusCode, strings.TrimSpace(body), a.calls.Load(), before+1)
		}
	}
}

// TestWrongSecretNode: a node started with another cluster.secret cannot
// act for the others, and the others cannot act through it. A call that
// one of them forwards to a node that refuses its signature is answered
// 503 node_unavailable (the client sent no forward headers: a 401
// bad_node_signature would be about headers it never sent), the refusing
// node's API never sees it, nobody takes a session over, and new sessions
// are placed elsewhere afterwards.
func TestWrongSecretNode(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a := startSteadyNode(t, st, "a", 2)
	w := startNodeWith(t, st, "w", 8, nodeOpts{secret: "another-secret-0123456789abcdef-012345", conf: steady})
	insertSession(t, st, "w", "sw")
	w.ex.holds("sw")
	insertSession(t, st, "a", "sa")
	a.ex.holds("sa")

	check := func(what string, resp *http.Response, body string, via *testNode) {
		t.Helper()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"node_unavailable"`) ||
			resp.Header.Get("Retry-After") == "" || resp.Header.Get(HeaderNode) != via.name {
			t.Errorf("%s: %d %v %s, want 503 node_unavailable from %s", what, resp.StatusCode, resp.Header, body, via.name)
		}
	}
	resp, body := call(t, "POST", a.url+"/v1/sessions/sw/execute", strings.NewReader(`{"code":"1"}`), nil)
	check("a's forward to w", resp, body, a)
	resp, body = call(t, "GET", w.url+"/v1/sessions/sa", nil, nil)
	check("w's forward to a", resp, body, w)
	if a.calls.Load() != 0 || w.calls.Load() != 0 {
		t.Fatalf("API calls: a %d, w %d", a.calls.Load(), w.calls.Load())
	}
	if a.obs.forwarded("refused") != 1 || w.obs.forwarded("refused") != 1 {
		t.Errorf("refused forwards: a %d, w %d", a.obs.forwarded("refused"), w.obs.forwarded("refused"))
	}
	for id, want := range map[string]string{"sw": "w", "sa": "a"} {
		if o, err := st.OwnerOf(t.Context(), id); err != nil || o.Session.Node != want {
			t.Errorf("%s owned by %q (%v), want %s", id, o.Session.Node, err, want)
		}
	}

	// w has the most free capacity, but refused a's signature: a's
	// creates go elsewhere (here: a itself).
	for i := range 3 {
		resp, body = call(t, "POST", a.url+"/v1/sessions", strings.NewReader(`{"language":"python"}`), nil)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get(HeaderNode) != "a" {
			t.Errorf("create %d through a: %d %v %s", i, resp.StatusCode, resp.Header, body)
		}
	}
	if w.calls.Load() != 0 {
		t.Fatalf("w's API served %d calls", w.calls.Load())
	}
}

// TestForwardBodyCut: a client whose body stops (here: it closes its
// side after a part; past server.read_timeout alike) gets, through a
// node that forwards its call, the 400 invalid_request the API answers
// such a call, with the node and the request id, not an empty 200.
func TestForwardBodyCut(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, b := startSteadyNode(t, st, "a", 4), startSteadyNode(t, st, "b", 4)
	insertSession(t, st, "b", "s1")
	b.ex.holds("s1")
	conn, err := net.Dial("tcp", strings.TrimPrefix(a.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "PUT /v1/sessions/s1/files?path=x HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer k\r\nX-Request-Id: cut-1\r\nContent-Length: 100000\r\n\r\nabc")
	conn.(*net.TCPConn).CloseWrite()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"code":"invalid_request"`) ||
		resp.Header.Get(HeaderNode) != "a" || resp.Header.Get("X-Request-Id") != "cut-1" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// TestHeadersNearTheLimit: headers that the session's node accepts when
// called directly are accepted through another node too (a forward adds
// its own headers), and headers over the limit are a JSON 431 from
// either, never a bare one from the owner passed through.
func TestHeadersNearTheLimit(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, b := startSteadyNode(t, st, "a", 4), startSteadyNode(t, st, "b", 4)
	insertSession(t, st, "b", "s1")
	b.ex.holds("s1")
	// Sent on fresh connections (the server checks its limit less
	// strictly on one kept alive), first the largest.
	for _, n := range []int{3900, 3700, -2000} {
		j := strings.Repeat("j", 1<<20+n)
		var got [2]int
		for k, tn := range []*testNode{b, a} {
			resp, body := call(t, "GET", tn.url+"/v1/sessions/s1", nil, map[string]string{"X-Junk": j})
			got[k] = resp.StatusCode
			switch resp.StatusCode {
			case http.StatusOK:
			case http.StatusRequestHeaderFieldsTooLarge:
				if !strings.Contains(body, `"code":"headers_too_large"`) || resp.Header.Get(HeaderNode) != tn.name || resp.Header.Get("X-Request-Id") == "" {
					t.Errorf("%d through %s: %v %q", n, tn.name, resp.Header, body)
				}
			default:
				t.Errorf("%d through %s: %d %q", n, tn.name, resp.StatusCode, body)
			}
			if resp.StatusCode != http.StatusOK && !strings.Contains(body, `"code":"headers_too_large"`) && n < 4000 {
				t.Errorf("1 MiB%+d through %s: %d %q, want JSON", n, tn.name, resp.StatusCode, body)
			}
		}
		t.Logf("1 MiB%+d: %v", n, got)
		if got[0] != got[1] {
			t.Errorf("headers of 1 MiB%+d: owner %d, through another node %d", n, got[0], got[1])
		}
	}
}

// TestForwardKeepsConnectionListedHeaders: a client that names its key
// (or Accept, which picks a stream) in its Connection header is served
// through another node as the session's node serves it directly (the
// API reads those headers either way); only the hop-by-hop headers
// proper are dropped.
func TestForwardKeepsConnectionListedHeaders(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, b := startSteadyNode(t, st, "a", 4), startSteadyNode(t, st, "b", 4)
	insertSession(t, st, "b", "s1")
	b.ex.holds("s1")
	resp, body := call(t, "GET", a.url+"/v1/sessions/s1", nil, map[string]string{
		"Connection": "keep-alive, Authorization, X-Api-Key, Accept, Proxy-Authorization",
		"X-Api-Key":  "k2", "Accept": "text/event-stream", "Proxy-Authorization": "Basic eA==",
	})
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderNode) != "b" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
	h := b.seen[0]
	for k, want := range map[string]string{"Authorization": "Bearer test-key", "X-Api-Key": "k2", "Accept": "text/event-stream", "Proxy-Authorization": ""} {
		if got := h.Get(k); got != want {
			t.Errorf("b's API saw %s %q, want %q", k, got, want)
		}
	}
}

// TestOtherKeysSessionStays: with the API's key resolution, a call for
// another key's session (or with a key the API refuses) is the local
// API's to answer (404 or 401, as on one node): it is not forwarded, so
// no reply names the session's node, and a session whose node died is
// not taken over for it. The owner's key still reaches it.
func TestOtherKeysSessionStays(t *testing.T) {
	st := openStore(t, testPostgres(t))
	caller := func(r *http.Request) (string, bool) {
		switch r.Header.Get("Authorization") {
		case "Bearer test-key":
			return "k1", true // insertSession's owner
		case "Bearer other-key":
			return "k2", true
		}
		return "", false
	}
	a := startNodeWith(t, st, "a", 4, nodeOpts{secret: testSecret, caller: caller, conf: steady})
	b := startNodeWith(t, st, "b", 4, nodeOpts{secret: testSecret, caller: caller, conf: steady})
	insertSession(t, st, "b", "s1")
	b.ex.holds("s1")
	insertSession(t, st, "", "s2") // its node is gone: anyone may claim it
	for _, key := range []string{"Bearer other-key", "Bearer nope"} {
		for _, id := range []string{"s1", "s2"} {
			before := a.calls.Load()
			resp, _ := call(t, "POST", a.url+"/v1/sessions/"+id+"/execute", strings.NewReader(`{"code":"1"}`), map[string]string{"Authorization": key})
			if resp.Header.Get(HeaderNode) != "a" || a.calls.Load() != before+1 {
				t.Errorf("%s, %s: served by %s (a's API calls %d, want %d)", key, id, resp.Header.Get(HeaderNode), a.calls.Load(), before+1)
			}
		}
	}
	if b.calls.Load() != 0 || a.ex.adopted("s2") != 0 {
		t.Fatalf("b's API saw %d calls; a adopted s2 %d times", b.calls.Load(), a.ex.adopted("s2"))
	}
	if o, _ := st.OwnerOf(t.Context(), "s2"); o.Session.Node != "" {
		t.Fatalf("s2 claimed by %q", o.Session.Node)
	}
	resp, body := call(t, "POST", a.url+"/v1/sessions/s1/execute", strings.NewReader(`{"code":"1"}`), nil)
	if resp.Header.Get(HeaderNode) != "b" || !strings.Contains(body, `"node":"b"`) {
		t.Fatalf("the owner's key: %v %s", resp.Header, body)
	}
	resp, _ = call(t, "POST", a.url+"/v1/sessions/s2/execute", strings.NewReader(`{"code":"1"}`), nil)
	if resp.Header.Get(HeaderNode) != "a" || a.ex.adopted("s2") != 1 {
		t.Fatalf("the owner's key on a session to take over: %v, adopted %d", resp.Header, a.ex.adopted("s2"))
	}
}
