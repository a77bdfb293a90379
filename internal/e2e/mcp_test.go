package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// TestMCP drives both MCP transports with the SDK's own client against a
// real server and real sandboxes: streamable HTTP at /mcp, and stdio through
// `sandboxapi mcp --url`.
func TestMCP(t *testing.T) {
	s := startServer(t, "")
	s.seedMirror()
	key := s.key("BASIC")

	transports := []struct {
		name    string
		connect func(t *testing.T, key string) (*sdk.ClientSession, error)
	}{
		{"streamable-http", s.mcpHTTP},
		{"stdio", s.mcpStdio},
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			cs, err := tr.connect(t, key)
			if err != nil {
				t.Fatalf("connecting: %v\n%s", err, s.logs)
			}
			defer cs.Close()
			exerciseMCPTools(t, cs)

			t.Run("bad key is refused", func(t *testing.T) {
				for _, bad := range []string{"sk_nope", ""} {
					if cs, err := tr.connect(t, bad); err == nil {
						cs.Close()
						t.Fatalf("key %q: connected", bad)
					}
				}
			})
		})
	}

	t.Run("tool calls are metered as API requests", func(t *testing.T) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := s.do("GET", "/v1/usage", key, nil)
			body := string(r.body)
			if r.status == http.StatusOK && strings.Contains(body, "POST /v1/execute") && strings.Contains(body, "POST /v1/packages/check") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("usage does not show the tools' API calls: %d %s", r.status, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("http 401 before MCP", func(t *testing.T) {
		for _, bad := range []string{"", "sk_nope"} {
			body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
			req, _ := http.NewRequest("POST", s.url("/mcp"), strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if bad != "" {
				req.Header.Set("Authorization", "Bearer "+bad)
			}
			resp, err := s.client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("key %q: status %d", bad, resp.StatusCode)
			}
		}
	})

	t.Run("BASIC rate limit is a tool error", func(t *testing.T) {
		cs, err := s.mcpHTTP(t, s.key("BASIC"))
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		for i := 0; i < 120; i++ {
			res := mcpCall(t, cs, "list_runtimes", map[string]any{})
			if res.IsError {
				if !strings.Contains(mcpText(res), "rate_limited") || !strings.Contains(mcpText(res), "retry after") {
					t.Fatalf("call %d: unexpected error %s", i, mcpText(res))
				}
				if i < 30 {
					t.Fatalf("rate limited after only %d calls", i)
				}
				return
			}
		}
		t.Fatal("120 calls in a row were not rate limited on BASIC")
	})
}

// exerciseMCPTools lists the tools and calls each one, on a BASIC key.
func exerciseMCPTools(t *testing.T, cs *sdk.ClientSession) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range lt.Tools {
		names = append(names, tool.Name)
		if tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("tool %s has no schemas", tool.Name)
		}
	}
	slices.Sort(names)
	if want := mcpTools; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	t.Run("list_runtimes", func(t *testing.T) {
		res := mcpCall(t, cs, "list_runtimes", map[string]any{})
		var out struct {
			Runtimes []struct{ Language, Version string }
			Limits   struct {
				Plan       string `json:"plan"`
				MaxTimeout int    `json:"max_timeout"`
			}
		}
		mcpOK(t, res, &out)
		var langs []string
		for _, r := range out.Runtimes {
			langs = append(langs, r.Language)
		}
		if out.Limits.Plan != "BASIC" || out.Limits.MaxTimeout != 30 || !slices.Contains(langs, "python3") || !slices.Contains(langs, "javascript") {
			t.Fatalf("got %+v", out)
		}
	})

	t.Run("execute_code", func(t *testing.T) {
		res := mcpCall(t, cs, "execute_code", map[string]any{"language": "python3", "code": "import sys\nprint(6 * 7)\nprint(sys.stdin.read().upper(), end='')", "stdin": "abc"})
		var out struct {
			Stdout, Status string
			ExitCode       int `json:"exit_code"`
		}
		mcpOK(t, res, &out)
		if out.Stdout != "42\nABC" || out.Status != "ok" || !strings.Contains(mcpText(res), "status ok") {
			t.Fatalf("got %+v / %s", out, mcpText(res))
		}
		res = mcpCall(t, cs, "execute_code", map[string]any{"language": "javascript", "code": "console.error('bad'); process.exit(4)"})
		mcpOK(t, res, &out)
		if out.Status != "error" || out.ExitCode != 4 {
			t.Fatalf("got %+v", out)
		}
	})

	t.Run("execute_code errors are tool errors", func(t *testing.T) {
		cases := []struct {
			name string
			args map[string]any
			want string
		}{
			// The tool's schema enumerates the server's languages, so the
			// MCP server refuses another before the API sees it, as a tool
			// error that names the languages there are.
			{"unknown language", map[string]any{"language": "cobol", "code": "x"}, "python3"},
			{"timeout over the BASIC plan", map[string]any{"language": "python3", "code": "print(1)", "timeout": 100}, "at most 30 seconds on plan BASIC"},
			{"timeout", map[string]any{"language": "python3", "code": "import time\ntime.sleep(20)", "timeout": 1}, "status timeout"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				res := mcpCall(t, cs, "execute_code", tc.args)
				if !res.IsError || !strings.Contains(mcpText(res), tc.want) {
					t.Fatalf("IsError=%v %q, want a tool error with %q", res.IsError, mcpText(res), tc.want)
				}
			})
		}
	})

	t.Run("run_tests", func(t *testing.T) {
		cases := []struct {
			lang, code, tests string
			passed, total     int
			failing           string
		}{
			{"python3", "def add(a, b):\n    return a + b\n",
				"def test_ok():\n    assert add(2, 3) == 5\n\ndef test_bad():\n    assert add(2, 2) == 5, 'math'\n", 1, 2, "test_bad"},
			{"javascript", "function add(a, b) { return a + b; }\n",
				"test('ok', () => assert.strictEqual(add(2, 3), 5));\ntest('bad', () => assert.strictEqual(add(2, 2), 5));\n", 1, 2, "bad"},
		}
		for _, tc := range cases {
			t.Run(tc.lang, func(t *testing.T) {
				res := mcpCall(t, cs, "run_tests", map[string]any{"language": tc.lang, "code": tc.code, "tests": tc.tests})
				var out struct {
					Passed, Total int
					Failures      []struct{ Name, Message string }
				}
				mcpOK(t, res, &out)
				if out.Passed != tc.passed || out.Total != tc.total || len(out.Failures) != 1 || out.Failures[0].Name != tc.failing || out.Failures[0].Message == "" {
					t.Fatalf("got %+v", out)
				}
			})
		}
		res := mcpCall(t, cs, "run_tests", map[string]any{"language": "bash", "code": "x", "tests": "y"})
		if !res.IsError {
			t.Fatalf("bash accepted: %s", mcpText(res))
		}
	})

	t.Run("check_packages", func(t *testing.T) {
		type verdict struct {
			Spec, Status, Version, OSV, Install string
			Available                           bool
			Versions                            []string
		}
		var out struct{ Results []verdict }
		mcpOK(t, mcpCall(t, cs, "check_packages", map[string]any{"manager": "pip", "packages": []string{"wheel", "wheel==0.1.0", "not-in-mirror", "bad spec!"}}), &out)
		want := []verdict{
			{Spec: "wheel", Status: "admitted", Version: "0.43.0", OSV: "clean", Install: "wheel==0.43.0", Available: true, Versions: []string{"0.43.0"}},
			{Spec: "wheel==0.1.0", Status: "not_found", Version: "0.1.0", OSV: "unknown", Versions: []string{"0.43.0"}},
			{Spec: "not-in-mirror", Status: "not_found", OSV: "unknown", Versions: []string{}},
			{Spec: "bad spec!", Status: "invalid", OSV: "unknown", Versions: []string{}},
		}
		if len(out.Results) != len(want) {
			t.Fatalf("got %+v", out)
		}
		for i := range want {
			g := out.Results[i]
			if g.Versions == nil {
				g.Versions = []string{}
			}
			if g.Spec != want[i].Spec || g.Status != want[i].Status || g.Version != want[i].Version || g.OSV != want[i].OSV ||
				g.Install != want[i].Install || g.Available != want[i].Available || !slices.Equal(g.Versions, want[i].Versions) {
				t.Errorf("result %d: got %+v, want %+v", i, g, want[i])
			}
		}
		mcpOK(t, mcpCall(t, cs, "check_packages", map[string]any{"manager": "npm", "packages": []string{"is-number@7.0.0"}}), &out)
		if len(out.Results) != 1 || !out.Results[0].Available || out.Results[0].Install != "is-number@7.0.0" {
			t.Fatalf("npm: got %+v", out)
		}
		if res := mcpCall(t, cs, "check_packages", map[string]any{"manager": "cargo", "packages": []string{"serde"}}); !res.IsError {
			t.Fatalf("cargo accepted: %s", mcpText(res))
		}
	})
}

