package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxapi/sandboxapi/internal/httperr"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// fakeAPI is a stand-in for the REST API: it checks the key like the API
// does, answers the routes the tools use, and runs python3/node programs on
// the host (when present) so the test harnesses are exercised for real.
type fakeAPI struct {
	t        *testing.T
	calls    atomic.Int64
	lastAuth atomic.Value // string: the key the last call presented
}

const goodKey = "sk_good"

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	key := r.Header.Get("X-RapidAPI-Key")
	if key == "" {
		key = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	if key == "" {
		key = r.Header.Get("X-API-Key")
	}
	f.lastAuth.Store(key)
	if key != goodKey {
		writeErr(w, 401, "unauthenticated", "unknown key", 0)
		return
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /v1/runtimes":
		writeJSONBody(w, 200, wire.RuntimeList{
			Runtimes: []wire.Runtime{{Language: "python3", Aliases: []string{"python", "py"}, Version: "3.13"},
				{Language: "go", Aliases: []string{"golang"}, Version: "1.24", Compiled: true}},
			Limits: wire.Limits{Plan: "BASIC", MaxTimeout: 30, MemoryMB: 256},
		})
	case "POST /v1/execute":
		var body wire.ExecuteRequest
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeErr(w, 400, "invalid_json", "malformed JSON", 0)
			return
		}
		if body.Code == nil {
			writeErr(w, 400, "invalid_request", "code is required", 0)
			return
		}
		f.execute(w, r, body.Language, *body.Code, body.Stdin, body.Timeout)
	case "POST /v1/packages/check":
		var body wire.PackagesRequest
		_ = json.NewDecoder(r.Body).Decode(&body)
		out := wire.PackageVerdicts{Manager: body.Manager}
		for _, p := range body.Packages {
			if strings.HasPrefix(p, "debug") {
				out.Results = append(out.Results, wire.PackageVerdict{Spec: p, Name: "debug", Version: "4.3.7", Available: true, Status: "admitted",
					Versions: []string{"4.3.7"}, OSV: "clean", Install: "debug@4.3.7", Stripped: []string{"dependencies"}, Dependencies: map[string]string{"ms": "^2.1.3"}})
			} else if strings.HasPrefix(p, "requests") {
				out.Results = append(out.Results, wire.PackageVerdict{Spec: p, Name: "requests", Version: "2.32.3", Available: true, Status: "admitted",
					Versions: []string{"2.31.0", "2.32.3"}, OSV: "clean", Install: "requests==2.32.3"})
			} else {
				out.Results = append(out.Results, wire.PackageVerdict{Spec: p, Name: p, Status: "not_found", Versions: []string{}, OSV: "unknown",
					Reasons: []string{"not in the mirror"}})
			}
		}
		writeJSONBody(w, 200, out)
	default:
		writeErr(w, 404, "no_route", "no route", 0)
	}
}

func (f *fakeAPI) execute(w http.ResponseWriter, r *http.Request, lang, code, stdin string, timeout *float64) {
	if timeout != nil && *timeout > 30 {
		writeErr(w, 400, "invalid_request", "timeout must be at most 30 seconds on plan BASIC", 0)
		return
	}
	if code == "QUOTA" {
		writeErr(w, 429, "rate_limited", "plan BASIC allows 60 requests per minute", 7*time.Second)
		return
	}
	var prog []string
	file := "main.py"
	switch lang {
	case "python3":
		prog = []string{"python3"}
	case "javascript":
		prog, file = []string{"node"}, "main.js"
	case "bash":
		prog, file = []string{"bash"}, "main.sh"
	default:
		writeErr(w, 400, "unknown_language", "unknown language "+lang, 0)
		return
	}
	if _, err := exec.LookPath(prog[0]); err != nil {
		writeErr(w, 503, "not_ready", prog[0]+" is not on the test host", 0)
		return
	}
	d := 30 * time.Second
	if timeout != nil {
		d = time.Duration(*timeout * float64(time.Second))
	}
	dir := f.t.TempDir()
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(code), 0o600); err != nil {
		writeErr(w, 500, "internal", err.Error(), 0)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog[0], path)
	cmd.Dir = dir
	cmd.WaitDelay = 200 * time.Millisecond
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	res := wire.ExecuteResult{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: cmd.ProcessState.ExitCode(),
		Status: sandbox.StatusOK, DurationMS: time.Since(start).Milliseconds()}
	switch {
	case ctx.Err() != nil:
		res.Status, res.Signal = sandbox.StatusTimeout, "SIGKILL"
	case err != nil:
		res.Status = sandbox.StatusError
	}
	writeJSONBody(w, 200, res)
}

