package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// sessionAPI is a stand-in for the session routes of the REST API, on the
// same kind of mux (so a path the tools built wrongly is routed, or
// redirected, as the API's would be). It keeps files in memory, refuses
// paths outside the home as the executor does (400 invalid_request),
// answers 413 over its file limit, and answers executes with canned
// kernel replies chosen by the code.
type sessionAPI struct {
	t        *testing.T
	mux      *http.ServeMux
	maxFile  int64
	mu       sync.Mutex
	sessions map[string]map[string][]byte // id -> path -> content
	seen     []string                     // "METHOD escaped-path?query" of every call
	execs    atomic.Int64                 // calls of POST /v1/execute (never expected)
}

const home = "/home/sandbox"

func newSessionAPI(t *testing.T) *sessionAPI {
	a := &sessionAPI{t: t, mux: http.NewServeMux(), maxFile: 4096, sessions: map[string]map[string][]byte{}}
	a.mux.HandleFunc("POST /v1/sessions", a.create)
	a.mux.HandleFunc("GET /v1/sessions", a.list)
	a.mux.HandleFunc("DELETE /v1/sessions/{id}", a.withSession(func(w http.ResponseWriter, r *http.Request, id string, _ map[string][]byte) {
		a.mu.Lock()
		delete(a.sessions, id)
		a.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	a.mux.HandleFunc("POST /v1/sessions/{id}/execute", a.withSession(a.execute))
	a.mux.HandleFunc("POST /v1/sessions/{id}/install", a.withSession(a.install))
	a.mux.HandleFunc("PUT /v1/sessions/{id}/files", a.withSession(a.putFile))
	a.mux.HandleFunc("GET /v1/sessions/{id}/files", a.withSession(a.getFiles))
	a.mux.HandleFunc("POST /v1/execute", func(w http.ResponseWriter, r *http.Request) {
		a.execs.Add(1)
		writeErr(w, 400, "invalid_request", "not here", 0)
	})
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { writeErr(w, 404, "no_route", "no route", 0) })
	return a
}

func (a *sessionAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, r.Method+" "+r.URL.RequestURI())
	a.mu.Unlock()
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if key != goodKey {
		writeErr(w, 401, "unauthenticated", "unknown key", 0)
		return
	}
	a.mux.ServeHTTP(w, r)
}

func (a *sessionAPI) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

func (a *sessionAPI) withSession(h func(http.ResponseWriter, *http.Request, string, map[string][]byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		a.mu.Lock()
		files, ok := a.sessions[id]
		a.mu.Unlock()
		if !ok {
			writeErr(w, 404, "not_found", "session not found", 0)
			return
		}
		h(w, r, id, files)
	}
}

func (a *sessionAPI) create(w http.ResponseWriter, r *http.Request) {
	var req wire.CreateSessionRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeErr(w, 400, "invalid_json", err.Error(), 0)
		return
	}
	if req.Language != "python3" {
		writeErr(w, 400, "unknown_language", "unknown language "+req.Language, 0)
		return
	}
	id := "sess_" + strings.Repeat(strconv.Itoa(len(a.sessions)%10), 26)
	a.mu.Lock()
	a.sessions[id] = map[string][]byte{}
	a.mu.Unlock()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	s := wire.Session{ID: id, Language: req.Language, State: "running", IdleTTL: 600, CreatedAt: now, LastUsed: now, ExpiresAt: now.Add(10 * time.Minute)}
	if req.Network != nil {
		s.Network = *req.Network
	}
	writeJSONBody(w, 201, s)
}

func (a *sessionAPI) list(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	var out wire.SessionList
	for id := range a.sessions {
		out.Sessions = append(out.Sessions, wire.Session{ID: id, Language: "python3", State: "running"})
	}
	a.mu.Unlock()
	writeJSONBody(w, 200, out)
}

