package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// The fake's file operations work on its map; "dir" stands for a folder.

func (f *fakeFiles) Stat(ctx context.Context, owner, id, path string) (sandbox.FileInfo, error) {
	if err := f.check(owner, id, path); err != nil {
		return sandbox.FileInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[path]
	if !ok {
		return sandbox.FileInfo{}, fmt.Errorf("%w: %s", sandbox.ErrFileNotFound, path)
	}
	return f.info(path, len(b)), nil
}

func (f *fakeFiles) MakeDir(ctx context.Context, owner, id, path string, parents bool) (sandbox.FileInfo, error) {
	if err := f.check(owner, id, path); err != nil {
		return sandbox.FileInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.files[path]; ok {
		return sandbox.FileInfo{}, fmt.Errorf("%w: %s", sandbox.ErrFileExists, path)
	}
	if strings.Contains(path, "/") && !parents {
		return sandbox.FileInfo{}, fmt.Errorf("%w: parent of %s", sandbox.ErrFileNotFound, path)
	}
	f.files[path] = nil
	fi := f.info(path, 0)
	fi.Type = "dir"
	return fi, nil
}

func (f *fakeFiles) Move(ctx context.Context, owner, id, from, to string, overwrite bool) (sandbox.FileInfo, error) {
	for _, p := range []string{from, to} {
		if err := f.check(owner, id, p); err != nil {
			return sandbox.FileInfo{}, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[from]
	if !ok {
		return sandbox.FileInfo{}, fmt.Errorf("%w: %s", sandbox.ErrFileNotFound, from)
	}
	if _, exists := f.files[to]; exists && !overwrite {
		return sandbox.FileInfo{}, fmt.Errorf("%w: %s", sandbox.ErrFileExists, to)
	}
	delete(f.files, from)
	f.files[to] = b
	return f.info(to, len(b)), nil
}

func (f *fakeFiles) Remove(ctx context.Context, owner, id, path string) error {
	if err := f.check(owner, id, path); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.files[path]; !ok {
		return fmt.Errorf("%w: %s", sandbox.ErrFileNotFound, path)
	}
	delete(f.files, path)
	return nil
}

func (f *fakeFiles) ListDepth(ctx context.Context, owner, id, path string, depth int) (sandbox.Listing, error) {
	l, err := f.List(ctx, owner, id, path)
	if err == nil && depth > 1 {
		l.Entries = append(l.Entries, sandbox.FileInfo{Name: "deep", Path: "/home/sandbox/d/deep", Mode: "0644", Type: "symlink", Target: "/etc"})
	}
	return l, err
}

// TestFileOpsRoutes: each operation's status, body and error code, every
// reply checked against the OpenAPI document; bad input is a 400 before
// the executor is asked.
func TestFileOpsRoutes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	v := newSchemaValidator(t, doc)
	ff := &fakeFiles{files: map[string][]byte{"a.txt": []byte("abc")}, max: 1 << 20}
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.Files = ff })
	ts := httptest.NewServer(srv)
	defer ts.Close()
	type reply struct {
		status int
		body   map[string]any
	}
	do := func(method, path, key, body string) reply {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, ts.URL+path, rd)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if len(b) > 0 {
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("%s %s: %d %q", method, path, resp.StatusCode, b)
			}
		}
		schema := "Error"
		switch {
		case resp.StatusCode == http.StatusNoContent:
			schema = ""
		case resp.StatusCode < 300 && strings.Contains(path, "dir="):
			schema = "FileListing"
		case resp.StatusCode < 300:
			schema = "FileInfo"
		}
		if schema != "" {
			if err := v.validate(map[string]any{"$ref": "#/components/schemas/" + schema}, b); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, b)
			}
		}
		return reply{resp.StatusCode, m}
	}
	code := func(r reply) string {
		e, _ := r.body["error"].(map[string]any)
		c, _ := e["code"].(string)
		return c
	}
	tests := []struct {
		name, method, path, body string
		key                      string
		status                   int
		code                     string
	}{
		{"stat", "GET", "/v1/sessions/s1/files/stat?path=a.txt", "", "pro", 200, ""},
		{"stat missing", "GET", "/v1/sessions/s1/files/stat?path=zz", "", "pro", 404, "file_not_found"},
		{"stat symlink", "GET", "/v1/sessions/s1/files/stat?path=sym", "", "pro", 409, "symlink_refused"},
		{"stat bad path", "GET", "/v1/sessions/s1/files/stat?path=../x", "", "pro", 400, "invalid_request"},
		{"stat no path", "GET", "/v1/sessions/s1/files/stat", "", "pro", 400, "invalid_request"},
		{"stat other session", "GET", "/v1/sessions/nope/files/stat?path=a.txt", "", "pro", 404, "not_found"},
		{"stat no key", "GET", "/v1/sessions/s1/files/stat?path=a.txt", "", "", 401, "unauthenticated"},
		{"mkdir", "POST", "/v1/sessions/s1/files/mkdir", `{"path":"d"}`, "pro", 201, ""},
		{"mkdir exists", "POST", "/v1/sessions/s1/files/mkdir", `{"path":"a.txt"}`, "pro", 409, "file_exists"},
		{"mkdir no parents", "POST", "/v1/sessions/s1/files/mkdir", `{"path":"x/y"}`, "pro", 404, "file_not_found"},
		{"mkdir parents", "POST", "/v1/sessions/s1/files/mkdir", `{"path":"x/y","parents":true}`, "pro", 201, ""},
		{"mkdir no path", "POST", "/v1/sessions/s1/files/mkdir", `{}`, "pro", 400, "invalid_request"},
		{"mkdir bad json", "POST", "/v1/sessions/s1/files/mkdir", `{"path":`, "pro", 400, "invalid_json"},
		{"move", "POST", "/v1/sessions/s1/files/move", `{"from":"a.txt","to":"b.txt"}`, "pro", 200, ""},
		{"move exists", "POST", "/v1/sessions/s1/files/move", `{"from":"b.txt","to":"d"}`, "pro", 409, "file_exists"},
		{"move overwrite", "POST", "/v1/sessions/s1/files/move", `{"from":"b.txt","to":"d","overwrite":true}`, "pro", 200, ""},
		{"move onto symlink", "POST", "/v1/sessions/s1/files/move", `{"from":"d","to":"sym","overwrite":true}`, "pro", 409, "symlink_refused"},
		{"move outside", "POST", "/v1/sessions/s1/files/move", `{"from":"d","to":"../x"}`, "pro", 400, "invalid_request"},
		{"move no to", "POST", "/v1/sessions/s1/files/move", `{"from":"d"}`, "pro", 400, "invalid_request"},
		{"list depth", "GET", "/v1/sessions/s1/files?dir=d&depth=3", "", "pro", 200, ""},
		{"list depth 0", "GET", "/v1/sessions/s1/files?dir=d&depth=0", "", "pro", 400, "invalid_request"},
		{"list depth 65", "GET", "/v1/sessions/s1/files?dir=d&depth=65", "", "pro", 400, "invalid_request"},
		{"list depth word", "GET", "/v1/sessions/s1/files?dir=d&depth=two", "", "pro", 400, "invalid_request"},
		{"list depth twice", "GET", "/v1/sessions/s1/files?dir=d&depth=2&depth=3", "", "pro", 400, "invalid_request"},
		{"depth with path", "GET", "/v1/sessions/s1/files?path=d&depth=2", "", "pro", 400, "invalid_request"},
		{"remove", "DELETE", "/v1/sessions/s1/files?path=d", "", "pro", 204, ""},
		{"remove again", "DELETE", "/v1/sessions/s1/files?path=d", "", "pro", 404, "file_not_found"},
		{"remove bad path", "DELETE", "/v1/sessions/s1/files?path=../x", "", "pro", 400, "invalid_request"},
		{"remove no path", "DELETE", "/v1/sessions/s1/files?dir=d", "", "pro", 400, "invalid_request"},
	}
	keys := map[string]string{"pro": "key-PRO", "": ""}
	for _, tc := range tests {
		r := do(tc.method, tc.path, keys[tc.key], tc.body)
		if r.status != tc.status || (tc.code != "" && code(r) != tc.code) {
			t.Errorf("%s: %d %v, want %d %s", tc.name, r.status, r.body, tc.status, tc.code)
		}
	}
	// The listing with a depth carries a symlink's target.
	r := do("GET", "/v1/sessions/s1/files?dir=x&depth=2", "key-PRO", "")
	ents, _ := r.body["entries"].([]any)
	found := false
	for _, e := range ents {
		m := e.(map[string]any)
		if m["name"] == "deep" && m["target"] == "/etc" && m["path"] == "/home/sandbox/d/deep" {
			found = true
		}
	}
	if !found {
		t.Fatalf("deep listing: %v", r.body)
	}
}

