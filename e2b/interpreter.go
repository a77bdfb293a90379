package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// Port 49999 is @e2b/code-interpreter's: cells on the session's kernel
// (a code-interpreter-v1 sandbox is a kernel session). The SDK posts
// /execute and reads NDJSON lines as they come; each /v1 stream event of
// the cell (POST /v1/sessions/{id}/execute, Server-Sent Events) becomes
// its line as it arrives. A session has one kernel, so there is one
// context, the default: creating a python context returns it, restarting
// it restarts the kernel, removing it restarts the kernel too (its state
// is gone, as E2B's removal leaves it), and any other context id is 404.

const (
	// interpreterPort is the code interpreter's port; the SDK names it
	// in E2b-Sandbox-Port.
	interpreterPort = "49999"
	// defaultContext is the id of the session's one context: its kernel.
	defaultContext = "default"
	// maxCode bounds the /execute body (the /v1 execute's own body cap
	// applies again behind it).
	maxCode = 4 << 20
)

func (h *Handler) mountInterpreter() {
	p := SandboxPrefix
	h.ci.Handle("GET "+p+"/health", h.interpreter(h.health))
	h.ci.Handle("POST "+p+"/execute", h.interpreter(h.execute))
	h.ci.Handle("GET "+p+"/contexts", h.interpreter(h.listContexts))
	h.ci.Handle("POST "+p+"/contexts", h.interpreter(h.createContext))
	h.ci.Handle("POST "+p+"/contexts/{ctx}/restart", h.interpreter(h.restartContext))
	h.ci.Handle("DELETE "+p+"/contexts/{ctx}", h.interpreter(h.restartContext))
	h.ci.Handle(p+"/", h.interpreter(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no route "+r.Method+" "+strings.TrimPrefix(r.URL.Path, SandboxPrefix)+" in the code interpreter")
	}))
}

// interpreter authenticates port 49999's traffic and refuses it for a
// sandbox without a kernel (base): /v1 would run its cells as fresh
// processes, each forgetting the last, which is not what the SDK means.
func (h *Handler) interpreter(f http.HandlerFunc) http.Handler {
	return h.sandboxOn(interpreterPort, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := targetOf(r.Context())
		if !templates[t.template].kernel {
			writeError(w, http.StatusBadRequest, "sandbox "+t.id+" has no code interpreter: create it from the code-interpreter-v1 template")
			return
		}
		f(w, r)
	}))
}

// codeContext is the SDK's Context.
type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func theContext() codeContext {
	return codeContext{ID: defaultContext, Language: "python", Cwd: e2bHome}
}

// checkLanguage refuses a language we have no kernel for.
func checkLanguage(lang string) error {
	switch strings.ToLower(lang) {
	case "", "python", "python3":
		return nil
	}
	return errf(http.StatusBadRequest, "language "+strconvQuote(lang)+" has no kernel in sandboxapi: the code interpreter runs python only")
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// checkContext refuses a context other than the session's one.
func checkContext(id string) error {
	if id == "" || id == defaultContext {
		return nil
	}
	return errf(http.StatusNotFound, "context "+strconvQuote(id)+" not found: a sandboxapi sandbox has one context, "+strconvQuote(defaultContext)+" (its kernel)")
}

// listContexts: GET /contexts -> the one context.
func (h *Handler) listContexts(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, []codeContext{theContext()})
}

// createContext: POST /contexts {language, cwd} -> the one context, for
// python in the home; what would need a second kernel is refused.
func (h *Handler) createContext(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := decodeBody(w, r, &b); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := checkLanguage(b.Language); err != nil {
		h.fail(w, r, err)
		return
	}
	if b.Cwd != "" && strings.TrimRight(b.Cwd, "/") != e2bHome {
		h.fail(w, r, errf(http.StatusBadRequest, "cwd "+strconvQuote(b.Cwd)+" is not available: a sandboxapi sandbox has one context, its kernel, in "+e2bHome))
		return
	}
	writeJSON(w, http.StatusOK, theContext())
}

