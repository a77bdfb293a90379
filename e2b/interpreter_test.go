package e2b

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// ciHeaders are the code interpreter's headers: /execute carries
// X-Access-Token, the context calls only E2B-Traffic-Access-Token.
func ciHeaders(id, token string) map[string]string {
	return map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49999", "X-Access-Token": token, "Content-Type": "application/json"}
}

func trafficHeaders(id, token string) map[string]string {
	return map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49999", "E2B-Traffic-Access-Token": token, "Content-Type": "application/json"}
}

// ndjson splits a reply into its lines as JSON objects.
func ndjson(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v (body %s)", l, err, body)
		}
		out = append(out, m)
	}
	return out
}

func TestInterpreterTemplateIsAKernelSession(t *testing.T) {
	g := newRig(t)
	ci := g.create("sk_a", map[string]any{"templateID": "code-interpreter-v1"})
	base := g.create("sk_a", map[string]any{"templateID": "base"})
	g.api.mu.Lock()
	kci, kbase := g.api.sessions[ci.SandboxID].kernel, g.api.sessions[base.SandboxID].kernel
	g.api.mu.Unlock()
	if !kci || kbase {
		t.Fatalf("kernel: code-interpreter-v1 %v, base %v", kci, kbase)
	}
	if ci.TrafficAccessToken == nil || *ci.TrafficAccessToken != ci.EnvdAccessToken {
		t.Fatalf("the traffic token must be the access token (the SDK sends it on context calls): %+v", ci)
	}
	// A base sandbox has no kernel: its cells are refused, clearly.
	r := g.do("POST", "/e2b/sandbox/execute", strings.NewReader(`{"code":"1"}`), ciHeaders(base.SandboxID, base.EnvdAccessToken))
	wantE2BError(t, "a cell in a base sandbox", r, http.StatusBadRequest)
	if !strings.Contains(string(r.body), "code-interpreter-v1") {
		t.Errorf("the refusal names the template to use: %s", r.body)
	}
	wantE2BError(t, "restart in a base sandbox", g.do("POST", "/e2b/sandbox/contexts/default/restart", nil, trafficHeaders(base.SandboxID, base.EnvdAccessToken)), http.StatusBadRequest)
}

