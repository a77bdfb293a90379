package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// silentSandboxes runs every stateless call as a program that prints
// nothing for silence, then one line.
type silentSandboxes struct {
	*fakeSandboxes
	silence time.Duration
}

func (f *silentSandboxes) ExecuteStateless(ctx context.Context, owner string, req sandbox.ExecRequest) (sandbox.Result, error) {
	select {
	case <-time.After(f.silence):
	case <-ctx.Done():
		return sandbox.Result{}, ctx.Err()
	}
	req.OnOutput("stdout", []byte("done\n"))
	return sandbox.Result{ExecutionID: "e1", Stdout: "done\n", Status: sandbox.StatusOK, DurationMS: f.silence.Milliseconds()}, nil
}

// deadlineConn gives every Read its own deadline, as a client with a read
// timeout (not a whole-request timeout) does.
type deadlineConn struct {
	net.Conn
	perRead time.Duration
}

func (c deadlineConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.perRead)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

// TestStreamHeartbeatKeepsSilentRunAlive checks that a stream whose
// program is silent for much longer than the client's read timeout sends
// its headers at once and a comment line every heartbeat, so the client
// reads the whole stream and the result.
func TestStreamHeartbeatKeepsSilentRunAlive(t *testing.T) {
	t.Parallel()
	const (
		heartbeat = 100 * time.Millisecond
		silence   = 3 * time.Second
		perRead   = 1500 * time.Millisecond // 15 heartbeats: slack for a loaded machine
	)
	srv, fake := newFakeServerWith(t, func(c *Config) { c.StreamHeartbeat = heartbeat })
	srv.sb = &silentSandboxes{fakeSandboxes: fake, silence: silence}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	raw, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	conn := deadlineConn{Conn: raw, perRead: perRead}
	body := `{"language":"python3","code":"quiet","stream":true}`
	start := time.Now()
	fmt.Fprintf(conn, "POST /v1/execute HTTP/1.1\r\nHost: x\r\nX-API-Key: key-BASIC\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the headers with a %v read timeout: %v", perRead, err)
	}
	defer resp.Body.Close()
	if took := time.Since(start); took >= silence {
		t.Errorf("headers after %v: they waited for the program's output", took)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the stream with a %v read timeout: %v (read %q)", perRead, err, b)
	}
	got := string(b)
	if n := strings.Count(got, heartbeatComment); n < 3 {
		t.Errorf("%d heartbeat comments in %v of silence with a %v heartbeat, want several:\n%s", n, silence, heartbeat, got)
	}
	if !strings.Contains(got, "event: stdout\ndata: {\"data\":\"done\\n\"}\n\n") || !strings.HasSuffix(got, "\n\n") ||
		!strings.Contains(got[strings.LastIndex(got, "event: "):], "event: result\n") {
		t.Errorf("stream lacks the output or does not end with the result:\n%s", got)
	}
}