// filePath is the guest's path check in miniature: a path under the home,
// absolute or relative to it, without ".." or NUL.
func filePath(p string) (string, bool) {
	if p == "" || strings.ContainsRune(p, 0) {
		return "", false
	}
	var comps []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			comps = append(comps, c)
		}
	}
	if strings.HasPrefix(p, "/") {
		if len(comps) < 2 || comps[0] != "home" || comps[1] != "sandbox" {
			return "", false
		}
		comps = comps[2:]
	}
	if slices.Contains(comps, "..") {
		return "", false
	}
	return path.Join(append([]string{home}, comps...)...), true
}

func (a *sessionAPI) putFile(w http.ResponseWriter, r *http.Request, _ string, files map[string][]byte) {
	p, ok := filePath(r.URL.Query().Get("path"))
	if !ok || len(r.URL.Query()) != 1 {
		writeErr(w, 400, "invalid_request", "path "+sandbox.Quote(r.URL.Query().Get("path"))+" is outside the home", 0)
		return
	}
	if r.ContentLength > a.maxFile {
		writeErr(w, 413, "too_large", "file of "+strconv.FormatInt(r.ContentLength, 10)+" bytes is over the limit of "+strconv.FormatInt(a.maxFile, 10), 0)
		return
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, a.maxFile+1))
	a.mu.Lock()
	files[p] = b
	a.mu.Unlock()
	writeJSONBody(w, 200, wire.FileInfo{Name: path.Base(p), Path: p, Size: int64(len(b)), Mode: "0644", Type: "file", ModTime: time.Now().UTC()})
}

func (a *sessionAPI) getFiles(w http.ResponseWriter, r *http.Request, _ string, files map[string][]byte) {
	q := r.URL.Query()
	if d := q.Get("dir"); d != "" {
		dir, ok := filePath(d)
		if !ok {
			writeErr(w, 400, "invalid_request", "dir is outside the home", 0)
			return
		}
		out := wire.FileListing{Path: dir, Entries: []wire.FileInfo{}}
		a.mu.Lock()
		for p, b := range files {
			if path.Dir(p) == dir {
				out.Entries = append(out.Entries, wire.FileInfo{Name: path.Base(p), Size: int64(len(b)), Mode: "0644", Type: "file"})
			}
		}
		a.mu.Unlock()
		writeJSONBody(w, 200, out)
		return
	}
	p, ok := filePath(q.Get("path"))
	if !ok {
		writeErr(w, 400, "invalid_request", "path is outside the home", 0)
		return
	}
	a.mu.Lock()
	b, ok := files[p]
	a.mu.Unlock()
	if !ok {
		writeErr(w, 404, "not_found", "no such file", 0)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set("X-File-Mode", "0644")
	w.WriteHeader(200)
	_, _ = w.Write(b)
}

func (a *sessionAPI) install(w http.ResponseWriter, r *http.Request, _ string, _ map[string][]byte) {
	var req wire.InstallRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	if slices.Contains(req.Packages, "evil") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(422)
		_, _ = w.Write([]byte(`{"error":{"code":"packages_rejected","message":"1 package cannot be installed","details":{"packages":[{"package":"evil","reason":"not in the mirror","status":"missing"}]}}}`))
		return
	}
	out := wire.InstallReply{Manager: req.Manager, DurationMS: 5, Installed: []wire.InstalledPackage{}}
	for _, p := range req.Packages {
		out.Installed = append(out.Installed, wire.InstalledPackage{Requested: p, Name: p, Version: "1.0", Filename: p + "-1.0.whl", SHA256: strings.Repeat("a", 64), Resolved: true})
	}
	writeJSONBody(w, 200, out)
}

