package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/httperr"
	"github.com/sandboxapi/sandboxapi/store"
)

// fakeAPI is a /v1 stand-in at the adapter's seam (its http.Handler): keys,
// sessions, files and canned executes, enough to test the adapter's own
// logic fast. TestE2BSDK (internal/e2e) runs the real server and SDK.
type fakeAPI struct {
	mu       sync.Mutex
	keys     map[string]string // secret -> owner
	sessions map[string]*fakeSession
	n        int
	maxFile  int64
	// fsFail, when its code is set, is every file operation's answer.
	fsFail struct {
		status    int
		code, msg string
		truncated bool // listings say they were cut short
	}
	calls []string
	// cell is what a kernel session's streamed execute writes (Server-
	// Sent Events); block makes it then wait for the caller to leave and
	// close left. code is the last cell's code.
	cell     string
	block    bool
	left     chan struct{}
	code     string
	restarts int
}

type fakeSession struct {
	owner   string
	state   string
	kernel  bool
	files   map[string][]byte
	network wire.Network
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{keys: map[string]string{"sk_a": "A", "sk_b": "B"}, sessions: map[string]*fakeSession{}, maxFile: 1 << 16}
}

func apiFail(w http.ResponseWriter, status int, code string) {
	httperr.Write(w, status, httperr.Payload{Code: code, Message: code + " from the fake"})
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	switch r.Header.Get("X-API-Key") {
	case "sk_limited":
		w.Header().Set("Retry-After", "7")
		apiFail(w, http.StatusTooManyRequests, "rate_limited")
		return
	case "sk_busy":
		apiFail(w, http.StatusServiceUnavailable, "no_capacity")
		return
	}
	owner, ok := f.keys[r.Header.Get("X-API-Key")]
	if !ok {
		apiFail(w, http.StatusUnauthorized, "unauthenticated")
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/v1/sessions")
	id, sub, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
	if rest == "" {
		switch r.Method {
		case http.MethodPost:
			var req wire.CreateSessionRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Language != "python3" {
				apiFail(w, http.StatusBadRequest, "invalid_request")
				return
			}
			f.n++
			sid := fmt.Sprintf("sess_%03d", f.n)
			f.sessions[sid] = &fakeSession{owner: owner, state: "running", kernel: req.Kernel, files: map[string][]byte{}}
			if req.Network != nil {
				f.sessions[sid].network = *req.Network
			}
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(wire.Session{ID: sid, Language: "python3", State: "running", IdleTTL: 300})
		case http.MethodGet:
			var l wire.SessionList
			for sid, s := range f.sessions {
				if s.owner == owner {
					l.Sessions = append(l.Sessions, wire.Session{ID: sid, State: s.state})
				}
			}
			_ = json.NewEncoder(w).Encode(l)
		}
		return
	}
	s := f.sessions[id]
	if s == nil || s.owner != owner {
		apiFail(w, http.StatusNotFound, "not_found")
		return
	}
	switch {
	case sub == "" && r.Method == http.MethodGet:
		_ = json.NewEncoder(w).Encode(wire.Session{ID: id, State: s.state, Network: s.network, DiskMB: 64})
	case sub == "" && r.Method == http.MethodDelete:
		delete(f.sessions, id)
		w.WriteHeader(http.StatusNoContent)
	case sub == "network" || sub == "fork":
		f.networkOrFork(w, r, owner, id, sub)
	case sub == "hibernate":
		s.state = "hibernated"
		_ = json.NewEncoder(w).Encode(wire.Session{ID: id, State: s.state})
	case sub == "files" && r.Method == http.MethodPut:
		b, err := io.ReadAll(io.LimitReader(r.Body, f.maxFile+1))
		if err != nil || int64(len(b)) > f.maxFile {
			apiFail(w, http.StatusRequestEntityTooLarge, "too_large")
			return
		}
		s.files[r.URL.Query().Get("path")] = b
		s.state = "running"
		_ = json.NewEncoder(w).Encode(map[string]any{"name": "x"})
	case (strings.HasPrefix(sub, "files/") || sub == "files" && r.Method == http.MethodDelete) && f.fsFail.code != "":
		httperr.Write(w, f.fsFail.status, httperr.Payload{Code: f.fsFail.code, Message: f.fsFail.msg})
	case sub == "files/watch":
		if strings.Contains(r.URL.Query().Get("path"), "sym") {
			apiFail(w, http.StatusConflict, "symlink_refused")
			return
		}
		dir := r.URL.Query().Get("path")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = fmt.Fprintf(w, "event: start\ndata: {}\n\n: keepalive\n\nevent: change\ndata: {\"path\":\"%s/sub/x\",\"op\":\"create\"}\n\n"+
			"event: change\ndata: {\"path\":\"%s\",\"op\":\"overflow\"}\n\nevent: end\ndata: {\"reason\":\"removed\"}\n\n", dir, dir)
	case sub == "files/stat", sub == "files/mkdir", sub == "files/move":
		_ = json.NewEncoder(w).Encode(wire.FileInfo{Name: "f", Path: "/home/sandbox/d/f", Size: 3, Mode: "0644",
			ModTime: time.Unix(1700000000, 0).UTC(), Type: "file"})
	case sub == "files" && r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case sub == "files" && r.Method == http.MethodGet:
		s.state = "running"
		if r.URL.Query().Has("dir") {
			_ = json.NewEncoder(w).Encode(wire.FileListing{Truncated: f.fsFail.truncated, Entries: []wire.FileInfo{
				{Name: "l", Path: "/home/sandbox/d/l", Mode: "0777", Type: "symlink", Target: "/etc"}}})
			return
		}
		b, ok := s.files[r.URL.Query().Get("path")]
		if !ok {
			apiFail(w, http.StatusNotFound, "file_not_found")
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		_, _ = w.Write(b)
	case sub == "execute" && s.kernel && r.Header.Get("Accept") == "text/event-stream":
		var req wire.ExecuteRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Code == nil || !req.Stream {
			apiFail(w, http.StatusBadRequest, "invalid_request")
			return
		}
		f.code = *req.Code
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, f.cell)
		w.(http.Flusher).Flush()
		if f.block {
			<-r.Context().Done()
			close(f.left)
		}
	case sub == "execute":
		_ = json.NewEncoder(w).Encode(wire.ExecuteResult{Status: "ok"})
	case sub == "kernel/restart" && !s.kernel:
		apiFail(w, http.StatusConflict, "no_kernel")
	case sub == "kernel/restart":
		f.restarts++
		_ = json.NewEncoder(w).Encode(wire.Session{ID: id, State: s.state, Kernel: true})
	default:
		apiFail(w, http.StatusNotFound, "no_route")
	}
}

func (f *fakeAPI) file(id, p string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[id]
	if s == nil {
		return nil, false
	}
	b, ok := s.files[p]
	return b, ok
}

func (f *fakeAPI) fileCount(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sessions[id].files)
}