// seedMirror imports the test OSV database and admits one wheel and one npm
// tarball from the mirror's test data, through the CLI.
func (s *server) seedMirror() {
	td := filepath.Join(testenv.ModuleRoot(), "mirror", "testdata")
	s.cliArgs([]string{"mirror", "osv", "import"}, filepath.Join(td, "osv"))
	s.cliArgs([]string{"mirror", "add"}, filepath.Join(td, "wheels", "wheel-0.43.0-py3-none-any.whl"))
	s.cliArgs([]string{"mirror", "add"}, filepath.Join(td, "npm", "is-number-7.0.0.tgz"))
}

// cliArgs runs a subcommand with the state flags before the positional
// arguments (urfave/cli stops reading flags at the first argument).
func (s *server) cliArgs(cmd []string, args ...string) {
	s.t.Helper()
	full := append(append(append([]string{}, cmd...), "--config", s.config, "--data-dir", s.dataDir), args...)
	out, err := exec.Command(s.bin, full...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("sandboxapi %s: %v\n%s", strings.Join(full, " "), err, out)
	}
}

// headerRoundTripper adds the key to every MCP HTTP request.
type headerRoundTripper struct{ key string }

func (h headerRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.key != "" {
		r.Header.Set("X-RapidAPI-Key", h.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (s *server) mcpHTTP(t *testing.T, key string) (*sdk.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "v0"}, nil).Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint: s.url("/mcp"), HTTPClient: &http.Client{Transport: headerRoundTripper{key}}, MaxRetries: -1,
	}, nil)
}