// testPNG is a small real PNG.
func testPNG(t *testing.T) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 4, 3))
	img.Set(1, 1, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// wrapped is base64 with line breaks, as notebooks sometimes store it.
func wrapped(b []byte) string {
	s := base64.StdEncoding.EncodeToString(b)
	var out strings.Builder
	for len(s) > 16 {
		out.WriteString(s[:16] + "\n")
		s = s[16:]
	}
	return out.String() + s
}

func (a *sessionAPI) execute(w http.ResponseWriter, r *http.Request, _ string, files map[string][]byte) {
	var req wire.ExecuteRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Code == nil || req.Language != "" {
		writeErr(w, 400, "invalid_request", "bad execute body", 0)
		return
	}
	res := wire.ExecuteResult{Status: sandbox.StatusOK, DurationMS: 3}
	switch code := *req.Code; code {
	case "PLOT":
		res.Results = []wire.CellResult{
			{Type: "display_data", Data: map[string]any{"image/png": wrapped(testPNG(a.t)), "text/plain": "<Figure size 640x480 with 1 Axes>"}},
			{Type: "execute_result", IsMainResult: true, Data: map[string]any{"text/plain": []any{"4", "2"}, "text/markdown": "**42**"}},
		}
	case "RAISE":
		res.Status, res.ExitCode = sandbox.StatusError, 1
		res.Error = &wire.CellError{Name: "ZeroDivisionError", Value: "division by zero",
			Traceback: []string{"\x1b[0;31m---------------------------------------------------------------------------\x1b[0m", "\x1b[0;31mZeroDivisionError\x1b[0m: division by zero"}}
	case "RESTART":
		res.KernelRestarted = true
		res.Stdout = "fresh\n"
	case "HTML":
		res.Results = []wire.CellResult{{Type: "execute_result", IsMainResult: true, Data: map[string]any{"text/html": strings.Repeat("<td>x</td>", 10000)}}}
	case "SLEEP":
		res.Status, res.Signal = sandbox.StatusTimeout, "SIGKILL"
	default:
		// cat FILE: the program reads a file of the session.
		if p, ok := strings.CutPrefix(code, "cat "); ok {
			a.mu.Lock()
			res.Stdout = string(files[p])
			a.mu.Unlock()
		} else {
			res.Stdout = "stdin=" + req.Stdin
		}
	}
	writeJSONBody(w, 200, res)
}

func connectSessions(t *testing.T) (*sessionAPI, *sdk.ClientSession) {
	t.Helper()
	api := newSessionAPI(t)
	return api, connectInMemory(t, Options{Handler: api, Key: goodKey})
}

// toolError checks that res is a tool error whose text has every one of want.
func toolError(t *testing.T, res *sdk.CallToolResult, want ...string) {
	t.Helper()
	if !res.IsError {
		t.Fatalf("not a tool error: %s", text(res))
	}
	for _, w := range want {
		if !strings.Contains(text(res), w) {
			t.Fatalf("tool error %q lacks %q", text(res), w)
		}
	}
}

func ok(t *testing.T, res *sdk.CallToolResult) {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", text(res))
	}
}