type rig struct {
	t   *testing.T
	api *fakeAPI
	st  *store.Store
	srv *httptest.Server
	now time.Time
	mu  sync.Mutex
}

func newRig(t *testing.T) *rig {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "e2b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g := &rig{t: t, api: newFakeAPI(), st: st, now: time.Now()}
	h := New(Deps{API: g.api, Records: st, Now: func() time.Time { g.mu.Lock(); defer g.mu.Unlock(); return g.now }})
	g.srv = httptest.NewServer(h)
	t.Cleanup(g.srv.Close)
	return g
}

func (g *rig) advance(d time.Duration) {
	g.mu.Lock()
	g.now = g.now.Add(d)
	g.mu.Unlock()
}

type resp struct {
	status int
	hdr    http.Header
	body   []byte
}

func (g *rig) do(method, path string, body io.Reader, hdr map[string]string) resp {
	g.t.Helper()
	req, err := http.NewRequest(method, g.srv.URL+path, body)
	if err != nil {
		g.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return resp{r.StatusCode, r.Header, b}
}

func (g *rig) json(method, path, key string, v any) resp {
	g.t.Helper()
	var body io.Reader
	if v != nil {
		b, _ := json.Marshal(v)
		body = bytes.NewReader(b)
	}
	return g.do(method, path, body, map[string]string{"X-API-Key": key, "Content-Type": "application/json"})
}

func (g *rig) create(key string, body map[string]any) sandboxReply {
	g.t.Helper()
	r := g.json("POST", "/e2b/v2/sandboxes", key, body)
	if r.status != http.StatusCreated {
		g.t.Fatalf("create: %d %s", r.status, r.body)
	}
	var out sandboxReply
	if err := json.Unmarshal(r.body, &out); err != nil {
		g.t.Fatal(err)
	}
	return out
}

// wantE2BError checks E2B's error shape and status.
func wantE2BError(t *testing.T, what string, r resp, status int) {
	t.Helper()
	var e errorReply
	if err := json.Unmarshal(r.body, &e); r.status != status || err != nil || e.Code != status || e.Message == "" {
		t.Errorf("%s: %d %s, want %d in E2B's shape", what, r.status, r.body, status)
	}
}

// TestControlPlaneRefusals: bad input gets E2B's error with the status the
// SDK maps, and makes no session.
func TestControlPlaneRefusals(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	many := map[string]string{}
	for i := range maxMetadata + 1 {
		many[fmt.Sprint(i)] = "v"
	}
	for _, c := range []struct {
		name   string
		key    string
		body   any
		status int
	}{
		{"no key", "", map[string]any{}, http.StatusUnauthorized},
		{"unknown key", "sk_nope", map[string]any{}, http.StatusUnauthorized},
		{"custom template", "sk_a", map[string]any{"templateID": "mine"}, http.StatusBadRequest},
		{"internet", "sk_a", map[string]any{"allow_internet_access": true}, http.StatusBadRequest},
		{"deny-list alone", "sk_a", map[string]any{"network": map[string]any{"denyOut": []string{"1.1.1.1"}}}, http.StatusBadRequest},
		{"auto pause", "sk_a", map[string]any{"autoPause": true}, http.StatusBadRequest},
		{"volumes", "sk_a", map[string]any{"volumeMounts": []any{map[string]string{"name": "v", "path": "/x"}}}, http.StatusBadRequest},
		{"zero timeout", "sk_a", map[string]any{"timeout": 0}, http.StatusBadRequest},
		{"too much metadata", "sk_a", map[string]any{"metadata": many}, http.StatusBadRequest},
		{"long metadata value", "sk_a", map[string]any{"metadata": map[string]string{"k": strings.Repeat("v", maxMetadataValue+1)}}, http.StatusBadRequest},
		{"env name with =", "sk_a", map[string]any{"envVars": map[string]string{"A=B": "x"}}, http.StatusBadRequest},
		{"env with NUL", "sk_a", map[string]any{"envVars": map[string]string{"A": "x\x00"}}, http.StatusBadRequest},
		{"env too big", "sk_a", map[string]any{"envVars": map[string]string{"A": strings.Repeat("x", maxEnvBytes+1)}}, http.StatusBadRequest},
		{"body too big", "sk_a", map[string]any{"metadata": map[string]string{"k": strings.Repeat("v", maxBodyBytes)}}, http.StatusRequestEntityTooLarge},
	} {
		wantE2BError(t, c.name, g.json("POST", "/e2b/v2/sandboxes", c.key, c.body), c.status)
	}
	r := g.json("POST", "/e2b/v2/sandboxes", "sk_limited", map[string]any{})
	wantE2BError(t, "rate limited", r, http.StatusTooManyRequests)
	if r.hdr.Get("Retry-After") != "7" {
		t.Errorf("rate limited: Retry-After %q, want the API's 7", r.hdr.Get("Retry-After"))
	}
	wantE2BError(t, "no capacity", g.json("GET", "/e2b/v2/sandboxes", "sk_busy", nil), http.StatusServiceUnavailable)
	wantE2BError(t, "bad JSON", g.do("POST", "/e2b/v2/sandboxes", strings.NewReader("{nope"), map[string]string{"X-API-Key": "sk_a"}), http.StatusBadRequest)
	wantE2BError(t, "fork of no sandbox", g.json("POST", "/e2b/sandboxes/x/fork", "sk_a", nil), http.StatusNotFound)
	wantE2BError(t, "metrics of many", g.json("GET", "/e2b/sandboxes/metrics", "sk_a", nil), http.StatusNotImplemented)
	wantE2BError(t, "unknown route", g.json("GET", "/e2b/whatever", "sk_a", nil), http.StatusNotFound)
	if n := len(g.api.sessions); n != 0 {
		t.Fatalf("%d sessions made by refused creates", n)
	}
}

// TestControlPlaneLifecycle: create stores sealed secrets only, another
// key sees nothing, list filters and pages, pause/connect, and a sandbox
// past its end is ended by the next call.
func TestControlPlaneLifecycle(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	a := g.create("sk_a", map[string]any{"templateID": "base", "timeout": 60, "metadata": map[string]string{"team": "x"}, "envVars": map[string]string{"TOKEN": "env-secret"}})
	b := g.create("sk_a", map[string]any{"templateID": "code-interpreter-v1", "metadata": map[string]string{"team": "y"}})
	if a.EnvdAccessToken == "" || a.EnvdAccessToken == b.EnvdAccessToken || a.EnvdVersion != envdVersion {
		t.Fatalf("create replies: %+v %+v", a, b)
	}
	rec, err := g.st.E2BSandbox(context.Background(), a.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	row := fmt.Sprintf("%+v", rec)
	for _, secret := range []string{a.EnvdAccessToken, "sk_a", "env-secret"} {
		if strings.Contains(row, secret) {
			t.Fatalf("the record holds %q in the clear: %s", secret, row)
		}
	}

	// Another key: not found, and nothing listed.
	wantE2BError(t, "other key's info", g.json("GET", "/e2b/sandboxes/"+a.SandboxID, "sk_b", nil), http.StatusNotFound)
	wantE2BError(t, "other key's connect", g.json("POST", "/e2b/v2/sandboxes/"+a.SandboxID+"/connect", "sk_b", map[string]any{}), http.StatusNotFound)
	wantE2BError(t, "other key's kill", g.json("DELETE", "/e2b/sandboxes/"+a.SandboxID, "sk_b", nil), http.StatusNotFound)
	if r := g.json("GET", "/e2b/v2/sandboxes", "sk_b", nil); r.status != 200 || strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("other key's list: %d %s", r.status, r.body)
	}

	list := func(q string) ([]sandboxInfo, string) {
		r := g.json("GET", "/e2b/v2/sandboxes"+q, "sk_a", nil)
		if r.status != 200 {
			t.Fatalf("list %s: %d %s", q, r.status, r.body)
		}
		var out []sandboxInfo
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatal(err)
		}
		return out, r.hdr.Get("X-Next-Token")
	}
	if all, _ := list(""); len(all) != 2 {
		t.Fatalf("list: %+v", all)
	}
	// The SDK's metadata filter: pairs URL-encoded, then the whole again.
	if got, _ := list("?metadata=" + "team%3Dy"); len(got) != 1 || got[0].SandboxID != b.SandboxID || got[0].Metadata["team"] != "y" {
		t.Fatalf("metadata filter: %+v", got)
	}
	first, next := list("?limit=1")
	if len(first) != 1 || next == "" {
		t.Fatalf("page 1: %+v %q", first, next)
	}
	second, next2 := list("?limit=1&nextToken=" + next)
	if len(second) != 1 || second[0].SandboxID == first[0].SandboxID || next2 != "" {
		t.Fatalf("page 2: %+v %q", second, next2)
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?state=dead", "?nextToken=@@", "?metadata=a%3Dzz%25zz"} {
		wantE2BError(t, "list "+q, g.json("GET", "/e2b/v2/sandboxes"+q, "sk_a", nil), http.StatusBadRequest)
	}

	// Pause, pause again (409: the SDK's false), connect (201 resumed,
	// the same token), connect again (200).
	if r := g.json("POST", "/e2b/sandboxes/"+b.SandboxID+"/pause", "sk_a", map[string]any{}); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	wantE2BError(t, "pause again", g.json("POST", "/e2b/sandboxes/"+b.SandboxID+"/pause", "sk_a", map[string]any{}), http.StatusConflict)
	if paused, _ := list("?state=paused"); len(paused) != 1 || paused[0].State != "paused" {
		t.Fatalf("paused list: %+v", paused)
	}
	for _, want := range []int{http.StatusCreated, http.StatusOK} {
		r := g.json("POST", "/e2b/v2/sandboxes/"+b.SandboxID+"/connect", "sk_a", map[string]any{"timeout": 120})
		var c sandboxReply
		if err := json.Unmarshal(r.body, &c); r.status != want || err != nil || c.EnvdAccessToken != b.EnvdAccessToken {
			t.Fatalf("connect: %d %s, want %d and the create's token", r.status, r.body, want)
		}
	}

	// a's end passes: the next call ends it (its session too).
	g.advance(61 * time.Second)
	wantE2BError(t, "info past the end", g.json("GET", "/e2b/sandboxes/"+a.SandboxID, "sk_a", nil), http.StatusNotFound)
	if _, ok := g.api.sessions[a.SandboxID]; ok {
		t.Fatal("the session of a sandbox past its end is still there")
	}
	// b's end was moved by connect's timeout (120 s from then): alive.
	if r := g.json("GET", "/e2b/sandboxes/"+b.SandboxID, "sk_a", nil); r.status != 200 {
		t.Fatalf("info of b: %d %s", r.status, r.body)
	}
	if r := g.json("POST", "/e2b/sandboxes/"+b.SandboxID+"/timeout", "sk_a", map[string]any{"timeout": 3600}); r.status != http.StatusNoContent {
		t.Fatalf("set timeout: %d %s", r.status, r.body)
	}
	wantE2BError(t, "timeout missing", g.json("POST", "/e2b/sandboxes/"+b.SandboxID+"/timeout", "sk_a", map[string]any{}), http.StatusBadRequest)
	wantE2BError(t, "timeout negative", g.json("POST", "/e2b/sandboxes/"+b.SandboxID+"/timeout", "sk_a", map[string]any{"timeout": -1}), http.StatusBadRequest)
	g.advance(time.Hour - time.Minute)
	if r := g.json("DELETE", "/e2b/sandboxes/"+b.SandboxID, "sk_a", nil); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	if _, err := g.st.E2BSandbox(context.Background(), b.SandboxID); err == nil {
		t.Fatal("a killed sandbox's record is still there")
	}
}