func TestInterpreterExecuteTranslatesTheStream(t *testing.T) {
	g := newRig(t)
	sb := g.create("sk_a", map[string]any{"templateID": "code-interpreter-v1"})
	g.api.cell = "event: stdout\ndata: {\"data\":\"hi\\n\"}\n\n" +
		": keepalive\n\n" +
		"event: stderr\ndata: {\"data\":\"warn\\n\"}\n\n" +
		"event: display\ndata: {\"type\":\"display_data\",\"is_main_result\":false,\"data\":{\"image/png\":\"iVBORw0KGgo=\",\"text/plain\":\"<Figure>\",\"application/vnd.custom\":\"c\"}}\n\n" +
		"event: result\ndata: {\"status\":\"error\",\"stdout\":\"hi\\n\",\"stderr\":\"warn\\n\",\"kernel_restarted\":true," +
		"\"results\":[{\"type\":\"display_data\",\"is_main_result\":false,\"data\":{\"image/png\":\"iVBORw0KGgo=\"}}," +
		"{\"type\":\"execute_result\",\"is_main_result\":true,\"data\":{\"text/html\":\"<b>x</b>\",\"application/json\":{\"a\":1}}}]," +
		"\"error\":{\"name\":\"ZeroDivisionError\",\"value\":\"division by zero\",\"traceback\":[\"Traceback\",\"ZeroDivisionError: division by zero\"]}}\n\n"
	r := g.do("POST", "/e2b/sandbox/execute", strings.NewReader(`{"code":"1/0","language":"python","context_id":"default"}`), ciHeaders(sb.SandboxID, sb.EnvdAccessToken))
	if r.status != http.StatusOK || r.hdr.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("execute: %d %s %s", r.status, r.hdr, r.body)
	}
	g.api.mu.Lock()
	code := g.api.code
	g.api.mu.Unlock()
	if code != "1/0" {
		t.Fatalf("the cell ran %q", code)
	}
	lines := ndjson(t, r.body)
	want := []string{
		`{"text":"hi\n","type":"stdout"}`,
		`{"text":"warn\n","type":"stderr"}`,
		`{"application/vnd.custom":"c","is_main_result":false,"png":"iVBORw0KGgo=","text":"\u003cFigure\u003e","type":"result"}`,
		`{"text":"` + strings.TrimSuffix(kernelRestartedNote, "\n") + `\n","type":"stderr"}`,
		// The main result came only in the reply: sent once, at the end.
		`{"html":"\u003cb\u003ex\u003c/b\u003e","is_main_result":true,"json":{"a":1},"type":"result"}`,
		`{"name":"ZeroDivisionError","traceback":"Traceback\nZeroDivisionError: division by zero","type":"error","value":"division by zero"}`,
		`{"type":"end_of_execution"}`,
	}
	if len(lines) != len(want) {
		t.Fatalf("lines:\n%s\nwant %d", r.body, len(want))
	}
	for i, l := range lines {
		b, _ := json.Marshal(l)
		if string(b) != want[i] {
			t.Errorf("line %d: %s\nwant     %s", i, b, want[i])
		}
	}

	// A cell the kernel ended by a limit, without an exception, still
	// says so as the execution's error; a /v1 stream that fails midway
	// or stops without a result ends with an error line, never silently.
	for _, c := range []struct{ name, cell, wantName string }{
		{"timeout", "event: result\ndata: {\"status\":\"timeout\"}\n\n", "TimeoutError"},
		{"oom", "event: result\ndata: {\"status\":\"oom\"}\n\n", "MemoryError"},
		{"output limit", "event: result\ndata: {\"status\":\"output_limit\",\"truncated\":true}\n\n", "OutputLimitError"},
		{"stream error", "event: stdout\ndata: {\"data\":\"a\"}\n\nevent: error\ndata: {\"code\":\"internal\",\"message\":\"boom\"}\n\n", "SandboxError"},
		{"cut short", "event: stdout\ndata: {\"data\":\"a\"}\n\n", "SandboxError"},
		{"unreadable result", "event: result\ndata: {nope\n\n", "SandboxError"},
	} {
		g.api.mu.Lock()
		g.api.cell = c.cell
		g.api.mu.Unlock()
		r := g.do("POST", "/e2b/sandbox/execute", strings.NewReader(`{"code":"x"}`), ciHeaders(sb.SandboxID, sb.EnvdAccessToken))
		lines := ndjson(t, r.body)
		n := len(lines)
		if r.status != http.StatusOK || n < 2 || lines[n-1]["type"] != "end_of_execution" || lines[n-2]["type"] != "error" || lines[n-2]["name"] != c.wantName {
			t.Errorf("%s: %d %s", c.name, r.status, r.body)
		}
	}
}

func TestInterpreterRefusals(t *testing.T) {
	g := newRig(t)
	sb := g.create("sk_a", map[string]any{"templateID": "code-interpreter-v1"})
	other := g.create("sk_a", map[string]any{"templateID": "code-interpreter-v1"})
	hdr := ciHeaders(sb.SandboxID, sb.EnvdAccessToken)
	for _, c := range []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
	}{
		{"no code", `{}`, hdr, http.StatusBadRequest},
		{"not JSON", `{"code":`, hdr, http.StatusBadRequest},
		{"code not a string", `{"code":1}`, hdr, http.StatusBadRequest},
		{"a language without a kernel", `{"code":"1","language":"r"}`, hdr, http.StatusBadRequest},
		{"an unknown context", `{"code":"1","context_id":"ctx-2"}`, hdr, http.StatusNotFound},
		{"envs per cell", `{"code":"1","env_vars":{"A":"b"}}`, hdr, http.StatusBadRequest},
		{"over 4 MiB", `{"code":"` + strings.Repeat("x", maxCode) + `"}`, hdr, http.StatusRequestEntityTooLarge},
		{"no token", `{"code":"1"}`, map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49999"}, http.StatusUnauthorized},
		{"another sandbox's token", `{"code":"1"}`, ciHeaders(sb.SandboxID, other.EnvdAccessToken), http.StatusUnauthorized},
		{"another sandbox's traffic token", `{"code":"1"}`, trafficHeaders(sb.SandboxID, other.EnvdAccessToken), http.StatusUnauthorized},
		{"unknown sandbox", `{"code":"1"}`, ciHeaders("sess_999", sb.EnvdAccessToken), http.StatusBadGateway},
	} {
		wantE2BError(t, c.name, g.do("POST", "/e2b/sandbox/execute", strings.NewReader(c.body), c.hdr), c.status)
	}
	g.api.mu.Lock()
	code := g.api.code
	g.api.mu.Unlock()
	if code != "" {
		t.Fatalf("a refused cell ran: %q", code)
	}
	// envd's paths are not the interpreter's, and the reverse.
	wantE2BError(t, "envd's files on 49999", g.do("GET", "/e2b/sandbox/files?path=a", nil, hdr), http.StatusNotFound)
	envd := sandboxHeaders(sb.SandboxID, sb.EnvdAccessToken)
	wantE2BError(t, "execute on envd's port", g.do("POST", "/e2b/sandbox/execute", strings.NewReader(`{"code":"1"}`), envd), http.StatusNotFound)
	// The session gone: E2B's proxy answer (502), which the SDK raises
	// as its TimeoutError.
	g.api.mu.Lock()
	delete(g.api.sessions, sb.SandboxID)
	g.api.mu.Unlock()
	wantE2BError(t, "a cell of a gone session", g.do("POST", "/e2b/sandbox/execute", strings.NewReader(`{"code":"1"}`), hdr), http.StatusBadGateway)
}