// TestMCPSessionRoundTrip: create, write (text and base64), execute
// reading the file, read back, list, end; each tool makes the REST call
// it stands for, with the file path passed as one query value.
func TestMCPSessionRoundTrip(t *testing.T) {
	t.Parallel()
	api, cs := connectSessions(t)
	res := call(t, cs, "create_session", map[string]any{"language": "python3", "kernel": true, "network": map[string]any{"enabled": false}})
	ok(t, res)
	sess := structured[wire.Session](t, res)
	if !strings.HasPrefix(sess.ID, "sess_") || sess.State != "running" || !strings.Contains(text(res), sess.ID) {
		t.Fatalf("created %+v, text %q", sess, text(res))
	}
	id := sess.ID

	// A path with characters that mean something in a query stays one value.
	odd := home + "/a b&dir=%2Fetc#x.txt"
	res = call(t, cs, "write_file", map[string]any{"session_id": id, "path": odd, "content": "héllo\n"})
	ok(t, res)
	if info := structured[wire.FileInfo](t, res); info.Size != int64(len("héllo\n")) || info.Path != odd {
		t.Fatalf("write_file: %+v", info)
	}
	bin := []byte{0, 1, 2, 0xff, 0xfe}
	ok(t, call(t, cs, "write_file", map[string]any{"session_id": id, "path": home + "/b.bin", "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"}))
	pngBytes := testPNG(t)
	ok(t, call(t, cs, "write_file", map[string]any{"session_id": id, "path": home + "/plot.png", "content": base64.StdEncoding.EncodeToString(pngBytes), "encoding": "base64"}))

	res = call(t, cs, "execute_in_session", map[string]any{"session_id": id, "code": "cat " + odd})
	ok(t, res)
	if out := structured[ExecuteResult](t, res); out.Stdout != "héllo\n" || out.Status != "ok" {
		t.Fatalf("execute_in_session: %+v", out)
	}
	res = call(t, cs, "execute_in_session", map[string]any{"session_id": id, "code": "x", "stdin": "in put"})
	if out := structured[ExecuteResult](t, res); out.Stdout != "stdin=in put" {
		t.Fatalf("stdin: %+v", out)
	}

	res = call(t, cs, "read_file", map[string]any{"session_id": id, "path": odd})
	ok(t, res)
	fc := structured[FileContent](t, res)
	if fc.Encoding != "utf-8" || fc.Content != "héllo\n" || fc.Size != int64(len(fc.Content)) || fc.Mode != "0644" || text(res) != "héllo\n" {
		t.Fatalf("read_file text: %+v, text %q", fc, text(res))
	}
	res = call(t, cs, "read_file", map[string]any{"session_id": id, "path": home + "/b.bin"})
	ok(t, res)
	fc = structured[FileContent](t, res)
	if got, _ := base64.StdEncoding.DecodeString(fc.Content); fc.Encoding != "base64" || !bytes.Equal(got, bin) || !strings.Contains(text(res), "binary") {
		t.Fatalf("read_file binary: %+v, text %q", fc, text(res))
	}
	res = call(t, cs, "read_file", map[string]any{"session_id": id, "path": home + "/plot.png"})
	ok(t, res)
	if img, isImg := res.Content[len(res.Content)-1].(*sdk.ImageContent); !isImg || img.MIMEType != "image/png" || !bytes.Equal(img.Data, pngBytes) {
		t.Fatalf("read_file png: content %#v", res.Content)
	}

	res = call(t, cs, "list_files", map[string]any{"session_id": id})
	ok(t, res)
	l := structured[wire.FileListing](t, res)
	var names []string
	for _, e := range l.Entries {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	if l.Path != home || !slices.Equal(names, []string{"a b&dir=%2Fetc#x.txt", "b.bin", "plot.png"}) {
		t.Fatalf("list_files: %+v", l)
	}

	res = call(t, cs, "install_packages", map[string]any{"session_id": id, "manager": "pip", "packages": []string{"requests==2.32.3"}})
	ok(t, res)
	if in := structured[wire.InstallReply](t, res); len(in.Installed) != 1 || !strings.Contains(text(res), "requests==2.32.3 1.0") {
		t.Fatalf("install: %+v %q", in, text(res))
	}
	res = call(t, cs, "install_packages", map[string]any{"session_id": id, "manager": "pip", "packages": []string{"evil"}})
	toolError(t, res, "packages_rejected (HTTP 422)", `"package":"evil"`, "not in the mirror")

	res = call(t, cs, "list_sessions", map[string]any{})
	ok(t, res)
	if l := structured[wire.SessionList](t, res); len(l.Sessions) != 1 || l.Sessions[0].ID != id {
		t.Fatalf("list_sessions: %+v", l)
	}
	res = call(t, cs, "end_session", map[string]any{"session_id": id})
	ok(t, res)
	if e := structured[EndSessionResult](t, res); e.ID != id || !e.Ended {
		t.Fatalf("end_session: %+v", e)
	}
	toolError(t, call(t, cs, "read_file", map[string]any{"session_id": id, "path": odd}), "not_found (HTTP 404)")
	toolError(t, call(t, cs, "end_session", map[string]any{"session_id": id}), "not_found")

	want := []string{
		"POST /v1/sessions",
		"PUT /v1/sessions/" + id + "/files?path=%2Fhome%2Fsandbox%2Fa+b%26dir%3D%252Fetc%23x.txt",
		"GET /v1/sessions/" + id + "/files?dir=%2Fhome%2Fsandbox",
		"DELETE /v1/sessions/" + id,
	}
	for _, w := range want {
		if !slices.Contains(api.calls(), w) {
			t.Errorf("no call %q among %q", w, api.calls())
		}
	}
}

// TestMCPSessionHostileInput: ids that are not one path segment never
// reach the API (they could name another route); file paths outside the
// home get the API's refusal; content over the API's limit gets its 413;
// a file over read_file's limit is refused with its size; credentials
// are not taken.
func TestMCPSessionHostileInput(t *testing.T) {
	t.Parallel()
	api, cs := connectSessions(t)
	id := structured[wire.Session](t, call(t, cs, "create_session", map[string]any{"language": "python3"})).ID

	for _, bad := range []string{"..", "../../execute", "x/../../execute", "sess_a?path=/etc", "%2e%2e", "sess_a/files", "", " ", "sess_\x00", strings.Repeat("a", 65), "sess_é"} {
		for _, tool := range []string{"execute_in_session", "read_file", "write_file", "list_files", "install_packages", "end_session"} {
			args := map[string]any{"session_id": bad, "code": "x", "path": home + "/x", "content": "x", "manager": "pip", "packages": []string{"a"}}
			res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: onlyProps(t, cs, tool, args)})
			if err == nil && !res.IsError {
				t.Fatalf("%s with session_id %q: accepted: %s", tool, bad, text(res))
			}
		}
	}
	// The same refusal without the schema (a client that skips it).
	if _, err := sessionPath("../execute", "/files"); err == nil || !strings.Contains(err.Error(), "not a session id") {
		t.Fatalf("sessionPath: %v", err)
	}
	if p, err := sessionPath(id, "/execute"); err != nil || p != "/v1/sessions/"+id+"/execute" {
		t.Fatalf("sessionPath(%q) = %q, %v", id, p, err)
	}
	for _, c := range api.calls() {
		if c != "POST /v1/sessions" {
			t.Fatalf("a hostile id reached the API: %q", c)
		}
	}
	if api.execs.Load() != 0 {
		t.Fatal("POST /v1/execute was called")
	}

	for _, p := range []string{"/etc/passwd", home + "/../../etc/passwd", "../x", home + "es/x", "//etc/passwd", "a/../b", "x\x00y", home + "/a/../../root"} {
		toolError(t, call(t, cs, "write_file", map[string]any{"session_id": id, "path": p, "content": "x"}), "invalid_request (HTTP 400)")
		toolError(t, call(t, cs, "read_file", map[string]any{"session_id": id, "path": p}), "invalid_request (HTTP 400)")
		toolError(t, call(t, cs, "list_files", map[string]any{"session_id": id, "dir": p}), "invalid_request (HTTP 400)")
	}
	toolError(t, call(t, cs, "write_file", map[string]any{"session_id": id, "path": home + "/big", "content": strings.Repeat("x", int(api.maxFile)+1)}), "too_large (HTTP 413)")
	toolError(t, call(t, cs, "write_file", map[string]any{"session_id": id, "path": home + "/x", "content": "not base64!", "encoding": "base64"}), "not standard base64")
	if res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write_file",
		Arguments: map[string]any{"session_id": id, "path": home + "/x", "content": "x", "encoding": "latin-1"}}); err == nil && !res.IsError {
		t.Fatal("encoding latin-1 accepted")
	}

	// A file over read_file's limit: refused with its size, and the
	// in-process copy stops at the limit instead of buffering it all.
	api.maxFile = 4 << 20
	big := strings.Repeat("y", maxReadBytes+10)
	api.mu.Lock()
	api.sessions[id][home+"/big.txt"] = []byte(big)
	api.mu.Unlock()
	toolError(t, call(t, cs, "read_file", map[string]any{"session_id": id, "path": home + "/big.txt"}), strconv.Itoa(len(big))+" bytes, over read_file's limit")

	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "create_session", Arguments: map[string]any{"language": "python3",
		"network": map[string]any{"enabled": true, "credentials": []any{map[string]any{"host": "api.example.com", "header": "Authorization", "value": "secret"}}}}})
	if err == nil && !res.IsError {
		t.Fatalf("credentials accepted: %s", text(res))
	}
	if _, _, err := (&tools{}).createSession(context.Background(), nil, CreateSessionInput{Language: "python3",
		Network: &wire.Network{Enabled: true, Credentials: []wire.Credential{{Host: "h", Header: "X", Value: "v"}}}}); err == nil || !strings.Contains(err.Error(), "REST API") {
		t.Fatalf("createSession with credentials: %v", err)
	}
}