// sandboxHeaders are the SDK's headers for sandbox traffic.
func sandboxHeaders(id, token string) map[string]string {
	return map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": envdPort, "X-Access-Token": token}
}

func multipartBody(t *testing.T, files map[string]string, order []string) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, name := range order {
		h := make(map[string][]string)
		h["Content-Disposition"] = []string{`form-data; name="file"; filename="` + name + `"`}
		h["Content-Type"] = []string{"application/octet-stream"}
		pw, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = pw.Write([]byte(files[name]))
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
}

// TestSandboxTraffic: uploads (multipart, several files, octet-stream,
// gzip) and downloads go to the session's home, and every hostile or
// malformed call is refused with nothing written.
func TestSandboxTraffic(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	sb := g.create("sk_a", map[string]any{"templateID": "base"})
	hdr := func(extra map[string]string) map[string]string {
		h := sandboxHeaders(sb.SandboxID, sb.EnvdAccessToken)
		for k, v := range extra {
			h[k] = v
		}
		return h
	}

	body, ct := multipartBody(t, map[string]string{"a.txt": "A", "/home/user/d/b.txt": "B"}, []string{"a.txt", "/home/user/d/b.txt"})
	r := g.do("POST", "/e2b/sandbox/files", body, hdr(map[string]string{"Content-Type": ct}))
	var up []uploaded
	if err := json.Unmarshal(r.body, &up); r.status != 200 || err != nil || len(up) != 2 || up[1].Path != "/home/user/d/b.txt" {
		t.Fatalf("multipart upload: %d %s", r.status, r.body)
	}
	if b, _ := g.api.file(sb.SandboxID, "/home/sandbox/d/b.txt"); string(b) != "B" {
		t.Fatalf("stored %q", b)
	}
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	_, _ = zw.Write([]byte("zipped"))
	zw.Close()
	r = g.do("POST", "/e2b/sandbox/files?path=z.txt", &zb, hdr(map[string]string{"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"}))
	if b, _ := g.api.file(sb.SandboxID, "/home/sandbox/z.txt"); r.status != 200 || string(b) != "zipped" {
		t.Fatalf("gzip upload: %d %s, stored %q", r.status, r.body, b)
	}
	r = g.do("GET", "/e2b/sandbox/files?path=/home/user/z.txt", nil, hdr(nil))
	if r.status != 200 || string(r.body) != "zipped" {
		t.Fatalf("download: %d %q", r.status, r.body)
	}
	wantE2BError(t, "download of a missing file", g.do("GET", "/e2b/sandbox/files?path=nope", nil, hdr(nil)), http.StatusNotFound)
	before := g.api.fileCount(sb.SandboxID)

	hostile := []string{"../../etc/passwd", "/etc/cron.d/x", "/home/user/../../root/.ssh/authorized_keys", "/home/userx/a", "a\x00b", "/home/user", "", "/tmp/x"}
	for _, name := range hostile {
		body, ct := multipartBody(t, map[string]string{name: "evil"}, []string{name})
		wantE2BError(t, fmt.Sprintf("multipart file %q", name), g.do("POST", "/e2b/sandbox/files", body, hdr(map[string]string{"Content-Type": ct})), http.StatusBadRequest)
		if name != "" {
			if name != "/home/user" { // a folder: the files API's 409, not ours
				wantE2BError(t, fmt.Sprintf("download path %q", name), g.do("GET", "/e2b/sandbox/files?path="+strings.ReplaceAll(name, "\x00", "%00"), nil, hdr(nil)), http.StatusBadRequest)
			}
			wantE2BError(t, fmt.Sprintf("octet-stream path %q", name),
				g.do("POST", "/e2b/sandbox/files?path="+strings.ReplaceAll(name, "\x00", "%00"), strings.NewReader("evil"), hdr(map[string]string{"Content-Type": "application/octet-stream"})), http.StatusBadRequest)
		}
	}
	if after := g.api.fileCount(sb.SandboxID); after != before {
		t.Fatalf("refused uploads wrote files: %d -> %d", before, after)
	}
	names := make([]string, maxUploadParts+1)
	files := map[string]string{}
	for i := range names {
		names[i] = fmt.Sprintf("many/%d", i)
		files[names[i]] = ""
	}
	body, ct = multipartBody(t, files, names)
	wantE2BError(t, "too many parts", g.do("POST", "/e2b/sandbox/files", body, hdr(map[string]string{"Content-Type": ct})), http.StatusBadRequest)
	// Parts are written in order, as envd does: the refusal of the
	// 1001st leaves the first 1000 (docs/e2b.md).
	if after := g.api.fileCount(sb.SandboxID); after != before+maxUploadParts {
		t.Fatalf("too many parts: %d -> %d files, want the first %d", before, after, maxUploadParts)
	}
	before = g.api.fileCount(sb.SandboxID)
	body, ct = multipartBody(t, map[string]string{"x": "1", "y": "2"}, []string{"x", "y"})
	wantE2BError(t, "one path query, two parts", g.do("POST", "/e2b/sandbox/files?path=one", body, hdr(map[string]string{"Content-Type": ct})), http.StatusBadRequest)
	if b, ok := g.api.file(sb.SandboxID, "/home/sandbox/one"); !ok || string(b) != "1" {
		t.Fatalf("the path query's one part: %q %v", b, ok)
	}
	before++ // that first part, written before the second was seen
	wantE2BError(t, "not gzip", g.do("POST", "/e2b/sandbox/files?path=g", strings.NewReader("plain"), hdr(map[string]string{"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})), http.StatusBadRequest)
	wantE2BError(t, "brotli", g.do("POST", "/e2b/sandbox/files?path=g", strings.NewReader("x"), hdr(map[string]string{"Content-Type": "application/octet-stream", "Content-Encoding": "br"})), http.StatusBadRequest)
	wantE2BError(t, "text/plain", g.do("POST", "/e2b/sandbox/files?path=g", strings.NewReader("x"), hdr(map[string]string{"Content-Type": "text/plain"})), http.StatusBadRequest)
	wantE2BError(t, "multipart without boundary", g.do("POST", "/e2b/sandbox/files", strings.NewReader("x"), hdr(map[string]string{"Content-Type": "multipart/form-data"})), http.StatusBadRequest)
	wantE2BError(t, "as root", g.do("GET", "/e2b/sandbox/files?path=z.txt&username=root", nil, hdr(nil)), http.StatusBadRequest)
	wantE2BError(t, "too large", g.do("POST", "/e2b/sandbox/files?path=big", bytes.NewReader(make([]byte, 1<<17)), hdr(map[string]string{"Content-Type": "application/octet-stream"})), http.StatusRequestEntityTooLarge)
	if after := g.api.fileCount(sb.SandboxID); after != before {
		t.Fatalf("refused uploads wrote files: %d -> %d", before, after)
	}

	// Authentication of sandbox traffic.
	other := g.create("sk_b", map[string]any{})
	for _, c := range []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		{"no id", map[string]string{"X-Access-Token": sb.EnvdAccessToken}, http.StatusBadRequest},
		{"no token", map[string]string{"E2b-Sandbox-Id": sb.SandboxID}, http.StatusUnauthorized},
		{"wrong token", sandboxHeaders(sb.SandboxID, sb.EnvdAccessToken+"0"), http.StatusUnauthorized},
		{"another sandbox's token", sandboxHeaders(sb.SandboxID, other.EnvdAccessToken), http.StatusUnauthorized},
		{"unknown sandbox", sandboxHeaders("sess_999", sb.EnvdAccessToken), http.StatusBadGateway},
		{"a port not served", map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "8080", "X-Access-Token": sb.EnvdAccessToken}, http.StatusBadGateway},
	} {
		wantE2BError(t, c.name, g.do("GET", "/e2b/sandbox/files?path=z.txt", nil, c.hdr), c.status)
	}
	// A Connect call with a wrong token gets Connect's error.
	r = g.do("POST", "/e2b/sandbox/filesystem.Filesystem/Stat", strings.NewReader(`{"path":"/home/user"}`),
		map[string]string{"Content-Type": "application/json", "E2b-Sandbox-Id": sb.SandboxID, "X-Access-Token": "bad"})
	if r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), `"unauthenticated"`) {
		t.Fatalf("rpc with a wrong token: %d %s", r.status, r.body)
	}
	// Health, then the session goes: 502 as E2B's proxy answers.
	if r := g.do("GET", "/e2b/sandbox/health", nil, hdr(nil)); r.status != http.StatusNoContent {
		t.Fatalf("health: %d %s", r.status, r.body)
	}
	g.api.mu.Lock()
	delete(g.api.sessions, sb.SandboxID)
	g.api.mu.Unlock()
	wantE2BError(t, "health of a gone session", g.do("GET", "/e2b/sandbox/health", nil, hdr(nil)), http.StatusBadGateway)
}