// TestEgressRouteWithoutEgressLog checks GET /v1/sessions/{id}/egress on a
// server with no egress trail (egress off): the caller's session answers
// 200 with no decisions, another key's or an unknown session 404
// not_found, a bad limit 400; never 404 no_route.
func TestEgressRouteWithoutEgressLog(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServer(t) // no Deps.EgressLog
	pro := map[string]string{"X-API-Key": "key-PRO"}
	rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, pro)
	if rec.Code != 201 {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	var sess struct{ ID string }
	_ = json.Unmarshal(rec.Body.Bytes(), &sess)
	for _, tc := range []struct {
		name, key, path string
		status          int
		code            string
	}{
		{"own session", "key-PRO", "/v1/sessions/" + sess.ID + "/egress", 200, ""},
		{"own session with limit", "key-PRO", "/v1/sessions/" + sess.ID + "/egress?limit=5", 200, ""},
		{"bad limit", "key-PRO", "/v1/sessions/" + sess.ID + "/egress?limit=0", 400, "invalid_request"},
		{"another key's session", "key-ULTRA", "/v1/sessions/" + sess.ID + "/egress", 404, "not_found"},
		{"unknown session", "key-PRO", "/v1/sessions/s999999999999999/egress", 404, "not_found"},
	} {
		rec := send(t, srv, "GET", tc.path, "", map[string]string{"X-API-Key": tc.key})
		if rec.Code != tc.status {
			t.Errorf("%s: %d, want %d: %s", tc.name, rec.Code, tc.status, rec.Body)
			continue
		}
		if tc.code != "" {
			var e errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code != tc.code {
				t.Errorf("%s: body %s, want code %s", tc.name, rec.Body, tc.code)
			}
			continue
		}
		var got struct {
			SessionID string            `json:"session_id"`
			Decisions []json.RawMessage `json:"decisions"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.SessionID != sess.ID || got.Decisions == nil || len(got.Decisions) != 0 {
			t.Errorf("%s: body %s, want the session id and an empty decisions list", tc.name, rec.Body)
		}
	}
}

// TestWrongMethodIs405 sends every method a route's path does not take to
// every mounted route: 405 with an Allow header naming the methods it does
// take and a JSON error, never the /v1/ catch-all's 404 or the mux's text.
func TestWrongMethodIs405(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) {
		d.Usage, d.EgressLog, d.Packages = fakeUsage{}, fakeEgressLog{}, fakePackages{}
		d.Installer, d.Gate = fakeInstaller{}, &fakeGate{}
		d.Files = &fakeFiles{files: map[string][]byte{}, max: 1 << 20}
		d.Metrics = http.NotFoundHandler()
	})
	methods := map[string][]string{} // path -> methods with a route
	for _, p := range srv.Routes() {
		m, path, ok := strings.Cut(p, " ")
		if !ok {
			continue
		}
		methods[path] = append(methods[path], m)
		if m == http.MethodGet {
			methods[path] = append(methods[path], http.MethodHead)
		}
	}
	if len(methods) < 12 {
		t.Fatalf("only %d routed paths: %v", len(methods), srv.Routes())
	}
	tried := 0
	for path, allowed := range methods {
		concrete := strings.ReplaceAll(path, "{id}", "s000000000000001")
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if slices.Contains(allowed, m) {
				continue
			}
			tried++
			rec := send(t, srv, m, concrete, "", map[string]string{"X-API-Key": "key-PRO"})
			if rec.Code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405: %s", m, concrete, rec.Code, rec.Body)
				continue
			}
			allow := strings.Split(rec.Header().Get("Allow"), ", ")
			slices.Sort(allow)
			want := slices.Clone(allowed)
			slices.Sort(want)
			if !slices.Equal(allow, want) {
				t.Errorf("%s %s: Allow %q, want %v", m, concrete, rec.Header().Get("Allow"), want)
			}
			if m == http.MethodHead {
				continue // no body
			}
			var e errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code != "method_not_allowed" || e.Error.RequestID == "" {
				t.Errorf("%s %s: body %q, want a JSON error method_not_allowed", m, concrete, rec.Body)
			}
		}
	}
	if tried < 40 {
		t.Errorf("only %d wrong methods tried", tried)
	}
	// Routed methods, unknown paths and handlers of any method are as before.
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/v1/sessions", 200},
		{"HEAD", "/healthz", 200},
		{"GET", "/v1/nothing", 404},
		{"DELETE", "/v1/nothing", 404},
	} {
		if rec := send(t, srv, tc.method, tc.path, "", map[string]string{"X-API-Key": "key-PRO"}); rec.Code != tc.status {
			t.Errorf("%s %s: %d, want %d: %s", tc.method, tc.path, rec.Code, tc.status, rec.Body)
		}
	}
}

// TestIdleTTLOverMaximumSaysSo checks that an idle_ttl over the maximum,
// however large, is reported as over the maximum, and that only a
// non-positive one is "must be positive".
func TestIdleTTLOverMaximumSaysSo(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServer(t) // MaxIdleTTL: one hour
	for _, tc := range []struct {
		ttl  string
		want string
	}{
		{"3601", "idle_ttl must be at most 3600 seconds"},
		{"86400", "idle_ttl must be at most 3600 seconds"},
		{"700000", "idle_ttl must be at most 3600 seconds"}, // over a week
		{"1e300", "idle_ttl must be at most 3600 seconds"},
		{"0", "idle_ttl must be a positive number of seconds"},
		{"-5", "idle_ttl must be a positive number of seconds"},
	} {
		rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3","idle_ttl":`+tc.ttl+`}`, map[string]string{"X-API-Key": "key-PRO"})
		var e errorBody
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != 400 || e.Error.Code != "invalid_request" || e.Error.Message != tc.want {
			t.Errorf("idle_ttl %s: %d %s, want 400 %q", tc.ttl, rec.Code, rec.Body, tc.want)
		}
	}
	// A timeout past a week likewise names the plan's maximum.
	rec := send(t, srv, "POST", "/v1/execute", `{"language":"python3","code":"1","timeout":1e9}`, map[string]string{"X-API-Key": "key-MEGA"})
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "timeout must be at most") {
		t.Errorf("timeout 1e9: %d %s", rec.Code, rec.Body)
	}
}

// TestUnknownLanguageBeforeQuota checks that bad input is reported before
// the plan's quota: a key with every session slot taken still gets 400
// unknown_language for a language the server lacks (429 only for a good
// request), and a stateless call likewise, streamed or not.
func TestUnknownLanguageBeforeQuota(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServer(t)
	pro := map[string]string{"X-API-Key": "key-PRO"}
	for i := 0; i < 2; i++ { // PRO allows two
		if rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, pro); rec.Code != 201 {
			t.Fatalf("session %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	for _, tc := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/v1/sessions", `{"language":"cobol"}`, 400, "unknown_language"},
		{"/v1/sessions", `{"language":" PYTHON "}`, 429, "quota_exceeded"}, // known (case and space ignored): the quota speaks
		{"/v1/sessions", `{"language":""}`, 400, "invalid_request"},
		{"/v1/execute", `{"language":"cobol","code":"x"}`, 400, "unknown_language"},
		{"/v1/execute", `{"language":"cobol","code":"x","stream":true}`, 400, "unknown_language"},
	} {
		rec := send(t, srv, "POST", tc.path, tc.body, pro)
		var e errorBody
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != tc.status || e.Error.Code != tc.code {
			t.Errorf("%s %s: %d %s, want %d %s", tc.path, tc.body, rec.Code, rec.Body, tc.status, tc.code)
		}
	}
}
