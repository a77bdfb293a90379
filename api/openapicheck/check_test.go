package openapicheck_test

import (
	"errors"
	"testing"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/api/openapicheck"
)

func TestReply(t *testing.T) {
	t.Parallel()
	c, err := openapicheck.New(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	const okBody = `{"execution_id":"e1","stdout":"1\n","stderr":"","exit_code":0,"signal":"","status":"ok","duration_ms":3,"compile_ms":0,"run_ms":3,"truncated":false}`
	const errBody = `{"error":{"code":"no_route","message":"no route","request_id":"r1"}}`
	const procBody = `{"id":"7","pid":7,"cmd":"bash","args":[],"pty":true,"stdin":false,"state":"exited","exit_code":0,"started_at":"2026-01-01T00:00:00Z","ended_at":"2026-01-01T00:00:01Z","output_bytes":5}`
	for _, tc := range []struct {
		name, method, path, ct, body string
		status                       int
		ok, undocumented             bool
	}{
		{name: "execute result", method: "POST", path: "/v1/execute", status: 200, ct: "application/json", body: okBody, ok: true},
		{name: "renamed field", method: "POST", path: "/v1/execute", status: 200, ct: "application/json", body: `{"exitCode":0}`},
		{name: "unknown status value", method: "POST", path: "/v1/execute", status: 200, ct: "application/json",
			body: `{"stdout":"","stderr":"","exit_code":0,"signal":"","status":"failed","duration_ms":0,"compile_ms":0,"run_ms":0,"truncated":false}`},
		{name: "undocumented status", method: "POST", path: "/v1/execute", status: 418, ct: "application/json", body: okBody, undocumented: true},
		{name: "undocumented method", method: "PATCH", path: "/v1/execute", status: 200, ct: "application/json", body: okBody, undocumented: true},
		{name: "undocumented content type", method: "POST", path: "/v1/execute", status: 200, ct: "text/plain", body: "x", undocumented: true},
		{name: "catch-all 404", method: "GET", path: "/v1/nothing", status: 404, ct: "application/json", body: errBody, ok: true},
		{name: "stream", method: "POST", path: "/v1/execute", status: 200, ct: "text/event-stream",
			body: "event: stdout\ndata: {\"data\":\"1\\n\"}\n\n: keepalive\n\nevent: result\ndata: " + okBody + "\n\n", ok: true},
		{name: "stream with a display", method: "POST", path: "/v1/execute", status: 200, ct: "text/event-stream",
			body: "event: display\ndata: {\"type\":\"display_data\",\"is_main_result\":false,\"data\":{\"text/plain\":\"x\"}}\n\nevent: result\ndata: " + okBody + "\n\n", ok: true},
		{name: "stream with a bad display", method: "POST", path: "/v1/execute", status: 200, ct: "text/event-stream",
			body: "event: display\ndata: {\"type\":\"display_data\"}\n\nevent: result\ndata: " + okBody + "\n\n"},
		{name: "stream without result", method: "POST", path: "/v1/execute", status: 200, ct: "text/event-stream",
			body: "event: stdout\ndata: {\"data\":\"1\\n\"}\n\n"},
		{name: "path param", method: "GET", path: "/v1/sessions/sess_x", status: 404, ct: "application/json", body: errBody, ok: true},
		{name: "process output", method: "GET", path: "/v1/sessions/sess_x/processes/7/output", status: 200, ct: "text/event-stream",
			body: "id: 3\nevent: dropped\ndata: {\"dropped\":3,\"offset\":3}\n\nid: 5\nevent: pty\ndata: {\"data\":\"ab\",\"offset\":3}\n\n: keepalive\n\nevent: exit\ndata: " + procBody + "\n\n", ok: true},
		{name: "process output still running", method: "GET", path: "/v1/sessions/sess_x/processes/7/output", status: 200, ct: "text/event-stream",
			body: "id: 2\nevent: stdout\ndata: {\"data\":\"ab\",\"offset\":0}\n\n", ok: true},
		{name: "process output chunk without id", method: "GET", path: "/v1/sessions/sess_x/processes/7/output", status: 200, ct: "text/event-stream",
			body: "event: stdout\ndata: {\"data\":\"ab\",\"offset\":0}\n\n"},
		{name: "process output after exit", method: "GET", path: "/v1/sessions/sess_x/processes/7/output", status: 200, ct: "text/event-stream",
			body: "event: exit\ndata: " + procBody + "\n\nid: 2\nevent: stdout\ndata: {\"data\":\"ab\",\"offset\":0}\n\n"},
		{name: "process exit not a process", method: "GET", path: "/v1/sessions/sess_x/processes/7/output", status: 200, ct: "text/event-stream",
			body: "event: exit\ndata: {\"pid\":\"7\"}\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := c.Reply(tc.method, tc.path, tc.status, tc.ct, []byte(tc.body))
			switch {
			case tc.ok && err != nil:
				t.Fatalf("valid reply refused: %v", err)
			case !tc.ok && err == nil:
				t.Fatal("invalid reply accepted")
			case tc.undocumented && !errors.Is(err, openapicheck.ErrUndocumented):
				t.Fatalf("err %v, want ErrUndocumented", err)
			}
		})
	}
}
