package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// fakeNetworks is the executor's side of PATCH .../network over a
// fakeSandboxes: it replaces the session's network, or fails with err.
// Safe for concurrent use.
type fakeNetworks struct {
	sb    *fakeSandboxes
	mu    sync.Mutex
	err   error
	calls int
}

func (f *fakeNetworks) UpdateSessionNetwork(ctx context.Context, owner, id string, n sandbox.NetworkRequest) (sandbox.Session, sandbox.NetworkRequest, error) {
	f.mu.Lock()
	f.calls++
	err := f.err
	f.mu.Unlock()
	s, gerr := f.sb.GetSession(ctx, owner, id)
	if gerr != nil {
		return sandbox.Session{}, sandbox.NetworkRequest{}, gerr
	}
	if err != nil {
		return sandbox.Session{}, s.Network, err
	}
	before := s.Network
	s.Network = n
	f.sb.mu.Lock()
	f.sb.sessions[id] = s
	f.sb.mu.Unlock()
	return s, before, nil
}

func (f *fakeNetworks) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// networkServer is a fake server with the PATCH route, a body cap of
// 16 KiB and its log in a buffer.
func networkServer(t *testing.T) (*Server, *fakeSandboxes, *fakeNetworks, *testenv.LogBuffer) {
	nw := &fakeNetworks{}
	logs := &testenv.LogBuffer{}
	srv, sb := newFakeServerDeps(t, func(c *Config) { c.MaxBodyBytes = 16 << 10 }, func(d *Deps) {
		d.Network = nw
		d.Log = slog.New(slog.NewJSONHandler(logs, nil))
	})
	nw.sb = sb
	return srv, sb, nw, logs
}

