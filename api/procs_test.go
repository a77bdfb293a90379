package api

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// fakeProcesses answers the process routes: pid 7 exists in session s1
// of id-PRO; err, when set, is every call's answer.
type fakeProcesses struct {
	err      error
	lastFrom int64
	follow   bool
	stdin    []byte
	eof      bool
	signal   string
	size     sandbox.TermSize
	spec     sandbox.ProcessSpec
	pids     []int // every pid that reached the fake
}

func (f *fakeProcesses) find(owner, id string, pid int) error {
	f.pids = append(f.pids, pid)
	if f.err != nil {
		return f.err
	}
	if owner != "id-PRO" || id != "s1" {
		return sandbox.ErrNotFound
	}
	if pid != 7 {
		return sandbox.ErrProcessNotFound
	}
	return nil
}

func (f *fakeProcesses) proc() sandbox.Process {
	code := 0
	return sandbox.Process{PID: 7, Cmd: "cat", State: sandbox.ProcessExited, ExitCode: &code, StartedAt: time.Unix(1, 0), EndedAt: time.Unix(2, 0), OutputBytes: 9}
}

func (f *fakeProcesses) StartProcess(ctx context.Context, owner, id string, spec sandbox.ProcessSpec) (sandbox.Process, error) {
	f.spec = spec
	if f.err != nil {
		return sandbox.Process{}, f.err
	}
	return sandbox.Process{PID: 7, Cmd: spec.Cmd, Args: spec.Args, State: sandbox.ProcessRunning, StartedAt: time.Unix(1, 0)}, nil
}

func (f *fakeProcesses) ListProcesses(ctx context.Context, owner, id string) ([]sandbox.Process, error) {
	if err := f.find(owner, id, 7); err != nil {
		return nil, err
	}
	return []sandbox.Process{f.proc()}, nil
}

func (f *fakeProcesses) GetProcess(ctx context.Context, owner, id string, pid int) (sandbox.Process, error) {
	if err := f.find(owner, id, pid); err != nil {
		return sandbox.Process{}, err
	}
	return f.proc(), nil
}

func (f *fakeProcesses) ProcessOutput(ctx context.Context, owner, id string, pid int, from int64, follow bool, emit func(sandbox.ProcessEvent) error) error {
	f.lastFrom, f.follow = from, follow
	if err := emit(sandbox.ProcessEvent{Dropped: 2, Offset: 2}); err != nil {
		return err
	}
	if err := emit(sandbox.ProcessEvent{Stream: "stdout", Offset: 2, Data: []byte("out\n")}); err != nil {
		return err
	}
	if err := emit(sandbox.ProcessEvent{Stream: "stderr", Offset: 6, Data: []byte("er\n")}); err != nil {
		return err
	}
	p := f.proc()
	return emit(sandbox.ProcessEvent{Offset: 9, Exit: &p})
}

func (f *fakeProcesses) WriteProcessStdin(ctx context.Context, owner, id string, pid int, data []byte, eof bool) (int, error) {
	if err := f.find(owner, id, pid); err != nil {
		return 0, err
	}
	f.stdin, f.eof = data, eof
	return len(data), nil
}

func (f *fakeProcesses) SignalProcess(ctx context.Context, owner, id string, pid int, sig string) error {
	f.signal = sig
	return f.find(owner, id, pid)
}

func (f *fakeProcesses) ResizeProcess(ctx context.Context, owner, id string, pid int, size sandbox.TermSize) error {
	f.size = size
	return f.find(owner, id, pid)
}

func procServer(t *testing.T) (*Server, *fakeProcesses) {
	t.Helper()
	fp := &fakeProcesses{}
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.Processes = fp })
	return srv, fp
}

func procCall(srv *Server, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("X-RapidAPI-Key", "key-PRO")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	return w
}