// restartContext: POST /contexts/{id}/restart and DELETE /contexts/{id}
// -> the session's kernel restarted (every variable gone).
func (h *Handler) restartContext(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	if err := checkContext(r.PathValue("ctx")); err != nil {
		h.fail(w, r, err)
		return
	}
	if _, err := t.caller.call(http.MethodPost, "/v1/sessions/"+url.PathEscape(t.id)+"/kernel/restart", nil, nil); err != nil {
		h.interpreterFail(w, r, err, t.id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// interpreterFail is sandboxFail, saying what a sandbox without a kernel
// (made from base) needs.
func (h *Handler) interpreterFail(w http.ResponseWriter, r *http.Request, err error, id string) {
	var ae *apiError
	if errors.As(err, &ae) && ae.Code == "no_kernel" {
		writeError(w, http.StatusBadRequest, "sandbox "+id+" has no code interpreter: create it from the code-interpreter-v1 template")
		return
	}
	h.sandboxFail(w, r, err, id)
}

// executeBody is the SDK's /execute body.
type executeBody struct {
	Code      *string           `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// execute: POST /execute -> NDJSON lines of the cell as it runs.
func (h *Handler) execute(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	var b executeBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCode))
	if err := dec.Decode(&b); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			h.fail(w, r, errf(http.StatusRequestEntityTooLarge, "request body is over 4 MiB"))
			return
		}
		h.fail(w, r, errf(http.StatusBadRequest, "request body is not valid JSON: "+err.Error()))
		return
	}
	switch {
	case b.Code == nil:
		h.fail(w, r, errf(http.StatusBadRequest, "code is required"))
		return
	case len(b.EnvVars) > 0:
		// /v1 applies env only when the kernel starts: taking them for
		// one cell would ignore them silently.
		h.fail(w, r, errf(http.StatusBadRequest, "envs per cell are not supported by sandboxapi: the kernel keeps the sandbox's envs (set them at create)"))
		return
	}
	if err := checkLanguage(b.Language); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := checkContext(b.ContextID); err != nil {
		h.fail(w, r, err)
		return
	}
	body, err := json.Marshal(wire.ExecuteRequest{Code: b.Code, Stream: true})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	req, err := t.caller.newRequest(http.MethodPost, "/v1/sessions/"+url.PathEscape(t.id)+"/execute", bytes.NewReader(body), int64(len(body)))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	h.cell(w, r, t, req)
}

// cell runs the /v1 stream req and writes its events to w as NDJSON
// lines, flushing each. The /v1 call runs in process into a pipe (as a
// process's output does, procstream.go): when the SDK leaves, the call is
// cancelled (which interrupts the cell) and waited for.
func (h *Handler) cell(w http.ResponseWriter, r *http.Request, t *target, req *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	req = req.WithContext(ctx)
	pr, pw := io.Pipe()
	sw := newStreamWriter(pw)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			v := recover()
			if v != nil && v != http.ErrAbortHandler {
				h.log.Error("e2b: panic in a cell's stream", "sandbox", t.id, "panic", v, "stack", string(debug.Stack()))
			}
			sw.headerOnce()
			if v != nil {
				pw.CloseWithError(errStreamAborted)
				return
			}
			pw.Close()
		}()
		h.api.ServeHTTP(sw, req)
	}()
	defer func() {
		cancel()
		pr.CloseWithError(errFollowEnded)
		<-done
	}()
	select {
	case <-sw.header:
	case <-ctx.Done():
		return
	}
	if sw.status != http.StatusOK {
		rec := newRecorder(64 << 10)
		rec.status = sw.status
		rec.hdr = sw.hdr.Clone()
		_, _ = io.Copy(rec, io.LimitReader(pr, 64<<10))
		h.interpreterFail(w, r, rec.apiError(), t.id)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	lw := &lineWriter{w: w, rc: rc}
	tr := &cellTranslator{out: lw}
	ended, err := readSSE(pr, maxCellLine, func(event string, data []byte) (bool, error) {
		return tr.event(event, data) || lw.err != nil, nil
	}, nil)
	if ended || ctx.Err() != nil {
		return
	}
	if err != nil {
		h.log.Warn("e2b: reading a cell's stream", "sandbox", t.id, "err", err)
		tr.fail("SandboxError", "reading the cell's output failed")
		return
	}
	// The stream ended without a result: the session went away under it.
	tr.fail("SandboxError", "sandbox "+t.id+" stopped serving the cell before it ended")
}

// maxCellLine bounds one line of the /v1 stream: a display event holds a
// whole MIME bundle (a PNG as base64), which the kernel caps at the
// plan's output size.
const maxCellLine = 64 << 20

// lineWriter writes NDJSON lines, flushing each; after a failed write
// (the SDK left) it writes nothing more.
type lineWriter struct {
	w   io.Writer
	rc  *http.ResponseController
	err error
}

func (l *lineWriter) line(v any) {
	if l.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		l.err = err
		return
	}
	if _, l.err = l.w.Write(append(b, '\n')); l.err == nil && l.rc != nil {
		_ = l.rc.Flush()
	}
}

// cellTranslator turns a cell's /v1 stream events into the SDK's lines.
type cellTranslator struct {
	out       *lineWriter
	displayed int // results sent as display events
}

// event translates one /v1 event; it returns true after the last.
func (c *cellTranslator) event(event string, data []byte) bool {
	switch event {
	case "stdout", "stderr":
		var chunk wire.StreamChunk
		if json.Unmarshal(data, &chunk) == nil && chunk.Data != "" {
			c.out.line(map[string]any{"type": event, "text": chunk.Data})
		}
	case "display":
		var d wire.CellResult
		if json.Unmarshal(data, &d) == nil {
			c.displayed++
			c.out.line(resultLine(d))
		}
	case "result":
		var res wire.ExecuteResult
		if err := json.Unmarshal(data, &res); err != nil {
			c.fail("SandboxError", "unreadable result of the cell")
			return true
		}
		c.result(res)
		return true
	case "error":
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		c.fail("SandboxError", e2bMessage(e.Message))
		return true
	}
	return false
}

// result sends what the final reply adds to the events: results no
// display event carried, the restarted kernel (never silent: a stderr
// line, as the SDK has no field for it), the exception or a cell ended
// by a limit, and the end.
func (c *cellTranslator) result(res wire.ExecuteResult) {
	if res.KernelRestarted {
		c.out.line(map[string]any{"type": "stderr", "text": kernelRestartedNote})
	}
	for _, d := range res.Results[min(c.displayed, len(res.Results)):] {
		c.out.line(resultLine(d))
	}
	switch {
	case res.Error != nil:
		c.out.line(errorLine(res.Error.Name, res.Error.Value, strings.Join(res.Error.Traceback, "\n")))
	case res.Status == "timeout":
		c.out.line(errorLine("TimeoutError", "the cell ran past its time limit and was interrupted", ""))
	case res.Status == "oom":
		c.out.line(errorLine("MemoryError", "the cell went over the memory limit: the kernel was restarted and every variable is gone", ""))
	case res.Status == "output_limit":
		c.out.line(errorLine("OutputLimitError", "the cell's output went over the limit and was cut", ""))
	}
	c.out.line(map[string]any{"type": "end_of_execution"})
}

// fail ends the cell's lines with an error the SDK reports as the
// execution's error.
func (c *cellTranslator) fail(name, msg string) {
	c.out.line(errorLine(name, msg, ""))
	c.out.line(map[string]any{"type": "end_of_execution"})
}

// kernelRestartedNote is the stderr line of a cell that ran on a fresh
// kernel the caller did not ask for.
const kernelRestartedNote = "[sandboxapi] the kernel was restarted before this cell (it died, or the sandbox lost its memory): earlier variables are gone\n"

func errorLine(name, value, traceback string) map[string]any {
	return map[string]any{"type": "error", "name": name, "value": value, "traceback": traceback}
}

// mimeKeys maps a Jupyter MIME type onto the SDK's result key; another
// MIME type goes under its own name (the SDK's Result.extra).
var mimeKeys = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
}

// resultLine is the SDK's result line of one rich output.
func resultLine(d wire.CellResult) map[string]any {
	line := make(map[string]any, len(d.Data)+2)
	for mime, v := range d.Data {
		if k, ok := mimeKeys[mime]; ok {
			line[k] = v
			continue
		}
		line[mime] = v
	}
	line["type"] = "result"
	line["is_main_result"] = d.IsMainResult
	return line
}