func writeErr(w http.ResponseWriter, status int, code, msg string, retry time.Duration) {
	if retry > 0 {
		w.Header().Set("Retry-After", "7")
	}
	writeJSONBody(w, status, httperr.Body{Error: httperr.Payload{Code: code, Message: msg, RequestID: "rid1"}})
}

func writeJSONBody(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// connectInMemory serves the tools over in-memory transports and returns
// the SDK client's session.
func connectInMemory(t *testing.T, o Options) *sdk.ClientSession {
	t.Helper()
	srv, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	ct, st := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func call(t *testing.T, cs *sdk.ClientSession, name string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s: protocol error %v", name, err)
	}
	return res
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func structured[T any](t *testing.T, res *sdk.CallToolResult) T {
	t.Helper()
	var out T
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("decoding structured content %s: %v", b, err)
	}
	return out
}

// allTools are the tools' names, sorted.
var allTools = []string{"check_packages", "create_session", "end_session", "execute_code", "execute_in_session", "install_packages",
	"list_files", "list_runtimes", "list_sessions", "read_file", "run_tests", "write_file"}

func TestMCPToolsAreListedWithSchemas(t *testing.T) {
	t.Parallel()
	cs := connectInMemory(t, Options{Handler: &fakeAPI{t: t}, Key: goodKey})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.InputSchema == nil || tool.OutputSchema == nil || tool.Description == "" {
			t.Errorf("tool %s lacks a schema or description", tool.Name)
		}
	}
	slices.Sort(names)
	if want := allTools; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	for _, tool := range res.Tools {
		if tool.Name != "execute_code" {
			continue
		}
		b, _ := json.Marshal(tool.InputSchema)
		var s struct {
			Required []string `json:"required"`
		}
		_ = json.Unmarshal(b, &s)
		slices.Sort(s.Required)
		if !slices.Equal(s.Required, []string{"code", "language"}) {
			t.Fatalf("execute_code requires %v", s.Required)
		}
	}
}

func TestMCPExecuteCode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		args      map[string]any
		isError   bool
		status    string
		textHas   string
		stdoutHas string
	}{
		{name: "ok", args: map[string]any{"language": "bash", "code": "echo hi; echo oops >&2"}, status: "ok", textHas: "status ok", stdoutHas: "hi"},
		{name: "stdin", args: map[string]any{"language": "bash", "code": "read x; echo got $x", "stdin": "5\n"}, status: "ok", stdoutHas: "got 5"},
		{name: "non-zero exit is a result", args: map[string]any{"language": "bash", "code": "exit 3"}, status: "error", textHas: "exited with code 3"},
		{name: "timeout is a tool error", args: map[string]any{"language": "bash", "code": "sleep 5", "timeout": 0.5}, isError: true, status: "timeout", textHas: "time limit"},
		{name: "unknown language", args: map[string]any{"language": "cobol", "code": "x"}, isError: true, textHas: "unknown_language"},
		{name: "timeout over plan", args: map[string]any{"language": "bash", "code": "x", "timeout": 100}, isError: true, textHas: "at most 30 seconds"},
		{name: "quota", args: map[string]any{"language": "bash", "code": "QUOTA"}, isError: true, textHas: "retry after 7s"},
		{name: "missing code", args: map[string]any{"language": "bash"}, isError: true, textHas: "code"},
	}
	cs := connectInMemory(t, Options{Handler: &fakeAPI{t: t}, Key: goodKey})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, cs, "execute_code", tc.args)
			if res.IsError != tc.isError {
				t.Fatalf("IsError=%v, want %v: %s", res.IsError, tc.isError, text(res))
			}
			if !strings.Contains(text(res), tc.textHas) {
				t.Fatalf("text %q lacks %q", text(res), tc.textHas)
			}
			if tc.status == "" {
				return
			}
			out := structured[ExecuteResult](t, res)
			if string(out.Status) != tc.status || !strings.Contains(out.Stdout, tc.stdoutHas) {
				t.Fatalf("structured %+v, want status %s and stdout with %q", out, tc.status, tc.stdoutHas)
			}
		})
	}
}