// onlyProps drops the arguments tool's schema does not have, so a call
// fails on session_id alone.
func onlyProps(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any) map[string]any {
	t.Helper()
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range lt.Tools {
		if tl.Name != tool {
			continue
		}
		b, _ := json.Marshal(tl.InputSchema)
		var s struct{ Properties map[string]any }
		_ = json.Unmarshal(b, &s)
		out := map[string]any{}
		for k, v := range args {
			if _, ok := s.Properties[k]; ok {
				out[k] = v
			}
		}
		return out
	}
	t.Fatalf("no tool %s", tool)
	return nil
}

// TestMCPRemoteBackendFollowsNoRedirect: a redirect from the server (or
// anything on the way) is reported, never followed with the key and body.
func TestMCPRemoteBackendFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	var executes atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/execute" {
			executes.Add(1)
		}
		http.Redirect(w, r, "/v1/execute", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(ts.Close)
	cs := connectInMemory(t, Options{BaseURL: ts.URL, Key: goodKey, Client: &http.Client{Timeout: 10 * time.Second}})
	toolError(t, call(t, cs, "execute_in_session", map[string]any{"session_id": "sess_x", "code": "print(1)"}), "temporary_redirect (HTTP 307)")
	if executes.Load() != 0 {
		t.Fatal("the redirect was followed")
	}
}

