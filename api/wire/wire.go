// Package wire is the single definition of every JSON request and reply
// the REST API exchanges: package api decodes the requests and writes the
// replies, and mcp, bench and the tests (the console's and the end-to-end
// ones) send and read them. It is a leaf (types and pure conversions, no I/O); the shapes
// are the contract of api/openapi.json, whose component schemas a test in
// package api checks against these types field by field, so a field
// changes here and there together. The error envelope is
// internal/httperr's Body.
package wire

import (
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// ExecuteResult is the reply of POST /v1/execute and
// POST /v1/sessions/{id}/execute (and the `result` event of a stream).
type ExecuteResult struct {
	ExecutionID string         `json:"execution_id,omitempty" jsonschema:"the execution's id"`
	Stdout      string         `json:"stdout" jsonschema:"standard output (capped)"`
	Stderr      string         `json:"stderr" jsonschema:"standard error (capped)"`
	ExitCode    int            `json:"exit_code" jsonschema:"the process exit code"`
	Signal      string         `json:"signal" jsonschema:"the signal that ended the process, if any"`
	Status      sandbox.Status `json:"status" jsonschema:"ok, error (non-zero exit), timeout, oom, output_limit or compile_error"`
	// DurationMS is CompileMS plus RunMS: the call's time in the sandbox.
	DurationMS int64 `json:"duration_ms" jsonschema:"time in the sandbox in milliseconds: compile_ms plus run_ms"`
	// CompileMS is the compile step's time (0 for interpreted languages);
	// RunMS is the program's.
	CompileMS int64 `json:"compile_ms" jsonschema:"the compile step's time in milliseconds (0 for interpreted languages)"`
	RunMS     int64 `json:"run_ms" jsonschema:"the program's own run time in milliseconds"`
	Truncated bool  `json:"truncated" jsonschema:"true when output was cut at the cap"`
	// ResumedMS is set when this call first resumed the hibernated
	// session: how long the resume took.
	ResumedMS int64 `json:"resumed_ms,omitempty" jsonschema:"how long resuming the hibernated session took, in milliseconds"`
	// Results, Error and KernelRestarted are a kernel session's: the
	// cell's rich outputs (the last expression's value is the main
	// result), the exception it raised, and whether the kernel was lost
	// since the last reply (earlier variables are gone).
	Results         []CellResult `json:"results,omitempty" jsonschema:"a kernel cell's rich outputs (Jupyter MIME bundles), in order"`
	Error           *CellError   `json:"error,omitempty" jsonschema:"the exception a kernel cell raised"`
	KernelRestarted bool         `json:"kernel_restarted,omitempty" jsonschema:"the kernel was lost since the last reply and a fresh one ran this cell: earlier variables are gone"`
	// MemoryRestored is set when the resume this call waited for had
	// memory to bring back (live state): whether it did; never silent.
	MemoryRestored   *bool  `json:"memory_restored,omitempty" jsonschema:"whether the resume restored the session's memory (present when it had memory to bring back)"`
	MemoryLostReason string `json:"memory_lost_reason,omitempty" jsonschema:"why the session's memory could not be restored"`
}

// CellResult is one rich output of a kernel cell (a Jupyter MIME bundle):
// type execute_result (the last expression's value, is_main_result true)
// or display_data, and data from MIME type to value (text/plain,
// text/html, text/markdown, image/svg+xml, image/png as base64,
// application/json as a JSON value). It is also the data of a stream's
// `display` event.
type CellResult = sandbox.CellResult

// CellError is the exception a kernel cell raised: its name, its value
// and the traceback without ANSI colour codes.
type CellError = sandbox.CellError

// ExecuteResultOf is r as the API reports it.
func ExecuteResultOf(r sandbox.Result) ExecuteResult {
	out := ExecuteResult{
		ExecutionID: r.ExecutionID, Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode, Signal: r.Signal,
		Status: r.Status, DurationMS: r.DurationMS, CompileMS: r.CompileMS, RunMS: r.RunMS, Truncated: r.Truncated,
		ResumedMS: r.ResumedMS, Results: r.Results, Error: r.Error, KernelRestarted: r.KernelRestarted,
	}
	out.MemoryRestored, out.MemoryLostReason = memoryOf(r.Memory)
	return out
}

// memoryOf is a resume's memory outcome as the API spells it.
func memoryOf(m *sandbox.MemoryOutcome) (*bool, string) {
	if m == nil {
		return nil, ""
	}
	restored := m.Restored
	return &restored, m.Reason
}

// UsageTotal is one row of GET /v1/usage: a key's metered usage summed
// per UTC day and route.
type UsageTotal struct {
	KeyID    string `json:"key_id,omitempty"`
	Day      string `json:"day"`
	Route    string `json:"route"`
	Requests int64  `json:"requests"`
	Errors   int64  `json:"errors"`
	BytesIn  int64  `json:"bytes_in"`
	BytesOut int64  `json:"bytes_out"`
	ExecMS   int64  `json:"execution_ms"`
	// DurationMS is the wall time spent answering the requests.
	DurationMS int64 `json:"duration_ms"`
}

// Usage is the reply of GET /v1/usage.
type Usage struct {
	KeyID string       `json:"key_id"`
	Plan  string       `json:"plan"`
	Usage []UsageTotal `json:"usage"`
}

// EgressDecision is one entry of GET /v1/sessions/{id}/egress: an allow or
// deny decision of the egress proxy. A row may stand for several decisions
// (Count; First and Last set when it does).
type EgressDecision struct {
	Time       time.Time  `json:"time"`
	Mode       string     `json:"mode"`
	Host       string     `json:"host"`
	Port       uint16     `json:"port"`
	Addr       string     `json:"addr,omitempty"`
	Outcome    string     `json:"outcome"`
	Reason     string     `json:"reason"`
	BytesUp    int64      `json:"bytes_up"`
	BytesDown  int64      `json:"bytes_down"`
	DurationMS int64      `json:"duration_ms"`
	Count      int        `json:"count"`
	First      *time.Time `json:"first,omitempty"`
	Last       *time.Time `json:"last,omitempty"`
	Summary    bool       `json:"summary,omitempty"`
	// Credential is set when the proxy added a session credential on
	// the connection.
	Credential bool `json:"credential,omitempty"`
}