func TestMCPListRuntimes(t *testing.T) {
	t.Parallel()
	cs := connectInMemory(t, Options{Handler: &fakeAPI{t: t}, Key: goodKey})
	res := call(t, cs, "list_runtimes", map[string]any{})
	if res.IsError {
		t.Fatal(text(res))
	}
	out := structured[RuntimesResult](t, res)
	if len(out.Runtimes) != 2 || out.Limits.Plan != "BASIC" || out.Limits.MaxTimeout != 30 {
		t.Fatalf("got %+v", out)
	}
	if !strings.Contains(text(res), "plan BASIC") || !strings.Contains(text(res), "go 1.24") {
		t.Fatalf("text %q", text(res))
	}
}

func TestMCPCheckPackages(t *testing.T) {
	t.Parallel()
	cs := connectInMemory(t, Options{Handler: &fakeAPI{t: t}, Key: goodKey})
	res := call(t, cs, "check_packages", map[string]any{"manager": "pip", "packages": []string{"requests", "nothere==1.0"}})
	if res.IsError {
		t.Fatal(text(res))
	}
	out := structured[PackagesResult](t, res)
	if len(out.Results) != 2 || !out.Results[0].Available || out.Results[0].Install != "requests==2.32.3" || out.Results[1].Status != "not_found" {
		t.Fatalf("got %+v", out)
	}
	// What the mirror stripped and what must come along reach the agent,
	// structured and in the text.
	res = call(t, cs, "check_packages", map[string]any{"manager": "npm", "packages": []string{"debug@4.3.7"}})
	dbg := structured[PackagesResult](t, res).Results[0]
	if !slices.Equal(dbg.Stripped, []string{"dependencies"}) || dbg.Dependencies["ms"] != "^2.1.3" ||
		!strings.Contains(text(res), "needs ms@^2.1.3 in the same install") || !strings.Contains(text(res), "stripped by the mirror: dependencies") {
		t.Fatalf("debug verdict %+v, text %q", dbg, text(res))
	}
	if res := call(t, cs, "check_packages", map[string]any{"manager": "pip", "packages": []string{}}); !res.IsError {
		t.Fatalf("empty packages accepted: %s", text(res))
	}
}

