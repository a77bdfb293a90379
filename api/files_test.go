package api

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// fakeFiles keeps files in memory for session "s1" of key id-PRO. Some
// names stand for what the executor refuses: sym, fifo, notdir, locked,
// ../x. Safe for concurrent use.
type fakeFiles struct {
	mu    sync.Mutex
	files map[string][]byte
	max   int64
	// truncated is what List reports of every folder.
	truncated bool
	lastWatch *fakeWatch
}

var fakeFileErrors = map[string]error{
	"sym":    sandbox.ErrSymlink,
	"fifo":   sandbox.ErrNotRegular,
	"notdir": sandbox.ErrNotDir,
	"locked": sandbox.ErrPermission,
	"../x":   sandbox.ErrInvalid,
}

func (f *fakeFiles) check(owner, id, path string) error {
	if owner != "id-PRO" || id != "s1" {
		return sandbox.ErrNotFound
	}
	if err, ok := fakeFileErrors[path]; ok {
		return fmt.Errorf("%w: %s", err, path)
	}
	return nil
}

func (f *fakeFiles) PutFile(ctx context.Context, owner, id, path string, r io.Reader, size int64) (sandbox.FileInfo, error) {
	if err := f.check(owner, id, path); err != nil {
		return sandbox.FileInfo{}, err
	}
	b, err := io.ReadAll(io.LimitReader(r, f.max+1))
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	if int64(len(b)) > f.max {
		return sandbox.FileInfo{}, fmt.Errorf("%w: over %d", sandbox.ErrTooLarge, f.max)
	}
	f.mu.Lock()
	f.files[path] = b
	f.mu.Unlock()
	return f.info(path, len(b)), nil
}

func (f *fakeFiles) info(path string, n int) sandbox.FileInfo {
	return sandbox.FileInfo{Name: path, Path: "/home/sandbox/" + path, Size: int64(n), Mode: "0644",
		ModTime: time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC), Type: "file"}
}

func (f *fakeFiles) GetFile(ctx context.Context, owner, id, path string) (sandbox.FileInfo, io.ReadCloser, error) {
	if err := f.check(owner, id, path); err != nil {
		return sandbox.FileInfo{}, nil, err
	}
	f.mu.Lock()
	b, ok := f.files[path]
	f.mu.Unlock()
	if !ok {
		return sandbox.FileInfo{}, nil, fmt.Errorf("%w: %s", sandbox.ErrFileNotFound, path)
	}
	return f.info(path, len(b)), io.NopCloser(bytes.NewReader(b)), nil
}

