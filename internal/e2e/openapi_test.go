package e2e

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// TestOpenAPIRealServer walks the API of the real server (runsc, SQLite,
// the built binary) as a client would and checks each reply against
// api/openapi.json: the harness's do validates every reply of every e2e
// test; this test makes sure each route and its common errors are among
// them, and that the check itself fails a reply the document does not
// describe.
func TestOpenAPIRealServer(t *testing.T) {
	s := startServer(t, "")
	pro, basic := s.key("PRO"), s.key("BASIC")
	type call struct {
		name, method, path, key string
		body                    any
		accept                  string
		status                  int // 0: any documented status
	}
	sid := ""
	for _, c := range []call{
		{name: "healthz", method: "GET", path: "/healthz", status: 200},
		{name: "readyz", method: "GET", path: "/readyz"}, // 200 or 503 (no OSV data here): either is checked
		{name: "openapi", method: "GET", path: "/openapi.json", status: 200},
		{name: "runtimes", method: "GET", path: "/v1/runtimes", key: basic, status: 200},
		{name: "no key", method: "GET", path: "/v1/runtimes", status: 401},
		{name: "unknown key", method: "GET", path: "/v1/sessions", key: "nope", status: 401},
		{name: "execute", method: "POST", path: "/v1/execute", key: basic, body: map[string]any{"language": "python3", "code": "print(1)"}, status: 200},
		{name: "execute error", method: "POST", path: "/v1/execute", key: basic, body: map[string]any{"language": "bash", "code": "exit 3"}, status: 200},
		{name: "execute timeout", method: "POST", path: "/v1/execute", key: basic, body: map[string]any{"language": "bash", "code": "sleep 5", "timeout": 0.5}, status: 200},
		{name: "execute compile error", method: "POST", path: "/v1/execute", key: basic, body: map[string]any{"language": "c", "code": "int main( {"}, status: 200},
		{name: "execute stream", method: "POST", path: "/v1/execute", key: basic, body: map[string]any{"language": "bash", "code": "echo a; echo b >&2", "stream": true}, status: 200},
		{name: "execute unknown language", method: "POST", path: "/v1/execute", key: basic, body: map[string]any{"language": "cobol", "code": "x"}, status: 400},
		{name: "execute bad json", method: "POST", path: "/v1/execute", key: basic, body: []byte(`{"language":`), status: 400},
		{name: "execute unknown field", method: "POST", path: "/v1/execute", key: basic, body: map[string]any{"language": "bash", "code": "true", "x": 1}, status: 400},
		{name: "basic session", method: "POST", path: "/v1/sessions", key: basic, body: map[string]any{"language": "python3"}, status: 403},
		{name: "create session", method: "POST", path: "/v1/sessions", key: pro, body: map[string]any{"language": "bash", "idle_ttl": 60}, status: 201},
		{name: "list sessions", method: "GET", path: "/v1/sessions", key: pro, status: 200},
		{name: "get session", method: "GET", path: "/v1/sessions/{sid}", key: pro, status: 200},
		{name: "session execute", method: "POST", path: "/v1/sessions/{sid}/execute", key: pro, body: map[string]any{"code": "echo hi > f.txt; cat f.txt", "env": map[string]string{"A": "b"}}, status: 200},
		{name: "session execute SSE", method: "POST", path: "/v1/sessions/{sid}/execute", key: pro, body: map[string]any{"code": "echo 4"}, accept: "text/event-stream", status: 200},
		{name: "session execute language", method: "POST", path: "/v1/sessions/{sid}/execute", key: pro, body: map[string]any{"code": "1", "language": "bash"}, status: 400},
		{name: "file get", method: "GET", path: "/v1/sessions/{sid}/files?dir=.", key: pro, status: 200},
		{name: "usage", method: "GET", path: "/v1/usage", key: pro, status: 200},
		{name: "delete session", method: "DELETE", path: "/v1/sessions/{sid}", key: pro, status: 204},
		{name: "delete again", method: "DELETE", path: "/v1/sessions/{sid}", key: pro, status: 404},
		{name: "no route", method: "GET", path: "/v1/nothing", key: pro, status: 404},
	} {
		path := strings.ReplaceAll(c.path, "{sid}", sid)
		var r reply
		if c.accept != "" {
			r = s.doAccept(c.method, path, c.key, c.body, c.accept)
		} else {
			r = s.do(c.method, path, c.key, c.body) // validates the reply
		}
		if c.status != 0 && r.status != c.status {
			t.Errorf("%s: %s %s = %d, want %d: %s", c.name, c.method, path, r.status, c.status, r.body)
			continue
		}
		if c.name == "create session" {
			sid, _ = r.json(t)["id"].(string)
		}
	}

	// The check is not a no-op: a reply with a field the document does not
	// name, or a status it does not list, fails.
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}}
	good := s.do("POST", "/v1/execute", basic, map[string]any{"language": "bash", "code": "echo ok"})
	if err := checkOpenAPI("POST", "/v1/execute", resp, good.body); err != nil {
		t.Fatalf("a real reply fails the check: %v", err)
	}
	renamed := bytes.Replace(good.body, []byte(`"exit_code"`), []byte(`"exitCode"`), 1)
	if err := checkOpenAPI("POST", "/v1/execute", resp, renamed); err == nil {
		t.Errorf("a reply with exit_code renamed passes the check: %s", renamed)
	}
	resp.StatusCode = 418
	if err := checkOpenAPI("POST", "/v1/execute", resp, good.body); err == nil {
		t.Error("an undocumented status passes the check")
	}
}