func (s *server) mcpStdio(t *testing.T, key string) (*sdk.ClientSession, error) {
	cmd := exec.Command(s.bin, "mcp", "--url", "http://"+s.addr)
	cmd.Env = append(os.Environ(), "SANDBOXAPI_KEY="+key)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "v0"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Logf("stdio server stderr: %s", stderr.String())
	}
	return cs, err
}

func mcpCall(t *testing.T, cs *sdk.ClientSession, name string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return res
}

func mcpText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// mcpOK checks a successful call and decodes its structured content.
func mcpOK(t *testing.T, res *sdk.CallToolResult, out any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", mcpText(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

// TestMCPInspectorCLI drives the stdio transport with an independent client,
// the MCP Inspector's command-line mode. Point SANDBOXAPI_MCP_INSPECTOR at
// its mcp-inspector executable (npm install @modelcontextprotocol/inspector)
// or put mcp-inspector on PATH; without it the test skips.
func TestMCPInspectorCLI(t *testing.T) {
	insp := os.Getenv("SANDBOXAPI_MCP_INSPECTOR")
	if insp == "" {
		if p, err := exec.LookPath("mcp-inspector"); err == nil {
			insp = p
		}
	}
	if insp == "" {
		t.Skip("MCP Inspector not installed: set SANDBOXAPI_MCP_INSPECTOR to its mcp-inspector executable")
	}
	s := startServer(t, "")
	key := s.key("BASIC")
	inspect := func(key string, args ...string) ([]byte, error) {
		cfg := filepath.Join(t.TempDir(), "mcp.json")
		doc := map[string]any{"mcpServers": map[string]any{"sandboxapi": map[string]any{
			"command": s.bin, "args": []string{"mcp"},
			"env": map[string]string{"SANDBOXAPI_KEY": key, "SANDBOXAPI_URL": "http://" + s.addr},
		}}}
		b, _ := json.Marshal(doc)
		if err := os.WriteFile(cfg, b, 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, insp, append([]string{"--cli", "--config", cfg, "--server", "sandboxapi"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("%w: %s", err, stderr.String())
		}
		return out, nil
	}

	out, err := inspect(key, "--method", "tools/list")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Tools []struct{ Name string } }
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("decoding %s: %v", out, err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if want := mcpTools; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	out, err = inspect(key, "--method", "tools/call", "--tool-name", "execute_code", "--tool-arg", "language=python3", "code=print(6*7)")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		IsError           bool `json:"isError"`
		StructuredContent struct {
			Stdout, Status string
		} `json:"structuredContent"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("decoding %s: %v", out, err)
	}
	if res.IsError || res.StructuredContent.Stdout != "42\n" || res.StructuredContent.Status != "ok" {
		t.Fatalf("execute_code: %s", out)
	}

	if out, err := inspect("sk_nope", "--method", "tools/list"); err == nil {
		t.Fatalf("a bad key listed tools: %s", out)
	}
}
