package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// kernelSandboxes is fakeSandboxes whose sessions keep their kernel flag
// and whose executes in a kernel session answer as a cell: one display
// output (streamed through OnDisplay) and a main result.
type kernelSandboxes struct {
	*fakeSandboxes
	restarts int
}

func (k *kernelSandboxes) CreateSession(ctx context.Context, spec sandbox.SessionSpec) (sandbox.Session, error) {
	s, err := k.fakeSandboxes.CreateSession(ctx, spec)
	if err != nil {
		return s, err
	}
	s.Kernel = spec.Kernel
	k.mu.Lock()
	k.sessions[s.ID] = s
	k.mu.Unlock()
	return s, nil
}

func (k *kernelSandboxes) Execute(ctx context.Context, owner, id string, req sandbox.ExecRequest) (sandbox.Result, error) {
	s, err := k.GetSession(ctx, owner, id)
	if err != nil || !s.Kernel {
		return k.fakeSandboxes.Execute(ctx, owner, id, req)
	}
	if req.OnOutput != nil {
		req.OnOutput("stdout", []byte("before\n"))
	}
	plot := sandbox.CellResult{Type: "display_data", Data: map[string]any{"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}}
	if req.OnDisplay != nil {
		req.OnDisplay(plot)
	}
	main := sandbox.CellResult{Type: "execute_result", IsMainResult: true, Data: map[string]any{"text/plain": "42"}}
	return sandbox.Result{Stdout: "before\n", Status: sandbox.StatusOK, Results: []sandbox.CellResult{plot, main}}, nil
}

func (k *kernelSandboxes) RestartKernel(ctx context.Context, owner, id string) (sandbox.Session, error) {
	s, err := k.GetSession(ctx, owner, id)
	if err != nil {
		return s, err
	}
	if !s.Kernel {
		return s, sandbox.ErrNoKernel
	}
	k.restarts++
	return s, nil
}

func TestKernelSessionRoutes(t *testing.T) {
	t.Parallel()
	ks := &kernelSandboxes{fakeSandboxes: newFakeSandboxes()}
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) {
		d.Sandboxes = ks
		d.Kernels = ks
	})

	// Refused before anything is made: a language without a kernel.
	for _, lang := range []string{"bash", "BASH"} {
		w := networkCall(srv, "POST", "/v1/sessions", "PRO", `{"language":"`+lang+`","kernel":true}`)
		if w.Code != http.StatusBadRequest || errCode(t, w) != "kernel_unsupported" {
			t.Fatalf("%s kernel: %d %s", lang, w.Code, w.Body)
		}
	}
	if ks.creates != 0 {
		t.Fatalf("%d creates reached the executor", ks.creates)
	}
	if w := networkCall(srv, "POST", "/v1/sessions", "PRO", `{"language":"python3","kernel":"yes"}`); w.Code != http.StatusBadRequest {
		t.Fatalf("kernel as a string: %d %s", w.Code, w.Body)
	}

	w := networkCall(srv, "POST", "/v1/sessions", "PRO", `{"language":"python","kernel":true}`)
	var sess wire.Session
	if w.Code != http.StatusCreated || json.Unmarshal(w.Body.Bytes(), &sess) != nil || !sess.Kernel {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}

	// JSON: results in the reply.
	w = networkCall(srv, "POST", "/v1/sessions/"+sess.ID+"/execute", "PRO", `{"code":"x"}`)
	var res wire.ExecuteResult
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &res) != nil || len(res.Results) != 2 || !res.Results[1].IsMainResult {
		t.Fatalf("execute: %d %s", w.Code, w.Body)
	}

	// Stream: stdout, the display event, then the result.
	w = networkCall(srv, "POST", "/v1/sessions/"+sess.ID+"/execute", "PRO", `{"code":"x","stream":true}`)
	var events []string
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, ev)
		}
	}
	if got := strings.Join(events, ","); got != "stdout,display,result" || !strings.Contains(w.Body.String(), `"image/png":"iVBORw0KGgo="`) {
		t.Fatalf("stream events %s:\n%s", got, w.Body)
	}

	if w := networkCall(srv, "POST", "/v1/sessions/"+sess.ID+"/kernel/restart", "PRO", ""); w.Code != http.StatusOK || ks.restarts != 1 {
		t.Fatalf("restart: %d %s", w.Code, w.Body)
	}
	w = networkCall(srv, "POST", "/v1/sessions", "PRO", `{"language":"python3"}`)
	var plain wire.Session
	if err := json.Unmarshal(w.Body.Bytes(), &plain); err != nil || plain.Kernel {
		t.Fatalf("plain create: %s", w.Body)
	}
	if w := networkCall(srv, "POST", "/v1/sessions/"+plain.ID+"/kernel/restart", "PRO", ""); w.Code != http.StatusConflict || errCode(t, w) != "no_kernel" {
		t.Fatalf("restart of a plain session: %d %s", w.Code, w.Body)
	}
	if w := networkCall(srv, "POST", "/v1/sessions/nope/kernel/restart", "PRO", ""); w.Code != http.StatusNotFound {
		t.Fatalf("restart of no session: %d %s", w.Code, w.Body)
	}
	if w := networkCall(srv, "POST", "/v1/sessions/"+sess.ID+"/kernel/restart", "", ""); w.Code != http.StatusUnauthorized {
		t.Fatalf("restart without a key: %d", w.Code)
	}
}