func (f *fakeFiles) List(ctx context.Context, owner, id, path string) (sandbox.Listing, error) {
	if err := f.check(owner, id, path); err != nil {
		return sandbox.Listing{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []sandbox.FileInfo{}
	for name, b := range f.files {
		out = append(out, f.info(name, len(b)))
	}
	return sandbox.Listing{Entries: out, Truncated: f.truncated}, nil
}

func (f *fakeFiles) MaxFileBytes() int64 { return f.max }

func TestFilesRoutes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	v := newSchemaValidator(t, doc)
	ff := &fakeFiles{files: map[string][]byte{}, max: 3 << 20}
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.Files = ff }) // MaxBodyBytes is 1 MiB
	ts := httptest.NewServer(srv)
	defer ts.Close()

	send := func(method, path, key string, body io.Reader, size int64) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, body)
		if size >= 0 && body != nil {
			req.ContentLength = size
		}
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	u := func(param, value string) string {
		return "/v1/sessions/s1/files?" + param + "=" + url.QueryEscape(value)
	}

	// An upload over the JSON body limit but within the file limit passes.
	big := bytes.Repeat([]byte{0, 1, 2, 3}, 2<<20/4)
	resp, body := send("PUT", u("path", "big.bin"), "key-PRO", bytes.NewReader(big), int64(len(big)))
	if resp.StatusCode != 200 {
		t.Fatalf("put 2 MiB: %d %s", resp.StatusCode, body)
	}
	if err := v.validate(map[string]any{"$ref": "#/components/schemas/FileInfo"}, body); err != nil {
		t.Fatalf("put reply: %v: %s", err, body)
	}
	// Chunked too.
	resp, body = send("PUT", u("path", "chunked"), "key-PRO", io.NopCloser(strings.NewReader("abc")), -1)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"size":3`) {
		t.Fatalf("chunked put: %d %s", resp.StatusCode, body)
	}
	resp, body = send("GET", u("path", "big.bin"), "key-PRO", nil, -1)
	if resp.StatusCode != 200 || !bytes.Equal(body, big) || resp.Header.Get("Content-Type") != "application/octet-stream" ||
		resp.Header.Get("Content-Length") != fmt.Sprint(len(big)) || resp.Header.Get("X-File-Mode") != "0644" {
		t.Fatalf("get: %d %v, %d bytes", resp.StatusCode, resp.Header, len(body))
	}
	resp, body = send("GET", u("dir", "/home/sandbox"), "key-PRO", nil, -1)
	if resp.StatusCode != 200 {
		t.Fatalf("list: %d %s", resp.StatusCode, body)
	}
	if err := v.validate(map[string]any{"$ref": "#/components/schemas/FileListing"}, body); err != nil {
		t.Fatalf("listing: %v: %s", err, body)
	}
	if !strings.Contains(string(body), `"truncated":false`) {
		t.Fatalf("listing without its truncated flag: %s", body)
	}
	ff.mu.Lock()
	ff.truncated = true
	ff.mu.Unlock()
	resp, body = send("GET", u("dir", "/home/sandbox"), "key-PRO", nil, -1)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"truncated":true`) {
		t.Fatalf("truncated listing: %d %s", resp.StatusCode, body)
	}
	ff.mu.Lock()
	ff.truncated = false
	ff.mu.Unlock()

	tests := []struct {
		name, method, path, key string
		body                    string
		status                  int
		code                    string
	}{
		{"no key", "GET", u("path", "a"), "", "", 401, "unauthenticated"},
		{"other key", "GET", u("path", "big.bin"), "key-MEGA", "", 404, "not_found"},
		{"other key put", "PUT", u("path", "x"), "key-MEGA", "x", 404, "not_found"},
		{"other key list", "GET", u("dir", "/home/sandbox"), "key-MEGA", "", 404, "not_found"},
		{"no query", "GET", "/v1/sessions/s1/files", "key-PRO", "", 400, "invalid_request"},
		{"both", "GET", u("path", "a") + "&dir=b", "key-PRO", "", 400, "invalid_request"},
		{"twice", "GET", u("path", "a") + "&path=b", "key-PRO", "", 400, "invalid_request"},
		{"empty", "GET", u("path", ""), "key-PRO", "", 400, "invalid_request"},
		{"put with dir", "PUT", u("dir", "a"), "key-PRO", "x", 400, "invalid_request"},
		{"traversal", "GET", u("path", "../x"), "key-PRO", "", 400, "invalid_request"},
		{"symlink", "GET", u("path", "sym"), "key-PRO", "", 409, "symlink_refused"},
		{"fifo", "GET", u("path", "fifo"), "key-PRO", "", 409, "not_regular_file"},
		{"not a dir", "GET", u("dir", "notdir"), "key-PRO", "", 409, "not_a_directory"},
		{"permission", "PUT", u("path", "locked"), "key-PRO", "x", 403, "permission_denied"},
		{"missing", "GET", u("path", "missing"), "key-PRO", "", 404, "file_not_found"},
		{"too large streamed", "PUT", u("path", "huge"), "key-PRO", strings.Repeat("x", 3<<20+1), 413, "too_large"},
	}
	for _, tc := range tests {
		var rd io.Reader
		size := int64(-1)
		if tc.body != "" {
			rd, size = strings.NewReader(tc.body), int64(len(tc.body))
		}
		resp, body := send(tc.method, tc.path, tc.key, rd, size)
		if resp.StatusCode != tc.status || !strings.Contains(string(body), `"code":"`+tc.code+`"`) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, resp.StatusCode, body, tc.status, tc.code)
			continue
		}
		if err := v.validate(map[string]any{"$ref": "#/components/schemas/Error"}, body); err != nil {
			t.Errorf("%s: error body: %v", tc.name, err)
		}
	}
	// An announced size over the limit is refused before the body is read.
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: x\r\nX-API-Key: key-PRO\r\nContent-Length: %d\r\n\r\n", u("path", "huge"), 1<<40)
	raw, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw.Body.Close()
	if raw.StatusCode != 413 {
		t.Fatalf("announced oversize: %d", raw.StatusCode)
	}

	// A chunked upload of 32 MiB against the 3 MiB limit, sent whole
	// before the reply is read, as urllib3 sends one. The client reads the
	// 413; a server that stopped reading and closed would reset the
	// connection under its writes.
	c2, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "PUT %s HTTP/1.1\r\nHost: x\r\nX-API-Key: key-PRO\r\nTransfer-Encoding: chunked\r\n\r\n", u("path", "huge"))
	chunk := append(fmt.Appendf(nil, "%x\r\n", 64<<10), append(bytes.Repeat([]byte("x"), 64<<10), "\r\n"...)...)
	_ = c2.SetWriteDeadline(time.Now().Add(30 * time.Second))
	for sent := 0; sent < 32<<20; sent += 64 << 10 {
		if _, err := c2.Write(chunk); err != nil {
			t.Fatalf("after %d bytes of a chunked upload over the limit: %v", sent, err)
		}
	}
	if _, err := io.WriteString(c2, "0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c2)
	_ = c2.SetReadDeadline(time.Now().Add(30 * time.Second))
	raw, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("chunked oversize: %v", err)
	}
	b, _ := io.ReadAll(raw.Body)
	raw.Body.Close()
	if raw.StatusCode != 413 || !strings.Contains(string(b), `"code":"too_large"`) {
		t.Fatalf("chunked oversize: %d %s", raw.StatusCode, b)
	}
}