// TestMCPKernelResults: a kernel cell's reply becomes text for its text
// results, image content for its PNG, and a readable error; the
// structured result is the API's reply.
func TestMCPKernelResults(t *testing.T) {
	t.Parallel()
	_, cs := connectSessions(t)
	id := structured[wire.Session](t, call(t, cs, "create_session", map[string]any{"language": "python3", "kernel": true})).ID

	res := call(t, cs, "execute_in_session", map[string]any{"session_id": id, "code": "PLOT"})
	ok(t, res)
	if len(res.Content) != 2 {
		t.Fatalf("content %#v, want text and one image", res.Content)
	}
	txt := text(res)
	for _, want := range []string{"status ok", "--- display 1 ---\n<Figure size 640x480 with 1 Axes>", "[image/png, ", "image 1 below]", "--- result 2 ---\n**42**"} {
		if !strings.Contains(txt, want) {
			t.Errorf("text %q lacks %q", txt, want)
		}
	}
	img, isImg := res.Content[1].(*sdk.ImageContent)
	if !isImg || img.MIMEType != "image/png" || !bytes.Equal(img.Data, testPNG(t)) {
		t.Fatalf("image content %#v", res.Content[1])
	}
	if m, err := png.Decode(bytes.NewReader(img.Data)); err != nil || m.Bounds().Dx() != 4 {
		t.Fatalf("the image does not decode: %v", err)
	}
	out := structured[ExecuteResult](t, res)
	if len(out.Results) != 2 || out.Results[0].Data["image/png"] != wrapped(testPNG(t)) || !out.Results[1].IsMainResult {
		t.Fatalf("structured results %+v", out.Results)
	}

	res = call(t, cs, "execute_in_session", map[string]any{"session_id": id, "code": "RAISE"})
	if res.IsError {
		t.Fatalf("a cell's exception is a result, not a tool error: %s", text(res))
	}
	txt = text(res)
	if !strings.Contains(txt, "the cell raised ZeroDivisionError") || !strings.Contains(txt, "ZeroDivisionError: division by zero") || strings.Contains(txt, "\x1b") {
		t.Fatalf("error text %q", txt)
	}
	if out := structured[ExecuteResult](t, res); out.Error == nil || out.Error.Name != "ZeroDivisionError" || len(out.Error.Traceback) != 2 {
		t.Fatalf("structured error %+v", out.Error)
	}

	res = call(t, cs, "execute_in_session", map[string]any{"session_id": id, "code": "RESTART"})
	if !strings.HasPrefix(text(res), "kernel restarted") || !structured[ExecuteResult](t, res).KernelRestarted {
		t.Fatalf("restart not said first: %q", text(res))
	}

	res = call(t, cs, "execute_in_session", map[string]any{"session_id": id, "code": "HTML"})
	out = structured[ExecuteResult](t, res)
	if h := out.Results[0].Data["text/html"].(string); len(h) != textCap || !out.Truncated || !strings.Contains(text(res), "more bytes cut") {
		t.Fatalf("html of %d bytes, truncated %v", len(h), out.Truncated)
	}

	res = call(t, cs, "execute_in_session", map[string]any{"session_id": id, "code": "SLEEP", "timeout": 1})
	toolError(t, res, "status timeout")
}

