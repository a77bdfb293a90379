package mcp

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// TestsInput is run_tests' input.
type TestsInput struct {
	Language string  `json:"language" jsonschema:"python3 (python, py) or javascript (js, node)"`
	Code     string  `json:"code" jsonschema:"the code under test"`
	Tests    string  `json:"tests" jsonschema:"the tests, in the same language"`
	Timeout  float64 `json:"timeout,omitempty" jsonschema:"wall-clock limit in seconds for the whole run, at most your plan's max_timeout"`
}

// TestFailure is one failed test.
type TestFailure struct {
	Name    string `json:"name"`
	Message string `json:"message"`
}

// TestsResult is run_tests' output.
type TestsResult struct {
	Passed     int           `json:"passed"`
	Total      int           `json:"total"`
	Failures   []TestFailure `json:"failures"`
	Stdout     string        `json:"stdout,omitempty" jsonschema:"what the code and tests printed (capped)"`
	Stderr     string        `json:"stderr,omitempty"`
	DurationMS int64         `json:"duration_ms"`
}

// summary is the line the harness prints after its marker.
type summary struct {
	Passed   int           `json:"passed"`
	Total    int           `json:"total"`
	Failures []TestFailure `json:"failures"`
	Error    string        `json:"error"`
}

// harnessOutputCap bounds stdout/stderr echoed in a run_tests result.
const harnessOutputCap = 4 << 10

func (t *tools) runTests(ctx context.Context, req *sdk.CallToolRequest, in TestsInput) (*sdk.CallToolResult, TestsResult, error) {
	lang, build, err := harnessFor(in.Language)
	if err != nil {
		return nil, TestsResult{}, err
	}
	if strings.TrimSpace(in.Tests) == "" {
		return nil, TestsResult{}, errors.New("tests are empty")
	}
	marker := newMarker()
	res, err := t.run(ctx, req, ExecuteInput{Language: lang, Code: build(marker, in.Code, in.Tests), Timeout: in.Timeout})
	if err != nil {
		return nil, TestsResult{}, err
	}
	sum, stdout, found := parseSummary(res.Stdout, marker)
	out := TestsResult{Stdout: capString(stdout, harnessOutputCap), Stderr: capString(res.Stderr, harnessOutputCap), DurationMS: res.DurationMS}
	if !found {
		return nil, TestsResult{}, harnessError(res, stdout)
	}
	if err := checkSummary(res.Stdout, marker, sum); err != nil {
		return nil, TestsResult{}, err
	}
	if sum.Error != "" {
		return nil, TestsResult{}, fmt.Errorf("%s\n%s", sum.Error, capString(res.Stderr, harnessOutputCap))
	}
	out.Passed, out.Total, out.Failures = sum.Passed, sum.Total, sum.Failures
	if out.Failures == nil {
		out.Failures = []TestFailure{}
	}
	if out.Total == 0 {
		return nil, TestsResult{}, errors.New("no tests found: " + testsHint(lang))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d tests passed in %d ms", out.Passed, out.Total, out.DurationMS)
	for _, f := range out.Failures {
		fmt.Fprintf(&b, "\nFAIL %s: %s", f.Name, f.Message)
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: b.String()}}}, out, nil
}

// harnessError explains a run that never printed its summary.
func harnessError(res ExecuteResult, stdout string) error {
	var b strings.Builder
	switch res.Status {
	case sandbox.StatusTimeout:
		fmt.Fprintf(&b, "the tests did not finish: stopped after %d ms at the time limit; pass a larger timeout (up to your plan's max_timeout) or make the code faster", res.DurationMS)
	case sandbox.StatusOOM:
		b.WriteString("the tests ran out of memory and were killed")
	case sandbox.StatusOutputLimit:
		b.WriteString("the tests printed more than the output cap and were stopped")
	default:
		fmt.Fprintf(&b, "the test run ended before reporting (status %s, exit code %d)", res.Status, res.ExitCode)
	}
	if s := capString(res.Stderr, harnessOutputCap); s != "" {
		b.WriteString("\n--- stderr ---\n" + s)
	}
	if s := capString(stdout, harnessOutputCap); s != "" {
		b.WriteString("\n--- stdout ---\n" + s)
	}
	return errors.New(b.String())
}

// errUntrusted is a run whose report the harness cannot vouch for.
var errUntrusted = errors.New("the test report is not trusted")

