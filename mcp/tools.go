package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// textCap bounds each output stream in a tool's text content and in its
// structured content alike (truncated is then true): an agent's context
// gets no more from one than from the other.
const textCap = 32 << 10

// ExecuteInput is the execute_code tool's input.
type ExecuteInput struct {
	Language string  `json:"language" jsonschema:"language name or alias (see list_runtimes)"`
	Version  string  `json:"version,omitempty" jsonschema:"version of the language: 22 picks the newest 22.x present; absent: the default (see list_runtimes)"`
	Code     string  `json:"code" jsonschema:"the complete program source"`
	Stdin    string  `json:"stdin,omitempty" jsonschema:"standard input for the program"`
	Timeout  float64 `json:"timeout,omitempty" jsonschema:"wall-clock limit in seconds, at most your plan's max_timeout (see list_runtimes)"`
}

// ExecuteResult is one execution's outcome, as the REST API reports it;
// the tool leaves out the execution id and resume time (capResult).
type ExecuteResult = wire.ExecuteResult

// RuntimesInput is list_runtimes' (empty) input.
type RuntimesInput struct{}

// The tools' results and the check_packages input are the REST API's own
// shapes (package wire), so what a tool returns is what the API sent.
type (
	// Runtime is one language the server runs.
	Runtime = wire.Runtime
	// Limits are the caller's plan limits.
	Limits = wire.Limits
	// RuntimesResult is list_runtimes' output.
	RuntimesResult = wire.RuntimeList
	// PackagesInput is check_packages' input, sent as the API's body.
	PackagesInput = wire.PackagesRequest
	// PackageVerdict is what the mirror says about one requested package.
	PackageVerdict = wire.PackageVerdict
	// PackagesResult is check_packages' output.
	PackagesResult = wire.PackageVerdicts
)

type tools struct{ c *client }

func registerTools(s *sdk.Server, c *client, defTimeout float64, runtimes []wire.Runtime) {
	t := &tools{c: c}
	f, tr := false, true
	sdk.AddTool(s, &sdk.Tool{
		Name:  "execute_code",
		Title: "Execute code in a sandbox",
		Description: "Run one program in a fresh gVisor sandbox (no network, no state kept) and return stdout, stderr, " +
			"exit code and status. Output is capped (32 KiB per stream, in the text and the structured result alike). " +
			"java: the source is saved as Main.java, so the class with main must be named Main (`public class Main`) " +
			"(any other public class name fails to compile). " +
			"Errors such as an unknown language, a timeout over your plan's limit or an exhausted quota come back as tool errors.",
		InputSchema:  executeInputSchema(defTimeout, runtimes),
		OutputSchema: executeOutputSchema(),
		Annotations:  &sdk.ToolAnnotations{DestructiveHint: &f, OpenWorldHint: &f},
	}, t.execute)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "list_runtimes",
		Title:       "List runtimes and plan limits",
		Description: "List the languages (with aliases and versions) the sandbox runs, and the limits of your plan.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &f},
	}, t.listRuntimes)
	sdk.AddTool(s, &sdk.Tool{
		Name:  "run_tests",
		Title: "Run tests against code",
		Description: "Run code together with tests in a sandbox and report {passed, total, failures}. " +
			"python3: tests are Python source with test_* functions using assert, or unittest.TestCase classes; the code's names are in scope (also importable as module solution). " +
			"javascript: tests call test(name, fn) / it(name, fn) (describe is supported) or define test* functions; assert (node:assert) is predefined, async tests may return promises; the code's top-level names are in scope.",
		InputSchema: testsInputSchema(defTimeout),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &f, OpenWorldHint: &f},
	}, t.runTests)
	sdk.AddTool(s, &sdk.Tool{
		Name:  "check_packages",
		Title: "Check packages in the mirror",
		Description: "For each pip or npm package, say whether the curated mirror holds it (sandboxes install only from there), " +
			"its admitted versions and its OSV vulnerability verdict, to plan an install.",
		InputSchema:  packagesInputSchema(),
		OutputSchema: packagesOutputSchema(),
		Annotations:  &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &tr},
	}, t.checkPackages)
	registerSessionTools(s, t, defTimeout, runtimes)
}

func (t *tools) execute(ctx context.Context, req *sdk.CallToolRequest, in ExecuteInput) (*sdk.CallToolResult, ExecuteResult, error) {
	res, err := t.run(ctx, req, in)
	if err != nil {
		return nil, ExecuteResult{}, err
	}
	out := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: describeExecution(res)}}}
	res = capResult(res)
	switch res.Status {
	case sandbox.StatusTimeout, sandbox.StatusOOM:
		out.IsError = true
	}
	return out, res, nil
}

// run sends one stateless execute.
func (t *tools) run(ctx context.Context, req *sdk.CallToolRequest, in ExecuteInput) (ExecuteResult, error) {
	if strings.TrimSpace(in.Language) == "" {
		return ExecuteResult{}, errors.New("language is required; call list_runtimes for the choices")
	}
	if in.Timeout < 0 {
		return ExecuteResult{}, errors.New("timeout must be a positive number of seconds")
	}
	body := wire.ExecuteRequest{Language: in.Language, Version: in.Version, Code: &in.Code, Stdin: in.Stdin}
	if in.Timeout > 0 {
		body.Timeout = &in.Timeout
	}
	var res ExecuteResult
	if err := t.c.call(ctx, headersOf(req), "POST", "/v1/execute", body, &res); err != nil {
		return ExecuteResult{}, err
	}
	return res, nil
}