// TestBundleImage: what a kernel claims is an image is checked before it
// goes to the assistant as one.
func TestBundleImage(t *testing.T) {
	t.Parallel()
	pngB := testPNG(t)
	jpeg := []byte("\xff\xd8\xff\xe0\x00\x10JFIF\x00")
	tests := []struct {
		name string
		data map[string]any
		have int
		img  bool
		note string
	}{
		{name: "png", data: map[string]any{"image/png": base64.StdEncoding.EncodeToString(pngB)}, img: true},
		{name: "wrapped png", data: map[string]any{"image/png": wrapped(pngB)}, img: true},
		{name: "jpeg", data: map[string]any{"image/jpeg": base64.StdEncoding.EncodeToString(jpeg)}, img: true},
		{name: "png first", data: map[string]any{"image/jpeg": base64.StdEncoding.EncodeToString(jpeg), "image/png": base64.StdEncoding.EncodeToString(pngB)}, img: true},
		{name: "no image", data: map[string]any{"text/plain": "x"}},
		{name: "svg is not attached", data: map[string]any{"image/svg+xml": "<svg/>"}},
		{name: "not a string", data: map[string]any{"image/png": []any{1, 2}}, note: "not a base64 string"},
		{name: "bad base64", data: map[string]any{"image/png": "!!!"}, note: "not valid base64"},
		{name: "html labelled png", data: map[string]any{"image/png": base64.StdEncoding.EncodeToString([]byte("<html><script>x</script>"))}, note: "the data is text/html"},
		{name: "jpeg labelled png", data: map[string]any{"image/png": base64.StdEncoding.EncodeToString(jpeg)}, note: "the data is image/jpeg"},
		{name: "too large", data: map[string]any{"image/png": strings.Repeat("A", maxImageBytes/3*4+8192)}, note: "over"},
		{name: "too many", data: map[string]any{"image/png": base64.StdEncoding.EncodeToString(pngB)}, have: maxImages, note: "at most 8 images"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			img, note := bundleImage(tt.data, tt.have)
			if (img != nil) != tt.img || !strings.Contains(note, tt.note) || (tt.note == "" && note != "") {
				t.Fatalf("got image %v, note %q; want image %v, note with %q", img != nil, note, tt.img, tt.note)
			}
			if img != nil && http.DetectContentType(img.Data) != img.MIMEType {
				t.Fatalf("image of type %s holds %s", img.MIMEType, http.DetectContentType(img.Data))
			}
		})
	}
}

// TestCellContentCapsImages: a cell with more images than a result
// carries attaches maxImages and says what it left out.
func TestCellContentCapsImages(t *testing.T) {
	t.Parallel()
	var r ExecuteResult
	r.Status = sandbox.StatusOK
	for range maxImages + 2 {
		r.Results = append(r.Results, wire.CellResult{Type: "display_data", Data: map[string]any{"image/png": base64.StdEncoding.EncodeToString(testPNG(t))}})
	}
	res := cellContent(r)
	if len(res.Content) != 1+maxImages || strings.Count(text(res), "left out: at most 8 images") != 2 {
		t.Fatalf("%d contents, text %q", len(res.Content), text(res))
	}
}