func TestMCPRunTests(t *testing.T) {
	t.Parallel()
	for _, prog := range []string{"python3", "node"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("the harnesses run on the host here and need %s: %v (the e2e tests run them in sandboxes)", prog, err)
		}
	}
	cases := []struct {
		name     string
		language string
		code     string
		tests    string
		passed   int
		total    int
		failing  []string
		errHas   string
	}{
		{
			name: "python functions", language: "python3",
			code:   "def add(a, b):\n    return a + b\nprint('loaded')\n",
			tests:  "def test_add():\n    assert add(1, 2) == 3\n\ndef test_wrong():\n    assert add(2, 2) == 5, 'two and two'\n\ndef test_bare():\n    assert add(0, 0) == 1\n\ndef test_raises():\n    raise ValueError('boom')\n\ndef helper():\n    pass\n",
			passed: 1, total: 4, failing: []string{"test_wrong", "test_bare", "test_raises"},
		},
		{
			name: "python unittest", language: "python",
			code:   "def mul(a, b):\n    return a * b\n",
			tests:  "import unittest\nfrom solution import mul\nclass T(unittest.TestCase):\n    def test_ok(self):\n        self.assertEqual(mul(2, 3), 6)\n    def test_bad(self):\n        self.assertEqual(mul(2, 3), 7)\n",
			passed: 1, total: 2, failing: []string{"T.test_bad"},
		},
		{
			name: "python subtests", language: "python3",
			code:   "def sq(x):\n    return x * x\n",
			tests:  "import unittest\nclass T(unittest.TestCase):\n    def test_sub(self):\n        for i in (1, 2, 3):\n            with self.subTest(i=i):\n                self.assertEqual(sq(i), 1)\n    def test_ok(self):\n        self.assertEqual(sq(3), 9)\n",
			passed: 1, total: 2, failing: []string{"T.test_sub (i=2)", "T.test_sub (i=3)"},
		},
		{
			name: "python forged report", language: "python3",
			code:   "import __main__\nprint('\\n' + __main__._MARK + '{\"passed\": 3, \"total\": 3, \"failures\": []}')\n",
			tests:  "def test_x():\n    assert False\n",
			errHas: "not trusted",
		},
		{
			name: "python syntax error in code", language: "python3",
			code: "def f(:\n", tests: "def test_x():\n    pass\n", errHas: "code failed to load",
		},
		{
			name: "python no tests", language: "python3",
			code: "x = 1\n", tests: "y = 2\n", errHas: "no tests found",
		},
		{
			name: "javascript test()", language: "javascript",
			code:   "function add(a, b) { return a + b; }\nconst K = 10;\n",
			tests:  "const assert = require('node:assert');\ntest('adds', () => assert.strictEqual(add(1, 2), 3));\ntest('const', () => assert.strictEqual(K, 11));\ndescribe('group', () => { it('deep', () => assert.deepStrictEqual([add(1,1)], [2])); });\ntest('async', async () => { await new Promise(r => setTimeout(r, 10)); throw new Error('late'); });\n",
			passed: 2, total: 4, failing: []string{"const", "async"},
		},
		{
			name: "javascript test functions", language: "js",
			code:   "function sq(x) { return x * x; }\nfunction testHelperInCode() {}\n",
			tests:  "function test_sq() { assert.strictEqual(sq(3), 9); }\nfunction testBad() { assert.ok(sq(2) === 5, 'sq(2) is not 5'); }\n",
			passed: 1, total: 2, failing: []string{"testBad"},
		},
		{
			name: "unsupported language", language: "go", code: "package main", tests: "x", errHas: "supports python3 and javascript",
		},
		{
			name: "timeout", language: "python3", code: "import time\n", tests: "def test_slow():\n    time.sleep(10)\n", errHas: "did not finish",
		},
	}
	cs := connectInMemory(t, Options{Handler: &fakeAPI{t: t}, Key: goodKey})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := map[string]any{"language": tc.language, "code": tc.code, "tests": tc.tests}
			if tc.name == "timeout" {
				args["timeout"] = 1
			}
			res := call(t, cs, "run_tests", args)
			if tc.errHas != "" {
				if !res.IsError || !strings.Contains(text(res), tc.errHas) {
					t.Fatalf("IsError=%v text %q, want error with %q", res.IsError, text(res), tc.errHas)
				}
				return
			}
			if res.IsError {
				t.Fatalf("tool error: %s", text(res))
			}
			out := structured[TestsResult](t, res)
			var failing []string
			for _, f := range out.Failures {
				failing = append(failing, f.Name)
				if f.Message == "" {
					t.Errorf("failure %s has no message", f.Name)
				}
			}
			if out.Passed != tc.passed || out.Total != tc.total || !slices.Equal(failing, tc.failing) {
				t.Fatalf("got %+v, want %d/%d failing %v", out, tc.passed, tc.total, tc.failing)
			}
		})
	}
}

func TestMCPParseSummaryIgnoresFakeMarkers(t *testing.T) {
	t.Parallel()
	m := "__M__"
	cases := []struct {
		name   string
		stdout string
		found  bool
		total  int
		rest   string
	}{
		{"plain", "hello\n" + m + `{"passed":1,"total":1,"failures":[]}` + "\n", true, 1, "hello\n"},
		{"mid-line marker is ignored", "x" + m + `{"total":9}`, false, 0, ""},
		{"bad json", m + "{", false, 0, ""},
		{"missing", "nothing", false, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sum, rest, found := parseSummary(tc.stdout, m)
			if found != tc.found || sum.Total != tc.total || (found && rest != tc.rest) {
				t.Fatalf("got %+v %q %v", sum, rest, found)
			}
		})
	}
}