func networkCall(h http.Handler, method, path, plan, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if plan != "" {
		req.Header.Set("X-RapidAPI-Key", "key-"+plan)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func errCode(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var body errorBody
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("error reply is not the JSON envelope: %q", w.Body.String())
	}
	return body.Error.Code
}

// newNetworkSession makes an ULTRA session with network to one host.
func newNetworkSession(t *testing.T, h http.Handler) wire.Session {
	t.Helper()
	w := networkCall(h, "POST", "/v1/sessions", "ULTRA", `{"language":"python3","network":{"enabled":true,"allowed_domains":["old.example.com"]}}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("create = %d %s", w.Code, w.Body)
	}
	var s wire.Session
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPatchNetworkReplacesTheBlock(t *testing.T) {
	t.Parallel()
	srv, _, nw, logs := networkServer(t)
	sess := newNetworkSession(t, srv)
	path := "/v1/sessions/" + sess.ID + "/network"
	req := httptest.NewRequest("PATCH", path, strings.NewReader(`{"enabled":true,"allowed_domains":["api.example.com","API.example.com.","*.cdn.example.com"]}`))
	req.Header.Set("X-RapidAPI-Key", "key-ULTRA")
	req.Header.Set("X-Request-Id", "patch-net-1")
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("PATCH = %d %s", w.Code, w.Body)
	}
	var got wire.Session
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := sandbox.NetworkRequest{Enabled: true, AllowedDomains: []string{"api.example.com", "*.cdn.example.com"}}
	if !reflect.DeepEqual(got.Network, want) || got.ID != sess.ID {
		t.Fatalf("reply network = %+v (id %s), want %+v (repeats dropped as at create)", got.Network, got.ID, want)
	}
	g := networkCall(srv, "GET", "/v1/sessions/"+sess.ID, "ULTRA", "")
	var shown wire.Session
	if err := json.Unmarshal(g.Body.Bytes(), &shown); err != nil || !reflect.DeepEqual(shown.Network, want) {
		t.Fatalf("GET after PATCH = %s, want network %+v", g.Body, want)
	}
	if w.Body.String() != g.Body.String() {
		t.Errorf("PATCH reply differs from GET:\n%s\n%s", w.Body, g.Body)
	}
	// The audit line: who changed it, in which request, counts before and after.
	var line map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"session network changed"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line == nil {
		t.Fatalf("no audit line in the log:\n%s", logs)
	}
	for k, v := range map[string]any{"request_id": "patch-net-1", "key_id": "id-ULTRA", "session": sess.ID,
		"allowed_domains_before": 1.0, "allowed_domains": 2.0, "enabled_before": true, "enabled": true} {
		if line[k] != v {
			t.Errorf("audit line %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	// Disabling: enabled alone.
	w = networkCall(srv, "PATCH", path, "ULTRA", `{"enabled":false}`)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"network":{"enabled":false}`) {
		t.Fatalf("disable = %d %s", w.Code, w.Body)
	}
	if nw.callCount() != 2 {
		t.Fatalf("executor called %d times, want 2", nw.callCount())
	}
}

// TestPatchNetworkRefusals sends hostile and refused PATCH bodies and
// calls: each gets its status and code, and neither the executor nor the
// session's network is touched.
func TestPatchNetworkRefusals(t *testing.T) {
	t.Parallel()
	many := make([]string, sandbox.MaxAllowedDomains+1)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.example.com", i)
	}
	manyJSON, _ := json.Marshal(many)
	tests := []struct {
		name, plan, id, body string
		status               int
		code                 string
	}{
		{name: "empty body", plan: "ULTRA", body: "", status: 400, code: "invalid_json"},
		{name: "enabled missing", plan: "ULTRA", body: `{}`, status: 400, code: "invalid_request"},
		{name: "enabled missing with domains", plan: "ULTRA", body: `{"allowed_domains":["a.example.com"]}`, status: 400, code: "invalid_request"},
		{name: "enabled null", plan: "ULTRA", body: `{"enabled":null}`, status: 400, code: "invalid_request"},
		{name: "enabled a string", plan: "ULTRA", body: `{"enabled":"true"}`, status: 400, code: "invalid_json"},
		{name: "an array", plan: "ULTRA", body: `[{"enabled":true}]`, status: 400, code: "invalid_json"},
		{name: "unknown field", plan: "ULTRA", body: `{"enabled":true,"allowed_domain":["a.example.com"]}`, status: 400, code: "unknown_field"},
		{name: "nested create shape", plan: "ULTRA", body: `{"network":{"enabled":true}}`, status: 400, code: "unknown_field"},
		{name: "two values", plan: "ULTRA", body: `{"enabled":true}{"enabled":false}`, status: 400, code: "invalid_json"},
		{name: "trailing garbage", plan: "ULTRA", body: `{"enabled":true} x`, status: 400, code: "invalid_json"},
		{name: "bare wildcard", plan: "ULTRA", body: `{"enabled":true,"allowed_domains":["*"]}`, status: 400, code: "invalid_allowed_domains"},
		{name: "CRLF in an entry", plan: "ULTRA", body: `{"enabled":true,"allowed_domains":["a.example.com\r\nX-Evil: 1"]}`, status: 400, code: "invalid_allowed_domains"},
		{name: "NUL in an entry", plan: "ULTRA", body: `{"enabled":true,"allowed_domains":["a.example.com\u0000.evil"]}`, status: 400, code: "invalid_allowed_domains"},
		{name: "host and port", plan: "ULTRA", body: `{"enabled":true,"allowed_domains":["a.example.com:443"]}`, status: 400, code: "invalid_allowed_domains"},
		{name: "entry over the cap", plan: "ULTRA", body: `{"enabled":true,"allowed_domains":["` + strings.Repeat("a", sandbox.MaxDomainEntryBytes) + `.com"]}`, status: 400, code: "invalid_allowed_domains"},
		{name: "too many entries", plan: "ULTRA", body: `{"enabled":true,"allowed_domains":` + string(manyJSON) + `}`, status: 400, code: "invalid_allowed_domains"},
		{name: "domains without network", plan: "ULTRA", body: `{"enabled":false,"allowed_domains":["a.example.com"]}`, status: 400, code: "invalid_request"},
		{name: "body over the cap", plan: "ULTRA", body: `{"enabled":true,"allowed_domains":["` + strings.Repeat("a", 20<<10) + `"]}`, status: 413, code: "body_too_large"},
		{name: "plan without allowed_domains", plan: "PRO", id: "pro", body: `{"enabled":true,"allowed_domains":["a.example.com"]}`, status: 403, code: "plan_forbidden"},
		{name: "another key's session", plan: "MEGA", body: `{"enabled":true}`, status: 404, code: "not_found"},
		{name: "a key without sessions", plan: "BASIC", body: `{"enabled":true}`, status: 404, code: "not_found"},
		{name: "unknown session", plan: "ULTRA", id: "s999999999999999", body: `{"enabled":true}`, status: 404, code: "not_found"},
		{name: "NUL in the id", plan: "ULTRA", id: "s%00x", body: `{"enabled":true}`, status: 404, code: "not_found"},
		{name: "escaped slash id", plan: "ULTRA", id: "..%2f..%2fetc", body: `{"enabled":true}`, status: 404, code: "not_found"},
		{name: "no key", plan: "", body: `{"enabled":true}`, status: 401, code: "unauthenticated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, sb, nw, _ := networkServer(t)
			sess := newNetworkSession(t, srv)
			id := sess.ID
			switch tt.id {
			case "":
			case "pro":
				w := networkCall(srv, "POST", "/v1/sessions", "PRO", `{"language":"python3","network":{"enabled":true}}`)
				if w.Code != http.StatusCreated {
					t.Fatalf("PRO create = %d %s", w.Code, w.Body)
				}
				var s wire.Session
				_ = json.Unmarshal(w.Body.Bytes(), &s)
				id = s.ID
			default:
				id = tt.id
			}
			before, _ := sb.GetSession(context.Background(), "id-ULTRA", sess.ID)
			w := networkCall(srv, "PATCH", "/v1/sessions/"+id+"/network", tt.plan, tt.body)
			if w.Code != tt.status {
				t.Fatalf("PATCH = %d %s, want %d", w.Code, w.Body, tt.status)
			}
			if tt.code != "" {
				if got := errCode(t, w); got != tt.code {
					t.Fatalf("code %q (%s), want %q", got, w.Body, tt.code)
				}
			}
			if nw.callCount() != 0 {
				t.Errorf("the executor was asked to change the network")
			}
			after, _ := sb.GetSession(context.Background(), "id-ULTRA", sess.ID)
			if !reflect.DeepEqual(before.Network, after.Network) {
				t.Errorf("network changed from %+v to %+v", before.Network, after.Network)
			}
		})
	}
}