// checkSummary refuses reports that the harness could not have written: the
// harness prints its marker once, with consistent counts. This catches
// careless or crude forgery only: the tests run in the code's own process,
// so code written to fool the grader can still forge a report (see
// docs/mcp.md).
func checkSummary(stdout, marker string, sum summary) error {
	if n := strings.Count(stdout, marker); n != 1 {
		return fmt.Errorf("%w: the program printed the harness's report marker itself (%d reports)", errUntrusted, n)
	}
	if sum.Error != "" {
		return nil
	}
	// Every test that did not pass has at least one failure (a test with
	// failing subtests may have several).
	if sum.Passed < 0 || sum.Total < 0 || sum.Passed > sum.Total || len(sum.Failures) < sum.Total-sum.Passed {
		return fmt.Errorf("%w: inconsistent counts (passed %d, total %d, %d failures)", errUntrusted, sum.Passed, sum.Total, len(sum.Failures))
	}
	return nil
}

func capString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("\n[... %d more bytes]", len(s)-n)
}

func newMarker() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "__SANDBOXAPI_TESTS_" + hex.EncodeToString(b[:]) + "__"
}

// parseSummary finds the last line starting with marker in stdout and
// returns the decoded summary and stdout without that line.
func parseSummary(stdout, marker string) (summary, string, bool) {
	var sum summary
	i := strings.LastIndex(stdout, marker)
	if i < 0 || (i > 0 && stdout[i-1] != '\n') {
		return sum, stdout, false
	}
	line := stdout[i+len(marker):]
	rest := ""
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line, rest = line[:j], line[j+1:]
	}
	if err := json.Unmarshal([]byte(line), &sum); err != nil {
		return sum, stdout, false
	}
	return sum, stdout[:i] + rest, true
}

// harnessFor returns the canonical language and the harness builder.
func harnessFor(language string) (string, func(marker, code, tests string) string, error) {
	switch strings.ToLower(strings.TrimSpace(language)) {
	case "python3", "python", "py":
		return "python3", pythonHarness, nil
	case "javascript", "js", "node", "nodejs":
		return "javascript", jsHarness, nil
	}
	return "", nil, fmt.Errorf("run_tests supports python3 and javascript, not %q; use execute_code with your own assertions for other languages", language)
}