func TestProcessRoutesHostilePIDs(t *testing.T) {
	srv, fp := procServer(t)
	for _, pid := range []string{"0", "-1", "+7", "07", "7.0", "abc", "4194305", "99999999999999999999", "%00", "7%20", "0x7"} {
		w := procCall(srv, "GET", "/v1/sessions/s1/processes/"+pid, "")
		if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), `"process_not_found"`) {
			t.Errorf("pid %q: %d %s", pid, w.Code, w.Body)
		}
	}
	if len(fp.pids) != 0 {
		t.Fatalf("hostile pids reached the executor: %v", fp.pids)
	}
	if w := procCall(srv, "GET", "/v1/sessions/s1/processes/7", ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"id":"7"`) {
		t.Fatalf("pid 7: %d %s", w.Code, w.Body)
	}
}

func TestProcessOutputSSE(t *testing.T) {
	srv, fp := procServer(t)
	w := procCall(srv, "GET", "/v1/sessions/s1/processes/7/output?follow=true", "", "Last-Event-ID", "5")
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", w.Code, w.Body)
	}
	if fp.lastFrom != 5 || !fp.follow {
		t.Fatalf("from %d follow %v, want 5 and true", fp.lastFrom, fp.follow)
	}
	want := "id: 2\nevent: dropped\ndata: {\"dropped\":2,\"offset\":2}\n\n" +
		"id: 6\nevent: stdout\ndata: {\"data\":\"out\\n\",\"offset\":2}\n\n" +
		"id: 9\nevent: stderr\ndata: {\"data\":\"er\\n\",\"offset\":6}\n\n" +
		"event: exit\ndata: {\"id\":\"7\",\"pid\":7,\"cmd\":\"cat\",\"args\":[],\"pty\":false,\"stdin\":false,\"state\":\"exited\",\"exit_code\":0,"
	if got := w.Body.String(); !strings.HasPrefix(got, want) {
		t.Fatalf("stream:\n%s\nwant prefix:\n%s", got, want)
	}
	// from wins over Last-Event-ID; a bad one is a 400 before any stream.
	procCall(srv, "GET", "/v1/sessions/s1/processes/7/output?from=3", "", "Last-Event-ID", "5")
	if fp.lastFrom != 3 || fp.follow {
		t.Fatalf("from %d follow %v, want 3 and false", fp.lastFrom, fp.follow)
	}
	for _, q := range []string{"from=-1", "from=x", "follow=perhaps", "from=1e3"} {
		if w := procCall(srv, "GET", "/v1/sessions/s1/processes/7/output?"+q, ""); w.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", q, w.Code, w.Body)
		}
	}
	if w := procCall(srv, "GET", "/v1/sessions/s1/processes/8/output", ""); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "process_not_found") {
		t.Fatalf("unknown process's output: %d %s", w.Code, w.Body)
	}
}

func TestProcessRoutesMapErrors(t *testing.T) {
	srv, fp := procServer(t)
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{sandbox.ErrProcessNotFound, 404, "process_not_found"},
		{sandbox.ErrProcessLimit, 409, "process_limit"},
		{sandbox.ErrProcessNotRunning, 409, "process_not_running"},
		{sandbox.ErrProcessNoStdin, 409, "process_stdin_closed"},
		{sandbox.ErrProcessStdinFull, 409, "process_stdin_full"},
		{sandbox.ErrProcessNotPTY, 409, "process_not_pty"},
		{sandbox.ErrProcessStart, 400, "process_start_failed"},
		{sandbox.ErrNoProcessChannel, 409, "process_channel_unavailable"},
		{fmt.Errorf("wrapped: %w", sandbox.ErrBadState), 409, "session_not_running"},
		{fmt.Errorf("guest process call failed: secret detail"), 500, "internal"},
	}
	for _, tt := range tests {
		fp.err = tt.err
		w := procCall(srv, "POST", "/v1/sessions/s1/processes/7/signal", `{"signal":"SIGTERM"}`)
		if w.Code != tt.status || !strings.Contains(w.Body.String(), `"`+tt.code+`"`) {
			t.Errorf("%v: %d %s, want %d %s", tt.err, w.Code, w.Body, tt.status, tt.code)
		}
		if strings.Contains(w.Body.String(), "secret detail") {
			t.Errorf("internal error text sent: %s", w.Body)
		}
	}
}

func TestProcessStdinAndStart(t *testing.T) {
	srv, fp := procServer(t)
	w := procCall(srv, "POST", "/v1/sessions/s1/processes/7/stdin?eof=true", "raw\x00bytes")
	if w.Code != http.StatusOK || !bytes.Equal(fp.stdin, []byte("raw\x00bytes")) || !fp.eof || !strings.Contains(w.Body.String(), `"written":9`) {
		t.Fatalf("stdin: %d %s %q %v", w.Code, w.Body, fp.stdin, fp.eof)
	}
	big := strings.Repeat("x", sandbox.MaxStdinWrite+1)
	if w := procCall(srv, "POST", "/v1/sessions/s1/processes/7/stdin", big); w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("stdin over the limit: %d %s", w.Code, w.Body)
	}
	w = procCall(srv, "POST", "/v1/sessions/s1/processes", `{"cmd":"npm","args":["run","dev"],"timeout":1.5,"pty":{"cols":80,"rows":24},"tag":"dev","env":{"A":"b"},"stdin":true}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("start: %d %s", w.Code, w.Body)
	}
	if s := fp.spec; s.Cmd != "npm" || len(s.Args) != 2 || s.Timeout != 1500*time.Millisecond || s.PTY == nil || s.PTY.Cols != 80 || s.Tag != "dev" || s.Env["A"] != "b" || !s.Stdin || s.MemoryBytes <= 0 {
		t.Fatalf("spec %+v", fp.spec)
	}
	for _, body := range []string{`{"cmd":"x","timeout":0}`, `{"cmd":"x","timeout":-2}`, `{"cmd":"x","pty":[]}`, `{"cmd":["x"]}`, `{"cmd":"x","bogus":1}`} {
		if w := procCall(srv, "POST", "/v1/sessions/s1/processes", body); w.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", body, w.Code, w.Body)
		}
	}
	// A huge timeout reaches the executor held at a Duration that does
	// not overflow, so that its bound (the longest idle TTL) is the one
	// the client reads.
	if w := procCall(srv, "POST", "/v1/sessions/s1/processes", `{"cmd":"x","timeout":1e300}`); w.Code != http.StatusCreated || fp.spec.Timeout != math.MaxInt32*time.Second {
		t.Errorf("timeout 1e300: %d %s, spec timeout %v", w.Code, w.Body, fp.spec.Timeout)
	}
	if w := procCall(srv, "POST", "/v1/sessions/s1/processes/7/resize", `{"cols":120,"rows":40}`); w.Code != http.StatusNoContent || fp.size != (sandbox.TermSize{Cols: 120, Rows: 40}) {
		t.Fatalf("resize: %d %s %+v", w.Code, w.Body, fp.size)
	}
}