// TestPatchNetworkExecutorErrors checks the statuses of what the executor
// and the server's egress answer.
func TestPatchNetworkExecutorErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		err       error
		noNetwork bool
		body      string
		status    int
		code      string
	}{
		{name: "running without a network namespace", err: fmt.Errorf("session x: %w", sandbox.ErrNetworkNotAttached), body: `{"enabled":true}`, status: 409, code: "network_not_attached"},
		{name: "ending", err: fmt.Errorf("%w: ending", sandbox.ErrBadState), body: `{"enabled":true}`, status: 409, code: "session_not_running"},
		{name: "ended meanwhile", err: sandbox.ErrNotFound, body: `{"enabled":true}`, status: 404, code: "not_found"},
		{name: "moved to another node", err: sandbox.ErrSessionMoved, body: `{"enabled":true}`, status: 503, code: "session_moved"},
		{name: "egress off on this server", noNetwork: true, body: `{"enabled":true}`, status: 503, code: "network_unavailable"},
		{name: "internal", err: fmt.Errorf("writing state file: disk on fire"), body: `{"enabled":true}`, status: 500, code: "internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, sb, nw, _ := networkServer(t)
			sess := newNetworkSession(t, srv)
			nw.err = tt.err
			sb.noNetwork = tt.noNetwork
			w := networkCall(srv, "PATCH", "/v1/sessions/"+sess.ID+"/network", "ULTRA", tt.body)
			if w.Code != tt.status || errCode(t, w) != tt.code {
				t.Fatalf("PATCH = %d %s, want %d %s", w.Code, w.Body, tt.status, tt.code)
			}
			if strings.Contains(w.Body.String(), "disk on fire") {
				t.Errorf("internal error text leaked: %s", w.Body)
			}
		})
	}
}