// TestFilesystemRPC: the Connect service maps paths both ways and its
// errors onto the SDK's codes; hostile paths never reach the sandbox.
func TestFilesystemRPC(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	sb := g.create("sk_a", map[string]any{})
	rpc := func(method, body string) resp {
		h := sandboxHeaders(sb.SandboxID, sb.EnvdAccessToken)
		h["Content-Type"] = "application/json"
		return g.do("POST", "/e2b/sandbox/filesystem.Filesystem/"+method, strings.NewReader(body), h)
	}
	setFail := func(status int, code, msg string, truncated bool) {
		g.api.mu.Lock()
		g.api.fsFail.status, g.api.fsFail.code, g.api.fsFail.msg, g.api.fsFail.truncated = status, code, msg, truncated
		g.api.mu.Unlock()
	}
	r := rpc("Stat", `{"path":"d/f"}`)
	if r.status != 200 || !strings.Contains(string(r.body), `"path":"/home/user/d/f"`) || !strings.Contains(string(r.body), `"FILE_TYPE_FILE"`) ||
		!strings.Contains(string(r.body), `"permissions":"-rw-r--r--"`) || !strings.Contains(string(r.body), `"mode":420`) {
		t.Fatalf("stat: %d %s", r.status, r.body)
	}
	r = rpc("ListDir", `{"path":"d","depth":3}`)
	if r.status != 200 || !strings.Contains(string(r.body), `"symlinkTarget":"/etc"`) || !strings.Contains(string(r.body), `"permissions":"lrwxrwxrwx"`) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	for _, c := range []struct {
		name, method, body string
		status             int
		code, apiCode      string
	}{
		{"stat of a missing file", "Stat", `{"path":"x"}`, http.StatusNotFound, "not_found", "file_not_found"},
		{"make dir of an existing one", "MakeDir", `{"path":"d"}`, http.StatusConflict, "already_exists", "file_exists"},
		{"move through a symlink", "Move", `{"source":"a","destination":"l/b"}`, http.StatusBadRequest, "invalid_argument", "symlink_refused"},
		{"remove of a huge tree", "Remove", `{"path":"d"}`, http.StatusBadRequest, "out_of_range", "too_large"},
		{"session gone", "Remove", `{"path":"d"}`, http.StatusServiceUnavailable, "unavailable", "not_found"},
	} {
		status := map[string]int{"file_not_found": 404, "file_exists": 409, "symlink_refused": 409, "too_large": 413, "not_found": 404}[c.apiCode]
		setFail(status, c.apiCode, "/home/sandbox/x: "+c.apiCode, false)
		r := rpc(c.method, c.body)
		if r.status != c.status || !strings.Contains(string(r.body), `"`+c.code+`"`) ||
			c.apiCode != "not_found" && !strings.Contains(string(r.body), "/home/user/x") {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.body, c.status, c.code)
		}
	}
	setFail(0, "", "", true)
	if r := rpc("ListDir", `{"path":"d","depth":64}`); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"out_of_range"`) {
		t.Fatalf("a cut-short listing: %d %s", r.status, r.body)
	}
	count := func() (files, execs int) {
		g.api.mu.Lock()
		defer g.api.mu.Unlock()
		for _, c := range g.api.calls {
			switch {
			case strings.HasSuffix(c, "/execute"):
				execs++
			case strings.Contains(c, "/files"):
				files++
			}
		}
		return files, execs
	}
	before, execs := count()
	if execs != 0 {
		t.Fatalf("file operations ran %d executes", execs)
	}
	for _, c := range []struct{ method, body string }{
		{"Stat", `{"path":"/etc/passwd"}`},
		{"ListDir", `{"path":"/home/user/../.."}`},
		{"ListDir", `{"path":"/home/user","depth":65}`},
		{"MakeDir", `{"path":"/home/userx"}`},
		{"Move", `{"source":"/home/user/a","destination":"/tmp/a"}`},
		{"Move", `{"source":"/home/user","destination":"/home/user/x"}`},
		{"Move", `{"source":"/home/user/a","destination":"/home/user"}`},
		{"Remove", `{"path":"/home/user"}`},
		{"Remove", `{"path":"."}`},
		{"Remove", `{"path":""}`},
		{"Remove", `{"path":"a\u0000b"}`},
	} {
		r := rpc(c.method, c.body)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"invalid_argument"`) {
			t.Errorf("%s %s: %d %s, want invalid_argument", c.method, c.body, r.status, r.body)
		}
	}
	if after, _ := count(); after != before {
		t.Fatalf("refused calls made %d files API calls", after-before)
	}
}

