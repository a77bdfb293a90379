package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestForwardJSON: a call for a session another node owns is served by
// that node, with the client's request id, the forward headers checked
// and removed before its API sees them, and the serving node named in
// X-Sandbox-Node; the receiving node's API never sees the call.
func TestForwardJSON(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, b := startSteadyNode(t, st, "a", 4), startSteadyNode(t, st, "b", 4)
	insertSession(t, st, "b", "s1")
	b.ex.holds("s1")
	resp, body := call(t, "POST", a.url+"/v1/sessions/s1/execute", strings.NewReader(`{"code":"print(1)"}`), map[string]string{"X-Request-Id": "req-123"})
	if resp.StatusCode != 200 || resp.Header.Get(HeaderNode) != "b" || !strings.Contains(body, `"node":"b"`) {
		t.Fatalf("reply %d %v: %s", resp.StatusCode, resp.Header, body)
	}
	if resp.Header.Get("X-Request-Id") != "req-123" {
		t.Errorf("request id %q", resp.Header.Get("X-Request-Id"))
	}
	if a.calls.Load() != 0 || b.calls.Load() != 1 {
		t.Fatalf("API calls: a %d, b %d", a.calls.Load(), b.calls.Load())
	}
	h := b.seen[0]
	if h.Get("X-Request-Id") != "req-123" || h.Get("X-Forwarded-For") != "127.0.0.1" || isForwarded(h) {
		t.Errorf("b's API saw %v", h)
	}
	if !waitFor(time.Second, func() bool { return a.obs.forwarded("ok") == 1 }) {
		t.Errorf("forwards ok = %d", a.obs.forwarded("ok"))
	}
	// Served where it lives, the call carries the node's name as well.
	resp, _ = call(t, "GET", b.url+"/v1/sessions/s1", nil, nil)
	if resp.Header.Get(HeaderNode) != "b" || resp.StatusCode != 200 {
		t.Fatalf("direct: %d %v", resp.StatusCode, resp.Header)
	}
	// An unknown session is the local API's business (its 404).
	resp, _ = call(t, "GET", a.url+"/v1/sessions/nope", nil, nil)
	if resp.Header.Get(HeaderNode) != "a" || a.calls.Load() != 1 {
		t.Fatalf("unknown session: %v, a's API calls %d", resp.Header, a.calls.Load())
	}
}