func TestPatchNetworkMethods(t *testing.T) {
	t.Parallel()
	srv, _, _, _ := networkServer(t)
	sess := newNetworkSession(t, srv)
	w := networkCall(srv, "GET", "/v1/sessions/"+sess.ID+"/network", "ULTRA", "")
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "PATCH" {
		t.Fatalf("GET .../network = %d (Allow %q), want 405 with Allow: PATCH", w.Code, w.Header().Get("Allow"))
	}
	// Without the dependency the route is not mounted.
	plain, _ := newFakeServer(t)
	w = networkCall(plain, "PATCH", "/v1/sessions/"+sess.ID+"/network", "ULTRA", `{"enabled":true}`)
	if w.Code != http.StatusNotFound || errCode(t, w) != "no_route" {
		t.Fatalf("PATCH without the route = %d %s", w.Code, w.Body)
	}
}

// FuzzPatchNetworkBody sends any body to PATCH .../network: the answer is
// 200 with a network that passes create's checks and is what the session
// now has, or a JSON error (400, 403 or 413) that left the session as it
// was; never a 500.
func FuzzPatchNetworkBody(f *testing.F) {
	f.Add(`{"enabled":true,"allowed_domains":["api.example.com","*.example.org"]}`)
	f.Add(`{"enabled":false}`)
	f.Add(`{"enabled":true}`)
	f.Add(`{}`)
	f.Add(`{"enabled":null}`)
	f.Add(`{"enabled":true,"allowed_domains":["*"]}`)
	f.Add(`{"enabled":true,"allowed_domains":["a.example.com\r\nHost: x"]}`)
	f.Add(`{"enabled":true,"allowed_domains":null}`)
	f.Add(`{"enabled":true,"enabled":false}`)
	f.Add(`{"enabled":true,"credentials":[{"host":"a","header":"b","value":"c"}]}`)
	f.Add("\xff\xfe{")
	f.Fuzz(func(t *testing.T, body string) {
		srv, sb, _, _ := networkServer(t)
		sess := newNetworkSession(t, srv)
		before, _ := sb.GetSession(context.Background(), "id-ULTRA", sess.ID)
		w := networkCall(srv, "PATCH", "/v1/sessions/"+sess.ID+"/network", "ULTRA", body)
		after, _ := sb.GetSession(context.Background(), "id-ULTRA", sess.ID)
		switch w.Code {
		case http.StatusOK:
			var got wire.Session
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatalf("200 with %q", w.Body)
			}
			if !reflect.DeepEqual(got.Network, after.Network) {
				t.Fatalf("reply network %+v, session has %+v", got.Network, after.Network)
			}
			n := after.Network
			if len(n.AllowedDomains) > sandbox.MaxAllowedDomains || (!n.Enabled && len(n.AllowedDomains) > 0) {
				t.Fatalf("stored network %+v breaks create's rules", n)
			}
			if _, err := policy.New(policy.Rules{Enabled: n.Enabled, Allowed: n.AllowedDomains, Denied: n.Denied}); err != nil {
				t.Fatalf("stored network %+v builds no policy: %v", n, err)
			}
			again := n
			if err := normalizeNetwork(&again); err != nil || !reflect.DeepEqual(again, n) {
				t.Fatalf("stored network %+v is not normalized (%v)", n, err)
			}
		case http.StatusBadRequest, http.StatusForbidden, http.StatusRequestEntityTooLarge:
			if errCode(t, w) == "" {
				t.Fatalf("%d without a code: %s", w.Code, w.Body)
			}
			if !reflect.DeepEqual(before.Network, after.Network) {
				t.Fatalf("refused (%d %s) but the network changed from %+v to %+v", w.Code, w.Body, before.Network, after.Network)
			}
			if len(w.Body.String()) > maxErrorReply+512 {
				t.Fatalf("a %d-byte error reply", w.Body.Len())
			}
		default:
			t.Fatalf("PATCH = %d %s", w.Code, w.Body)
		}
	})
}