// fakeWatch sends its events in one batch, then ends as the folder went.
type fakeWatch struct {
	evs    []sandbox.FileEvent
	closed chan struct{}
}

func (w *fakeWatch) Next(ctx context.Context) ([]sandbox.FileEvent, error) {
	if w.evs != nil {
		evs := w.evs
		w.evs = nil
		return evs, nil
	}
	return nil, io.EOF
}

func (w *fakeWatch) Close() error {
	select {
	case <-w.closed:
	default:
		close(w.closed)
	}
	return nil
}

func (f *fakeFiles) Watch(ctx context.Context, owner, id, path string, recursive bool) (sandbox.FileWatch, error) {
	if err := f.check(owner, id, path); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastWatch = &fakeWatch{evs: []sandbox.FileEvent{{Path: "/home/sandbox/" + path + "/x", Op: "create"}}, closed: make(chan struct{})}
	return f.lastWatch, nil
}

// TestWatchRoute: a watch is an SSE stream (start, change, end) and is
// closed at its end; refusals before it runs are JSON errors.
func TestWatchRoute(t *testing.T) {
	t.Parallel()
	ff := &fakeFiles{files: map[string][]byte{}, max: 1 << 20}
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.Files = ff })
	ts := httptest.NewServer(srv)
	defer ts.Close()
	get := func(q string) (*http.Response, string) {
		req, _ := http.NewRequest("GET", ts.URL+"/v1/sessions/s1/files/watch?"+q, nil)
		req.Header.Set("X-API-Key", "key-PRO")
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("path=d&recursive=true")
	want := "event: start\ndata: {}\n\nevent: change\ndata: {\"path\":\"/home/sandbox/d/x\",\"op\":\"create\"}\n\nevent: end\ndata: {\"reason\":\"removed\"}\n\n"
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || body != want {
		t.Fatalf("watch: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	ff.mu.Lock()
	closed := ff.lastWatch.closed
	ff.mu.Unlock()
	select {
	case <-closed:
	default:
		t.Fatal("the watch was not closed")
	}
	for _, c := range []struct {
		q      string
		status int
		code   string
	}{
		{"path=sym", 409, "symlink_refused"},
		{"path=../x", 400, "invalid_request"},
		{"", 400, "invalid_request"},
		{"path=d&recursive=yes", 400, "invalid_request"},
		{"path=d&recursive=true&recursive=false", 400, "invalid_request"},
	} {
		resp, body := get(c.q)
		if resp.StatusCode != c.status || !strings.Contains(body, `"code":"`+c.code+`"`) {
			t.Errorf("%q: %d %s", c.q, resp.StatusCode, body)
		}
	}
}