// describeExecution renders a result for a reader: status explained first,
// then the output.
func describeExecution(r ExecuteResult) string {
	var b strings.Builder
	switch r.Status {
	case sandbox.StatusOK:
		fmt.Fprintf(&b, "status ok: exited with code 0 in %d ms", r.DurationMS)
	case sandbox.StatusError:
		fmt.Fprintf(&b, "status error: exited with code %d", r.ExitCode)
		if r.Signal != "" {
			fmt.Fprintf(&b, " (signal %s)", r.Signal)
		}
		fmt.Fprintf(&b, " in %d ms", r.DurationMS)
	case sandbox.StatusTimeout:
		fmt.Fprintf(&b, "status timeout: the program was stopped after %d ms, at its time limit; pass a larger timeout (up to your plan's max_timeout, see list_runtimes) or make it faster", r.DurationMS)
	case sandbox.StatusOOM:
		b.WriteString("status oom: the program ran out of memory and was killed (your plan's memory_mb is in list_runtimes)")
	case sandbox.StatusOutputLimit:
		b.WriteString("status output_limit: the program printed more than the output cap and was stopped; print less")
	case sandbox.StatusCompileError:
		b.WriteString("status compile_error: compilation failed; the compiler's messages are in stderr")
	default:
		fmt.Fprintf(&b, "status %s: exit code %d", r.Status, r.ExitCode)
	}
	if r.Truncated {
		b.WriteString("\n(output truncated at the cap)")
	}
	writeStream(&b, "stdout", r.Stdout)
	writeStream(&b, "stderr", r.Stderr)
	return b.String()
}

// capResult keeps the fields of the tool's output schema and cuts each
// stream, and each text value of a kernel's results, of the structured
// result at textCap, as the text is cut, and marks it truncated.
func capResult(r ExecuteResult) ExecuteResult {
	r.ExecutionID, r.ResumedMS = "", 0 // not in the tool's output schema
	r = capResults(r)
	for _, p := range []*string{&r.Stdout, &r.Stderr} {
		if len(*p) > textCap {
			*p = strings.ToValidUTF8((*p)[:textCap], "")
			r.Truncated = true
		}
	}
	return r
}

func writeStream(b *strings.Builder, name, s string) {
	if s == "" {
		return
	}
	fmt.Fprintf(b, "\n--- %s ---\n", name)
	if len(s) > textCap {
		b.WriteString(s[:textCap])
		fmt.Fprintf(b, "\n[... %d more bytes cut]", len(s)-textCap)
		return
	}
	b.WriteString(strings.TrimRight(s, "\n"))
}

func (t *tools) listRuntimes(ctx context.Context, req *sdk.CallToolRequest, _ RuntimesInput) (*sdk.CallToolResult, RuntimesResult, error) {
	var res RuntimesResult
	if err := t.c.call(ctx, headersOf(req), "GET", "/v1/runtimes", nil, &res); err != nil {
		return nil, RuntimesResult{}, err
	}
	if res.Runtimes == nil {
		res.Runtimes = []Runtime{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "plan %s: max timeout %d s, memory %d MB", res.Limits.Plan, res.Limits.MaxTimeout, res.Limits.MemoryMB)
	if res.Limits.Sessions {
		fmt.Fprintf(&b, ", up to %d sessions", res.Limits.MaxSessions)
	}
	b.WriteString("\nlanguages:")
	for _, r := range res.Runtimes {
		fmt.Fprintf(&b, "\n- %s %s", r.Language, r.Version)
		if len(r.Aliases) > 0 {
			fmt.Fprintf(&b, " (aliases: %s)", strings.Join(r.Aliases, ", "))
		}
		if r.Compiled {
			b.WriteString(" [compiled]")
		}
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: b.String()}}}, res, nil
}

func (t *tools) checkPackages(ctx context.Context, req *sdk.CallToolRequest, in PackagesInput) (*sdk.CallToolResult, PackagesResult, error) {
	if len(in.Packages) == 0 {
		return nil, PackagesResult{}, errors.New("packages must list at least one package")
	}
	var res PackagesResult
	if err := t.c.call(ctx, headersOf(req), "POST", "/v1/packages/check", in, &res); err != nil {
		return nil, PackagesResult{}, err
	}
	if res.Results == nil {
		res.Results = []PackageVerdict{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s packages in the mirror:", res.Manager)
	for _, v := range res.Results {
		fmt.Fprintf(&b, "\n- %s: ", v.Spec)
		if v.Available {
			fmt.Fprintf(&b, "available as %s (osv: %s)", v.Install, v.OSV)
		} else {
			fmt.Fprintf(&b, "not installable (%s", v.Status)
			if len(v.Advisories) > 0 {
				fmt.Fprintf(&b, "; advisories %s", strings.Join(v.Advisories, ", "))
			}
			if len(v.Reasons) > 0 {
				fmt.Fprintf(&b, "; %s", strings.Join(v.Reasons, "; "))
			}
			b.WriteString(")")
		}
		if len(v.Versions) > 0 {
			fmt.Fprintf(&b, "; admitted versions: %s", strings.Join(v.Versions, ", "))
		}
		if len(v.Dependencies) > 0 {
			deps := make([]string, 0, len(v.Dependencies))
			for _, n := range slices.Sorted(maps.Keys(v.Dependencies)) {
				deps = append(deps, n+"@"+v.Dependencies[n])
			}
			fmt.Fprintf(&b, "; needs %s in the same install", strings.Join(deps, ", "))
		}
		if len(v.Stripped) > 0 {
			fmt.Fprintf(&b, "; stripped by the mirror: %s", strings.Join(v.Stripped, ", "))
		}
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: b.String()}}}, res, nil
}