func TestInterpreterContexts(t *testing.T) {
	g := newRig(t)
	sb := g.create("sk_a", map[string]any{"templateID": "code-interpreter-v1"})
	hdr := trafficHeaders(sb.SandboxID, sb.EnvdAccessToken)
	r := g.do("GET", "/e2b/sandbox/contexts", nil, hdr)
	var list []codeContext
	if err := json.Unmarshal(r.body, &list); r.status != http.StatusOK || err != nil || len(list) != 1 || list[0] != theContext() {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	for _, body := range []string{`{}`, `{"language":"python"}`, `{"language":"Python","cwd":"/home/user/"}`} {
		r := g.do("POST", "/e2b/sandbox/contexts", strings.NewReader(body), hdr)
		var c codeContext
		if err := json.Unmarshal(r.body, &c); r.status != http.StatusOK || err != nil || c != theContext() {
			t.Errorf("create %s: %d %s", body, r.status, r.body)
		}
	}
	for _, c := range []struct{ body string }{{`{"language":"javascript"}`}, {`{"language":"python","cwd":"/tmp"}`}, {`{"language":`}} {
		wantE2BError(t, "create "+c.body, g.do("POST", "/e2b/sandbox/contexts", strings.NewReader(c.body), hdr), http.StatusBadRequest)
	}
	if r := g.do("POST", "/e2b/sandbox/contexts/default/restart", nil, hdr); r.status != http.StatusNoContent {
		t.Fatalf("restart: %d %s", r.status, r.body)
	}
	if r := g.do("DELETE", "/e2b/sandbox/contexts/default", nil, hdr); r.status != http.StatusNoContent {
		t.Fatalf("remove: %d %s", r.status, r.body)
	}
	wantE2BError(t, "restart of another context", g.do("POST", "/e2b/sandbox/contexts/ctx-2/restart", nil, hdr), http.StatusNotFound)
	wantE2BError(t, "remove of another context", g.do("DELETE", "/e2b/sandbox/contexts/ctx-2", nil, hdr), http.StatusNotFound)
	wantE2BError(t, "contexts without a token", g.do("GET", "/e2b/sandbox/contexts", nil, map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49999"}), http.StatusUnauthorized)
	g.api.mu.Lock()
	restarts := g.api.restarts
	g.api.mu.Unlock()
	if restarts != 2 {
		t.Fatalf("kernel restarts: %d, want 2 (restart and remove)", restarts)
	}
}

// An SDK that leaves mid-cell cancels the /v1 call (which interrupts the
// cell) and the adapter waits for it: nothing outlives the request.
func TestInterpreterCallerLeaves(t *testing.T) {
	g := newRig(t)
	sb := g.create("sk_a", map[string]any{"templateID": "code-interpreter-v1"})
	g.api.mu.Lock()
	g.api.cell, g.api.block, g.api.left = "event: stdout\ndata: {\"data\":\"started\\n\"}\n\n", true, make(chan struct{})
	left := g.api.left
	g.api.mu.Unlock()
	req, _ := http.NewRequest("POST", g.srv.URL+"/e2b/sandbox/execute", strings.NewReader(`{"code":"while True: pass"}`))
	for k, v := range ciHeaders(sb.SandboxID, sb.EnvdAccessToken) {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != `{"text":"started\n","type":"stdout"}`+"\n" {
		t.Fatalf("first line %q: %v", line, err)
	}
	resp.Body.Close()
	select {
	case <-left:
	case <-time.After(10 * time.Second):
		t.Fatal("the /v1 cell was not cancelled when the SDK left")
	}
}