func testsHint(lang string) string {
	if lang == "python3" {
		return "define functions named test_* that use assert, or unittest.TestCase classes"
	}
	return "call test(name, fn) or it(name, fn), or define functions named test*"
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// pythonHarness runs code as module "solution", then the tests in a copy of
// its namespace; test_* functions and unittest.TestCase classes are run in
// definition order. The sources travel base64-encoded, so no quoting of
// user text is involved.
func pythonHarness(marker, code, tests string) string {
	return fmt.Sprintf(pyHarness, marker, b64(code), b64(tests))
}

const pyHarness = `import base64 as _b64, inspect as _inspect, json as _json, sys as _sys, traceback as _tb, types as _types, unittest as _unittest
_MARK = %q
def _report(**kw):
    _sys.stdout.flush()
    _sys.stdout.write("\n" + _MARK + _json.dumps(kw) + "\n")
    _sys.stdout.flush()
def _err(e):
    return "".join(_tb.format_exception_only(type(e), e)).strip()
def _msg(e):
    if isinstance(e, AssertionError):
        frames = _tb.extract_tb(e.__traceback__)
        where = frames[-1].line if frames else ""
        text = str(e)
        if text:
            return "AssertionError: " + text + ((" (at: " + where + ")") if where else "")
        return "assertion failed: " + (where or "assert")
    return _err(e)
_sol = _types.ModuleType("solution")
_sol.__file__ = "solution.py"
_sys.modules["solution"] = _sol
try:
    exec(compile(_b64.b64decode(%q).decode("utf-8"), "solution.py", "exec"), _sol.__dict__)
except BaseException as e:
    _report(error="the code failed to load: " + _err(e) + "\n" + "".join(_tb.format_exception(type(e), e, e.__traceback__)[-3:]))
    _sys.exit(0)
_ns = dict(_sol.__dict__)
_ns["__name__"] = "tests"
try:
    exec(compile(_b64.b64decode(%q).decode("utf-8"), "tests.py", "exec"), _ns)
except BaseException as e:
    _report(error="the tests failed to load: " + _err(e) + "\n" + "".join(_tb.format_exception(type(e), e, e.__traceback__)[-3:]))
    _sys.exit(0)
_passed, _total, _failures = 0, 0, []
def _fail(name, m):
    _failures.append({"name": name, "message": m[:2000]})
class _Result(_unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.bad = set()
    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.bad.add(test.id())
        _fail(test.id().removeprefix("tests."), _msg(err[1]))
    def addError(self, test, err):
        super().addError(test, err)
        self.bad.add(getattr(test, "id", lambda: str(test))())
        _fail(str(test.id()).removeprefix("tests."), _err(err[1]))
    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.bad.add(test.id())
            _fail(subtest.id().removeprefix("tests."), _msg(err[1]) if issubclass(err[0], AssertionError) else _err(err[1]))
for _name, _obj in list(_ns.items()):
    if _name.startswith("test") and _inspect.isfunction(_obj) and _obj.__module__ == "tests":
        if _inspect.signature(_obj).parameters:
            continue
        _total += 1
        try:
            _r = _obj()
            if _inspect.iscoroutine(_r):
                import asyncio as _asyncio
                _asyncio.run(_r)
            _passed += 1
        except BaseException as e:
            _fail(_name, _msg(e))
    elif _inspect.isclass(_obj) and issubclass(_obj, _unittest.TestCase) and _obj.__module__ == "tests":
        _suite = _unittest.defaultTestLoader.loadTestsFromTestCase(_obj)
        _res = _Result()
        _suite.run(_res)
        _ran = _res.testsRun - len(_res.skipped)
        _total += _ran
        _passed += max(0, _ran - len(_res.bad))
_report(passed=_passed, total=_total, failures=_failures)
`

// jsHarness runs code, then tests, as scripts in the main realm (so
// top-level declarations are shared and deepStrictEqual sees one set of
// built-ins), with test/it/describe and assert predefined; registered tests
// and test* functions run in order, awaiting promises.
func jsHarness(marker, code, tests string) string {
	return fmt.Sprintf(jsHarnessSrc, marker, b64(code), b64(tests))
}

const jsHarnessSrc = `"use strict";
const __vm = require("node:vm");
const __MARK = %q;
const __src = (s) => Buffer.from(s, "base64").toString("utf8");
const __report = (o) => { process.stdout.write("\n" + __MARK + JSON.stringify(o) + "\n"); };
const __errText = (e) => {
  if (e && typeof e === "object" && "message" in e) {
    return (e.name && e.name !== "Error" ? e.name + ": " : "") + String(e.message);
  }
  return String(e);
};
const __tests = [];
let __prefix = [];
globalThis.require = require;
globalThis.module = module;
globalThis.exports = module.exports;
globalThis.assert = require("node:assert");
globalThis.test = globalThis.it = (name, fn) => {
  if (typeof name === "function") { fn = name; name = fn.name || "test " + (__tests.length + 1); }
  __tests.push({ name: [...__prefix, String(name)].join(" > "), fn });
};
globalThis.describe = (name, fn) => {
  __prefix.push(String(name));
  try { fn(); } finally { __prefix.pop(); }
};
const __before = new Set(Object.getOwnPropertyNames(globalThis));
(async () => {
  try {
    __vm.runInThisContext(__src(%q), { filename: "solution.js" });
  } catch (e) {
    __report({ error: "the code failed to load: " + (e && e.stack ? String(e.stack).split("\n").slice(0, 4).join("\n") : __errText(e)) });
    process.exit(0);
  }
  const __fromCode = new Set(Object.getOwnPropertyNames(globalThis));
  try {
    __vm.runInThisContext(__src(%q), { filename: "tests.js" });
  } catch (e) {
    __report({ error: "the tests failed to load: " + (e && e.stack ? String(e.stack).split("\n").slice(0, 4).join("\n") : __errText(e)) });
    process.exit(0);
  }
  for (const k of Object.getOwnPropertyNames(globalThis)) {
    if (__before.has(k) || __fromCode.has(k) || !/^test/.test(k)) continue;
    const v = globalThis[k];
    if (typeof v === "function" && !__tests.some((t) => t.fn === v)) __tests.push({ name: k, fn: v });
  }
  let passed = 0;
  const failures = [];
  for (const t of __tests) {
    try {
      await t.fn();
      passed++;
    } catch (e) {
      failures.push({ name: t.name, message: __errText(e).slice(0, 2000) });
    }
  }
  __report({ passed, total: __tests.length, failures });
  process.exit(0);
})();
`