func TestMCPCheckSummaryRefusesImpossibleReports(t *testing.T) {
	t.Parallel()
	m := "__M__"
	one := "\n" + m + "{}\n"
	cases := []struct {
		name   string
		stdout string
		sum    summary
		ok     bool
	}{
		{"consistent", one, summary{Passed: 1, Total: 2, Failures: []TestFailure{{Name: "a"}}}, true},
		{"subtests give more failures than failed tests", one, summary{Passed: 0, Total: 1, Failures: []TestFailure{{Name: "a"}, {Name: "b"}}}, true},
		{"load error", one, summary{Error: "the code failed to load"}, true},
		{"two reports", one + one, summary{Passed: 1, Total: 1}, false},
		{"more passed than run", one, summary{Passed: 5, Total: 3}, false},
		{"failed without a failure", one, summary{Passed: 1, Total: 3, Failures: []TestFailure{{Name: "a"}}}, false},
		{"negative", one, summary{Passed: -1, Total: -1}, false},
	}
	for _, tc := range cases {
		err := checkSummary(tc.stdout, m, tc.sum)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, errUntrusted)) {
			t.Errorf("%s: checkSummary = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestMCPRemoteBackendSendsKey(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{t: t}
	ts := httptest.NewServer(api)
	t.Cleanup(ts.Close)
	cs := connectInMemory(t, Options{BaseURL: ts.URL, Key: goodKey})
	if res := call(t, cs, "list_runtimes", map[string]any{}); res.IsError {
		t.Fatal(text(res))
	}
	bad := connectInMemory(t, Options{BaseURL: ts.URL, Key: "sk_bad"})
	res := call(t, bad, "list_runtimes", map[string]any{})
	if !res.IsError || !strings.Contains(text(res), "unauthenticated") {
		t.Fatalf("bad key: %v %s", res.IsError, text(res))
	}
	if _, err := NewServer(Options{BaseURL: "ftp://x"}); err == nil {
		t.Fatal("bad url accepted")
	}
}

func TestMCPServeStdioRefusesBadKey(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(&fakeAPI{t: t})
	t.Cleanup(ts.Close)
	_, st := sdk.NewInMemoryTransports()
	for _, key := range []string{"", "sk_bad"} {
		err := ServeStdio(context.Background(), st, Options{BaseURL: ts.URL, Key: key})
		if !errors.Is(err, ErrKeyRefused) {
			t.Fatalf("key %q: got %v", key, err)
		}
	}
}

// headerTransport adds headers to every request.
type headerTransport struct {
	h    http.Header
	base http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, vs := range t.h {
		r.Header[k] = vs
	}
	return t.base.RoundTrip(r)
}

func TestMCPHTTPHandler(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{t: t}
	mux := http.NewServeMux()
	mux.Handle("/mcp", NewHTTPHandler(api, Options{}))
	mux.Handle("/", api)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	connect := func(h http.Header) (*sdk.ClientSession, error) {
		hc := &http.Client{Transport: headerTransport{h: h, base: http.DefaultTransport}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return sdk.NewClient(&sdk.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx,
			&sdk.StreamableClientTransport{Endpoint: ts.URL + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	}
	for _, h := range []http.Header{
		{"X-Rapidapi-Key": {goodKey}},
		{"Authorization": {"Bearer " + goodKey}},
		{"X-Api-Key": {goodKey}},
	} {
		cs, err := connect(h)
		if err != nil {
			t.Fatalf("%v: %v", h, err)
		}
		res := call(t, cs, "execute_code", map[string]any{"language": "bash", "code": "echo via http"})
		if res.IsError || !strings.Contains(text(res), "via http") {
			t.Fatalf("%v: %v %s", h, res.IsError, text(res))
		}
		_ = cs.Close()
	}
	// The docs' curl check: a lone tools/list POST, no session.
	req, _ := http.NewRequest("POST", ts.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Authorization", "Bearer "+goodKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "execute_code") {
		t.Fatalf("lone tools/list: %d %s", resp.StatusCode, body)
	}
	for _, h := range []http.Header{{}, {"X-Api-Key": {"sk_bad"}}} {
		if cs, err := connect(h); err == nil {
			_ = cs.Close()
			t.Fatalf("%v: connected with a bad key", h)
		}
		req, _ := http.NewRequest("POST", ts.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header = h.Clone()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("%v: status %d", h, resp.StatusCode)
		}
	}
}

// FuzzParseSummary feeds sandbox output (untrusted) to the summary parser.
func FuzzParseSummary(f *testing.F) {
	const m = "__M__"
	f.Add("hello\n" + m + `{"passed":1,"total":2,"failures":[{"name":"a","message":"b"}]}` + "\n")
	f.Add(m + "{")
	f.Add("x" + m + m + "\n" + m + `{"error":"e"}`)
	f.Fuzz(func(t *testing.T, stdout string) {
		sum, rest, found := parseSummary(stdout, m)
		if !found {
			if rest != stdout {
				t.Fatalf("not found but stdout changed: %q -> %q", stdout, rest)
			}
			return
		}
		if len(rest) >= len(stdout) {
			t.Fatalf("found but nothing removed from %q", stdout)
		}
		_ = sum
	})
}