// TestWatchDirRPC: WatchDir is a Connect server stream made of the files
// API's watch events: start, a keepalive, the change with its name
// relative to the folder (an overflow dropped), then the end; a refusal
// before the watch runs is Connect's error.
func TestWatchDirRPC(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	sb := g.create("sk_a", map[string]any{})
	watch := func(body string) resp {
		h := sandboxHeaders(sb.SandboxID, sb.EnvdAccessToken)
		h["Content-Type"] = "application/connect+json"
		env := make([]byte, 5, 5+len(body))
		binary.BigEndian.PutUint32(env[1:], uint32(len(body)))
		return g.do("POST", "/e2b/sandbox/filesystem.Filesystem/WatchDir", bytes.NewReader(append(env, body...)), h)
	}
	r := watch(`{"path":"/home/user/w","recursive":true}`)
	if r.status != http.StatusOK {
		t.Fatalf("watch: %d %s", r.status, r.body)
	}
	var msgs []string
	for b := r.body; len(b) >= 5; {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+n {
			t.Fatalf("a cut envelope: %q", r.body)
		}
		// protojson varies its spacing from one build to another on
		// purpose: compare the JSON, not its whitespace.
		var msg bytes.Buffer
		if err := json.Compact(&msg, b[5:5+n]); err != nil {
			t.Fatalf("an envelope that is not JSON: %q", b[5:5+n])
		}
		msgs = append(msgs, fmt.Sprintf("%d %s", b[0], msg.Bytes()))
		b = b[5+n:]
	}
	want := []string{`0 {"start":{}}`, `0 {"keepalive":{}}`, `0 {"filesystem":{"name":"sub/x","type":"EVENT_TYPE_CREATE"}}`, `2 {}`}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("stream:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
	for _, c := range []struct{ body, code string }{
		{`{"path":"/home/user/sym"}`, "invalid_argument"},
		{`{"path":"/etc"}`, "invalid_argument"},
		{`{"path":"/home/user/../x"}`, "invalid_argument"},
	} {
		r := watch(c.body)
		if !strings.Contains(string(r.body), `"code":"`+c.code+`"`) {
			t.Errorf("%s: %d %q", c.body, r.status, r.body)
		}
	}
}