// TestForwardBadSignature: a client that sends forward headers is
// refused with 401 bad_node_signature, before any API sees the call.
func TestForwardBadSignature(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a := startSteadyNode(t, st, "a", 4)
	insertSession(t, st, "a", "s1")
	for _, hdr := range []map[string]string{
		{"X-Sandbox-Forwarded-By": "b"},
		{"X-Sandbox-Forwarded-By": "b", "X-Sandbox-Forward-Time": "1", "X-Sandbox-Forward-Nonce": strings.Repeat("a", 32), "X-Sandbox-Forward-Signature": strings.Repeat("0", 64)},
	} {
		resp, body := call(t, "POST", a.url+"/v1/sessions/s1/execute", strings.NewReader("{}"), hdr)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"code":"bad_node_signature"`) || resp.Header.Get(HeaderNode) != "a" {
			t.Fatalf("%v: %d %s", hdr, resp.StatusCode, body)
		}
	}
	if a.calls.Load() != 0 {
		t.Fatalf("the API saw %d refused calls", a.calls.Load())
	}
}

// TestForwardStreams: Server-Sent Events reach the client as the owner
// writes them: the first event arrives while the owner's call is still
// running.
func TestForwardStreams(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, b := startSteadyNode(t, st, "a", 4), startSteadyNode(t, st, "b", 4)
	b.release = make(chan struct{})
	insertSession(t, st, "b", "s1")
	b.ex.holds("s1")
	req, _ := http.NewRequestWithContext(t.Context(), "POST", a.url+"/v1/sessions/s1/stream", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer test-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get(HeaderNode) != "b" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("headers %v", resp.Header)
	}
	rd := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() {
		var lines []string
		for len(lines) < 2 {
			l, err := rd.ReadString('\n')
			if err != nil {
				break
			}
			lines = append(lines, strings.TrimSpace(l))
		}
		got <- strings.Join(lines, " ")
	}()
	select {
	case first := <-got:
		if !strings.Contains(first, "first") {
			t.Fatalf("first event %q", first)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first event did not arrive before the owner finished")
	}
	close(b.release)
	rest, _ := io.ReadAll(rd)
	if !strings.Contains(string(rest), "event: result") {
		t.Fatalf("rest %q", rest)
	}
}

// TestHarnessStreamEndsWhenClientLeaves: the harness's fake stream, which
// waits for release between its events, ends when its client leaves.
// It did not read its request body, and until the body's end the server
// does not watch the connection (nor does it read the body itself at the
// reply's first flush when the connection closes after the reply, as
// for a call with Connection: close): a stream the client left waited
// for ever, and httptest.Server.Close with it (seen in a stress run with
// GOMAXPROCS=1, where node a served a stream itself after claiming a
// session whose owner's lease ran out: the test binary hung past 15
// minutes in its cleanup).
func TestHarnessStreamEndsWhenClientLeaves(t *testing.T) {
	st := openStore(t, testPostgres(t))
	b := startSteadyNode(t, st, "b", 4)
	b.release = make(chan struct{}) // closed only if the test fails
	insertSession(t, st, "b", "s1")
	b.ex.holds("s1")
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", b.url+"/v1/sessions/s1/stream", strings.NewReader(`{"code":"x"}`))
	req.Header.Set("Authorization", "Bearer test-key")
	// Connection: close, as an eighth of the stress test's calls: a
	// server that replies with a connection it will close does not read
	// an unread body at the reply's first flush either.
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("event: stdout\ndata: {\"data\":\"first\"}\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	closed := make(chan struct{})
	go func() { b.srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		close(b.release) // lets the handler, and the server, end
		t.Fatal("the stream its client left still runs: the server cannot close")
	}
}

// zeros reads as zero bytes without allocating.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestForwardLargeUpload: a 64 MiB upload through another node streams
// to the owner: the process allocates far less than the body while it
// crosses two nodes.
func TestForwardLargeUpload(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, b := startSteadyNode(t, st, "a", 4), startSteadyNode(t, st, "b", 4)
	insertSession(t, st, "b", "s1")
	b.ex.holds("s1")
	const size = 64 << 20
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	req, _ := http.NewRequestWithContext(t.Context(), "PUT", a.url+"/v1/sessions/s1/files?path=big.bin", io.LimitReader(zeros{}, size))
	req.Header.Set("Authorization", "Bearer test-key")
	req.ContentLength = size
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Bytes int64  `json:"bytes"`
		Node  string `json:"node"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	runtime.ReadMemStats(&after)
	if err != nil || out.Bytes != size || out.Node != "b" {
		t.Fatalf("reply %+v, %v", out, err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > size/4 {
		t.Fatalf("the upload allocated %d MiB on its way (buffered?)", grew>>20)
	}
}

// TestForwardLargeDownload: a 64 MiB download through another node
// streams back the same way.
func TestForwardLargeDownload(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, b := startSteadyNode(t, st, "a", 4), startSteadyNode(t, st, "b", 4)
	insertSession(t, st, "b", "s1")
	b.ex.holds("s1")
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", a.url+"/v1/sessions/s1/files?path=big.bin", nil)
	req.Header.Set("Authorization", "Bearer test-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	runtime.ReadMemStats(&after)
	if err != nil || n != 64<<20 || resp.Header.Get(HeaderNode) != "b" {
		t.Fatalf("read %d, %v, %v", n, err, resp.Header)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Fatalf("the download allocated %d MiB on its way (buffered?)", grew>>20)
	}
}
