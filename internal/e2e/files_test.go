package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

func filesURL(id, param, value string) string {
	return "/v1/sessions/" + id + "/files?" + param + "=" + url.QueryEscape(value)
}

// putChunked uploads body without a Content-Length (chunked encoding).
func (s *server) putChunked(t *testing.T, key, path string, body io.Reader) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "PUT", s.url(path), io.NopCloser(body))
	req.Header.Set("X-RapidAPI-Key", key)
	resp, err := s.client().Do(req)
	if err != nil {
		t.Fatalf("chunked PUT %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func TestFilesAPI(t *testing.T) {
	const limit = 1 << 20
	// The JSON body limit is far below the file limit: uploads are not
	// bound by it.
	s := startServer(t, fmt.Sprintf("server:\n  max_body_bytes: 65536\nlimits:\n  max_file_bytes: %d\n", limit))
	key, other := s.key("PRO"), s.key("MEGA")
	id := s.session(key, "bash")

	// Round trip: binary content in, seen by code, and back out.
	content := make([]byte, limit) // exactly the limit
	_, _ = rand.Read(content)
	r := s.do("PUT", filesURL(id, "path", "/home/sandbox/data/in.bin"), key, content)
	if r.status != http.StatusOK {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	info := r.json(t)
	if info["name"] != "in.bin" || info["path"] != "/home/sandbox/data/in.bin" || info["size"] != float64(limit) || info["type"] != "file" || info["mode"] != "0644" || info["mtime"] == nil {
		t.Fatalf("put info: %v", info)
	}
	if out := s.exec(key, id, "wc -c < /home/sandbox/data/in.bin; stat -c %U /home/sandbox/data/in.bin"); out["stdout"] != fmt.Sprintf("%d\nsandbox\n", limit) {
		t.Fatalf("code sees: %v", out)
	}
	r = s.do("GET", filesURL(id, "path", "data/in.bin"), key, nil)
	if r.status != http.StatusOK || !bytes.Equal(r.body, content) {
		t.Fatalf("get: %d, %d bytes", r.status, len(r.body))
	}
	if ct, cl := r.header.Get("Content-Type"), r.header.Get("Content-Length"); ct != "application/octet-stream" || cl != fmt.Sprint(limit) {
		t.Fatalf("get headers: %q %q", ct, cl)
	}
	s.exec(key, id, "printf 'made by code' > /home/sandbox/out.txt; ln -s /etc/passwd /home/sandbox/pw; ln -s /tmp /home/sandbox/tmp; mkfifo /home/sandbox/fifo")
	r = s.do("GET", filesURL(id, "path", "/home/sandbox/out.txt"), key, nil)
	if r.status != http.StatusOK || string(r.body) != "made by code" {
		t.Fatalf("get out.txt: %d %q", r.status, r.body)
	}
	// A chunked upload works as well.
	r = s.putChunked(t, key, filesURL(id, "path", "chunked.txt"), strings.NewReader("sent in chunks"))
	if r.status != http.StatusOK || r.json(t)["size"] != float64(14) {
		t.Fatalf("chunked put: %d %s", r.status, r.body)
	}

	r = s.do("GET", filesURL(id, "dir", "/home/sandbox"), key, nil)
	if r.status != http.StatusOK {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	types := map[string]string{}
	for _, e := range r.json(t)["entries"].([]any) {
		m := e.(map[string]any)
		for _, f := range []string{"name", "size", "mode", "mtime", "type"} {
			if _, ok := m[f]; !ok {
				t.Fatalf("entry without %s: %v", f, m)
			}
		}
		types[m["name"].(string)] = m["type"].(string)
	}
	for name, typ := range map[string]string{"data": "dir", "out.txt": "file", "chunked.txt": "file", "pw": "symlink", "tmp": "symlink", "fifo": "fifo"} {
		if types[name] != typ {
			t.Errorf("listing: %s is %q, want %q (%v)", name, types[name], typ, types)
		}
	}

	// Hostile and bad requests get clear errors.
	for _, tc := range []struct {
		name, method, path string
		body               []byte
		status             int
		code               string
	}{
		{"dotdot", "GET", filesURL(id, "path", "../etc/passwd"), nil, 400, "invalid_request"},
		{"absolute elsewhere", "GET", filesURL(id, "path", "/etc/passwd"), nil, 400, "invalid_request"},
		{"escape", "GET", filesURL(id, "path", "/home/sandbox/../../etc/shadow"), nil, 400, "invalid_request"},
		{"NUL", "GET", filesURL(id, "path", "/home/sandbox/a\x00b"), nil, 400, "invalid_request"},
		{"put elsewhere", "PUT", filesURL(id, "path", "/tmp/x"), []byte("x"), 400, "invalid_request"},
		{"symlink out", "GET", filesURL(id, "path", "pw"), nil, 409, "symlink_refused"},
		{"put over symlink", "PUT", filesURL(id, "path", "pw"), []byte("x"), 409, "symlink_refused"},
		{"symlinked parent", "PUT", filesURL(id, "path", "tmp/planted"), []byte("x"), 409, "symlink_refused"},
		{"list symlinked dir", "GET", filesURL(id, "dir", "tmp"), nil, 409, "symlink_refused"},
		{"fifo", "GET", filesURL(id, "path", "fifo"), nil, 409, "not_regular_file"},
		{"directory as file", "GET", filesURL(id, "path", "data"), nil, 409, "not_regular_file"},
		{"file as directory", "GET", filesURL(id, "dir", "out.txt"), nil, 409, "not_a_directory"},
		{"missing file", "GET", filesURL(id, "path", "nope"), nil, 404, "file_not_found"},
		{"missing dir", "GET", filesURL(id, "dir", "nope"), nil, 404, "file_not_found"},
		{"no query", "GET", "/v1/sessions/" + id + "/files", nil, 400, "invalid_request"},
		{"path and dir", "GET", filesURL(id, "path", "a") + "&dir=b", nil, 400, "invalid_request"},
		{"empty path", "PUT", filesURL(id, "path", ""), []byte("x"), 400, "invalid_request"},
		{"oversize", "PUT", filesURL(id, "path", "big"), make([]byte, limit+1), 413, "too_large"},
		{"unknown session", "GET", filesURL("sess_aaaaaaaaaaaaaaaaaaaaaaaaaa", "path", "x"), nil, 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.body != nil {
				body = tc.body
			}
			start := time.Now()
			r := s.do(tc.method, tc.path, key, body)
			if r.status != tc.status || r.errCode(t) != tc.code {
				t.Fatalf("got %d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			if took := time.Since(start); took > 30*time.Second {
				t.Fatalf("took %v", took)
			}
		})
	}
	// Oversize without a Content-Length: stopped while streaming.
	r = s.putChunked(t, key, filesURL(id, "path", "big"), bytes.NewReader(make([]byte, limit+100<<10)))
	if r.status != http.StatusRequestEntityTooLarge || r.errCode(t) != "too_large" {
		t.Fatalf("chunked oversize: %d %s", r.status, r.body)
	}
	// An announced size over the limit is refused before any body is read.
	if status := rawStatus(t, s.addr, "PUT "+filesURL(id, "path", "big")+" HTTP/1.1\r\nHost: x\r\nX-RapidAPI-Key: "+key+"\r\nContent-Length: 999999999\r\n\r\n"); status != 413 {
		t.Fatalf("announced oversize: %d", status)
	}
	if out := s.exec(key, id, "ls -A /tmp /home/sandbox | grep -c -e planted -e big -e sbx-upload; true"); out["stdout"] != "0\n" {
		t.Fatalf("refused uploads left files: %v", out)
	}

	// Another key gets 404 on every files route and changes nothing.
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"PUT", filesURL(id, "path", "stolen"), []byte("x")},
		{"GET", filesURL(id, "path", "out.txt"), nil},
		{"GET", filesURL(id, "dir", "/home/sandbox"), nil},
	} {
		r := s.do(tc.method, tc.path, other, tc.body)
		if r.status != http.StatusNotFound || r.errCode(t) != "not_found" || strings.Contains(string(r.body), "made by code") {
			t.Errorf("%s %s as another key: %d %s", tc.method, tc.path, r.status, r.body)
		}
	}
	if r := s.do("GET", filesURL(id, "path", "out.txt"), "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("no key: %d %s", r.status, r.body)
	}
	if out := s.exec(key, id, "ls /home/sandbox/stolen 2>&1 >/dev/null | grep -c 'No such'"); out["stdout"] != "1\n" {
		t.Fatalf("another key wrote a file: %v", out)
	}
}

// rawStatus sends a raw HTTP request head and returns the reply's status.
func rawStatus(t *testing.T, addr, head string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
