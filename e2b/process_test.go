package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxapi/sandboxapi/api/wire"
	procpb "github.com/sandboxapi/sandboxapi/e2b/internal/envdpb/process"
	"github.com/sandboxapi/sandboxapi/e2b/internal/envdpb/process/processconnect"
	"github.com/sandboxapi/sandboxapi/store"
)

// fakeProcs is /v1's processes at the adapter's seam, over fakeAPI for
// everything else: it records what the adapter asks and answers canned
// processes, output streams and errors.
type fakeProcs struct {
	*fakeAPI
	mu       sync.Mutex
	started  []wire.StartProcessRequest
	procs    map[int]wire.Process
	events   map[int][]string // SSE events per pid ("event\ndata")
	hold     map[int]bool     // a follow of this pid waits for its caller to leave
	panics   map[int]any      // a follow of this pid panics with this after its events
	startErr [2]string        // status, code of the next start
	stdin    []string
	signals  []string
	resizes  []wire.TermSize
	streams  int // output streams being served now
	nextPID  int
	session  string // the one session with processes
}

func newFakeProcs() *fakeProcs {
	return &fakeProcs{fakeAPI: newFakeAPI(), procs: map[int]wire.Process{}, events: map[int][]string{}, hold: map[int]bool{}, panics: map[int]any{}, nextPID: 100}
}

func (f *fakeProcs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/v1/sessions/")
	id, sub, _ := strings.Cut(rest, "/")
	if !strings.HasPrefix(sub, "processes") {
		f.fakeAPI.ServeHTTP(w, r)
		return
	}
	f.fakeAPI.mu.Lock()
	s := f.fakeAPI.sessions[id]
	owner := f.fakeAPI.keys[r.Header.Get("X-API-Key")]
	f.fakeAPI.mu.Unlock()
	if s == nil || s.owner != owner || owner == "" {
		apiFail(w, http.StatusNotFound, "not_found")
		return
	}
	f.mu.Lock()
	if s.state == "gone" {
		f.mu.Unlock()
		apiFail(w, http.StatusConflict, "session_not_running")
		return
	}
	sub = strings.TrimPrefix(sub, "processes")
	if sub == "" {
		defer f.mu.Unlock()
		switch r.Method {
		case http.MethodPost:
			if f.startErr[0] != "" {
				st, _ := strconv.Atoi(f.startErr[0])
				apiFail(w, st, f.startErr[1])
				f.startErr = [2]string{}
				return
			}
			var req wire.StartProcessRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				apiFail(w, http.StatusBadRequest, "invalid_json")
				return
			}
			f.started = append(f.started, req)
			f.nextPID++
			p := wire.Process{ID: strconv.Itoa(f.nextPID), PID: f.nextPID, Tag: req.Tag, Cmd: req.Cmd, Args: req.Args, PTY: req.PTY != nil, State: "running"}
			f.procs[p.PID] = p
			f.session = id
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(p)
		case http.MethodGet:
			l := wire.ProcessList{Processes: []wire.Process{}}
			if id == f.session {
				for _, p := range f.procs {
					l.Processes = append(l.Processes, p)
				}
				sort.Slice(l.Processes, func(i, j int) bool { return l.Processes[i].PID < l.Processes[j].PID })
			}
			_ = json.NewEncoder(w).Encode(l)
		}
		return
	}
	pidText, op, _ := strings.Cut(strings.TrimPrefix(sub, "/"), "/")
	pid, _ := strconv.Atoi(pidText)
	p, ok := f.procs[pid]
	if !ok || id != f.session {
		f.mu.Unlock()
		apiFail(w, http.StatusNotFound, "process_not_found")
		return
	}
	switch op {
	case "":
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(p)
	case "output":
		evs, hold, pv := f.events[pid], f.hold[pid], f.panics[pid]
		f.streams++
		f.mu.Unlock()
		defer func() { f.mu.Lock(); f.streams--; f.mu.Unlock() }()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, ev := range evs {
			name, data, _ := strings.Cut(ev, "\n")
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
			w.(http.Flusher).Flush()
		}
		if pv != nil {
			panic(pv)
		}
		if hold {
			for {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
				// Heartbeats until the caller leaves.
				if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	case "stdin":
		defer f.mu.Unlock()
		if p.State != "running" {
			apiFail(w, http.StatusConflict, "process_not_running")
			return
		}
		if !p.Stdin && !p.PTY {
			apiFail(w, http.StatusConflict, "process_stdin_closed")
			return
		}
		b, _ := io.ReadAll(r.Body)
		f.stdin = append(f.stdin, fmt.Sprintf("%d:%s:eof=%s", pid, b, r.URL.Query().Get("eof")))
		_ = json.NewEncoder(w).Encode(wire.StdinReply{Written: len(b)})
	case "signal":
		defer f.mu.Unlock()
		var req wire.SignalRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if p.State != "running" {
			apiFail(w, http.StatusConflict, "process_not_running")
			return
		}
		f.signals = append(f.signals, fmt.Sprintf("%d:%s", pid, req.Signal))
		w.WriteHeader(http.StatusNoContent)
	case "resize":
		defer f.mu.Unlock()
		if !p.PTY {
			apiFail(w, http.StatusConflict, "process_not_pty")
			return
		}
		var req wire.TermSize
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.resizes = append(f.resizes, req)
		w.WriteHeader(http.StatusNoContent)
	default:
		f.mu.Unlock()
		apiFail(w, http.StatusNotFound, "no_route")
	}
}

func (f *fakeProcs) activeStreams() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.streams
}

type procRig struct {
	t     *testing.T
	api   *fakeProcs
	srv   *httptest.Server
	sb    sandboxReply
	rpc   processconnect.ProcessClient
	other sandboxReply
}

func newProcRig(t *testing.T) *procRig {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "e2b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g := &procRig{t: t, api: newFakeProcs()}
	g.srv = httptest.NewServer(New(Deps{API: g.api, Records: st}))
	t.Cleanup(g.srv.Close)
	create := func(key string, body map[string]any) sandboxReply {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", g.srv.URL+"/e2b/v2/sandboxes", strings.NewReader(string(b)))
		req.Header.Set("X-API-Key", key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out sandboxReply
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusCreated {
			t.Fatalf("create: %d %v", res.StatusCode, err)
		}
		return out
	}
	g.sb = create("sk_a", map[string]any{"envVars": map[string]string{"GREETING": "hi", "WHO": "sandbox"}})
	g.other = create("sk_b", map[string]any{})
	g.api.session = g.sb.SandboxID
	g.rpc = processconnect.NewProcessClient(g.srv.Client(), g.srv.URL+"/e2b/sandbox")
	return g
}

// hdr sets the SDK's sandbox headers on a request.
func withSandbox[T any](sb sandboxReply, req *connect.Request[T]) *connect.Request[T] {
	for k, v := range sandboxHeaders(sb.SandboxID, sb.EnvdAccessToken) {
		req.Header().Set(k, v)
	}
	return req
}

// collect reads a start or connect stream to its end.
func collect[T interface{ GetEvent() *procpb.ProcessEvent }](s interface {
	Receive() bool
	Msg() T
	Err() error
	Close() error
}) ([]*procpb.ProcessEvent, error) {
	defer s.Close()
	var out []*procpb.ProcessEvent
	for s.Receive() {
		out = append(out, s.Msg().GetEvent())
	}
	return out, s.Err()
}

func pidSel(pid uint32) *procpb.ProcessSelector {
	return &procpb.ProcessSelector{Selector: &procpb.ProcessSelector_Pid{Pid: pid}}
}

func exitJSON(code int, signal string) string {
	p := wire.Process{State: "exited", ExitCode: &code, Signal: signal}
	b, _ := json.Marshal(p)
	return "exit\n" + string(b)
}

func chunkJSON(stream, data string) string {
	b, _ := json.Marshal(wire.ProcessOutputChunk{Data: data})
	return stream + "\n" + string(b)
}

// TestProcessStart: commands.run's start becomes one /v1 start (bash -l
// -c, the sandbox's env vars under the command's, the home mapped, the
// call's deadline as the timeout) and the output stream's events become
// envd's, in order, ending with Go's exit shapes.
func TestProcessStart(t *testing.T) {
	t.Parallel()
	g := newProcRig(t)
	g.api.events[101] = []string{chunkJSON("stdout", "a"), chunkJSON("stderr", "b"), `dropped` + "\n" + `{"dropped":5,"offset":5}`, chunkJSON("stdout", "c"), exitJSON(3, "")}
	cwd := "wd"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := g.rpc.Start(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.StartRequest{
		Process: &procpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo a"}, Envs: map[string]string{"WHO": "call"}, Cwd: &cwd},
		Tag:     ptr("job"),
	})))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := collect[*procpb.StartResponse](st)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	var got []string
	for _, e := range evs {
		switch v := e.GetEvent().(type) {
		case *procpb.ProcessEvent_Start:
			got = append(got, fmt.Sprintf("start %d", v.Start.GetPid()))
		case *procpb.ProcessEvent_Data:
			got = append(got, fmt.Sprintf("out %q %q", v.Data.GetStdout(), v.Data.GetStderr()))
		case *procpb.ProcessEvent_End:
			got = append(got, fmt.Sprintf("end %d %v %q %q", v.End.GetExitCode(), v.End.GetExited(), v.End.GetStatus(), v.End.GetError()))
		}
	}
	want := []string{"start 101", `out "a" ""`, `out "" "b"`, `out "c" ""`, `end 3 true "exit status 3" "exit status 3"`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	req := g.api.started[0]
	if req.Cmd != "/bin/bash" || strings.Join(req.Args, " ") != "-l -c echo a" || req.Cwd != "/home/sandbox/wd" || req.Tag != "job" || req.Stdin || req.PTY != nil {
		t.Fatalf("start request: %+v", req)
	}
	if req.Env["GREETING"] != "hi" || req.Env["WHO"] != "call" {
		t.Fatalf("env: %v, want the sandbox's under the call's", req.Env)
	}
	if req.Timeout == nil || *req.Timeout <= 0 || *req.Timeout > 30 {
		t.Fatalf("timeout %v, want the call's deadline (at most 30 s)", req.Timeout)
	}
	if n := g.api.activeStreams(); n != 0 {
		t.Fatalf("%d output streams still served after the end", n)
	}
}

func ptr[T any](v T) *T { return &v }

// TestProcessEndShapes: how a process's end reads to the SDK.
func TestProcessEndShapes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		p      wire.Process
		code   int32
		exited bool
		status string
		errMsg string
	}{
		{"success", wire.Process{ExitCode: ptr(0)}, 0, true, "exit status 0", ""},
		{"failure", wire.Process{ExitCode: ptr(1)}, 1, true, "exit status 1", "exit status 1"},
		{"exit 137 without a signal", wire.Process{ExitCode: ptr(137)}, 137, true, "exit status 137", "exit status 137"},
		{"killed", wire.Process{ExitCode: ptr(137), Signal: "SIGKILL"}, -1, false, "signal: killed", "signal: killed"},
		{"terminated", wire.Process{ExitCode: ptr(143), Signal: "SIGTERM"}, -1, false, "signal: terminated", "signal: terminated"},
		{"timed out", wire.Process{ExitCode: ptr(137), Signal: "SIGKILL", TimedOut: true}, -1, false, "signal: killed", "signal: killed (the command ran past its timeout)"},
		{"out of memory", wire.Process{ExitCode: ptr(137), Signal: "SIGKILL", OOMKilled: true}, -1, false, "signal: killed", "signal: killed (the sandbox ran out of memory)"},
	} {
		e := endEvent(c.p).GetEnd()
		if e.GetExitCode() != c.code || e.GetExited() != c.exited || e.GetStatus() != c.status || e.GetError() != c.errMsg || (c.errMsg == "") != (e.Error == nil) {
			t.Errorf("%s: %+v", c.name, e)
		}
	}
}

// TestProcessCalls: list, connect by pid and tag, input, close, signal
// and resize become the /v1 calls they name.
func TestProcessCalls(t *testing.T) {
	t.Parallel()
	g := newProcRig(t)
	ctx := context.Background()
	g.api.procs[7] = wire.Process{PID: 7, Cmd: "/bin/bash", Args: []string{"-l", "-c", "cat"}, State: "running", Stdin: true, Tag: "srv", OutputBytes: 40}
	g.api.procs[8] = wire.Process{PID: 8, Cmd: "/bin/bash", State: "exited"}
	g.api.procs[9] = wire.Process{PID: 9, Cmd: "/bin/bash", Args: []string{"-i", "-l"}, State: "running", PTY: true}
	l, err := g.rpc.List(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.ListRequest{})))
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, p := range l.Msg.GetProcesses() {
		pids = append(pids, fmt.Sprintf("%d:%s:%s", p.GetPid(), strings.Join(p.GetConfig().GetArgs(), " "), p.GetTag()))
	}
	if strings.Join(pids, ",") != "7:-l -c cat:srv,9:-i -l:" {
		t.Fatalf("list: %v (ended processes are not listed)", pids)
	}
	// Connect by tag follows from the process's latest byte.
	g.api.events[7] = []string{chunkJSON("stdout", "later"), exitJSON(0, "")}
	cs, err := g.rpc.Connect(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.ConnectRequest{Process: &procpb.ProcessSelector{Selector: &procpb.ProcessSelector_Tag{Tag: "srv"}}})))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := collect[*procpb.ConnectResponse](cs)
	if err != nil || len(evs) != 3 || evs[0].GetStart().GetPid() != 7 || string(evs[1].GetData().GetStdout()) != "later" || evs[2].GetEnd() == nil {
		t.Fatalf("connect by tag: %v %v", evs, err)
	}
	if _, err := g.rpc.SendInput(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.SendInputRequest{Process: pidSel(7), Input: &procpb.ProcessInput{Input: &procpb.ProcessInput_Stdin{Stdin: []byte("x\n")}}}))); err != nil {
		t.Fatal(err)
	}
	if _, err := g.rpc.SendInput(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.SendInputRequest{Process: pidSel(9), Input: &procpb.ProcessInput{Input: &procpb.ProcessInput_Pty{Pty: []byte("ls\r")}}}))); err != nil {
		t.Fatal(err)
	}
	if _, err := g.rpc.CloseStdin(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.CloseStdinRequest{Process: pidSel(7)}))); err != nil {
		t.Fatal(err)
	}
	in := g.rpc.StreamInput(ctx)
	for k, v := range sandboxHeaders(g.sb.SandboxID, g.sb.EnvdAccessToken) {
		in.RequestHeader().Set(k, v)
	}
	_ = in.Send(&procpb.StreamInputRequest{Event: &procpb.StreamInputRequest_Start{Start: &procpb.StreamInputRequest_StartEvent{Process: pidSel(7)}}})
	_ = in.Send(&procpb.StreamInputRequest{Event: &procpb.StreamInputRequest_Data{Data: &procpb.StreamInputRequest_DataEvent{Input: &procpb.ProcessInput{Input: &procpb.ProcessInput_Stdin{Stdin: []byte("s1")}}}}})
	_ = in.Send(&procpb.StreamInputRequest{Event: &procpb.StreamInputRequest_Keepalive{Keepalive: &procpb.StreamInputRequest_KeepAlive{}}})
	_ = in.Send(&procpb.StreamInputRequest{Event: &procpb.StreamInputRequest_Data{Data: &procpb.StreamInputRequest_DataEvent{Input: &procpb.ProcessInput{Input: &procpb.ProcessInput_Stdin{Stdin: []byte("s2")}}}}})
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatalf("stream input: %v", err)
	}
	if got := strings.Join(g.api.stdin, ","); got != "7:x\n:eof=,9:ls\r:eof=,7::eof=true,7:s1:eof=,7:s2:eof=" {
		t.Fatalf("stdin calls: %q", got)
	}
	if _, err := g.rpc.SendSignal(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.SendSignalRequest{Process: pidSel(7), Signal: procpb.Signal_SIGNAL_SIGKILL}))); err != nil {
		t.Fatal(err)
	}
	if _, err := g.rpc.SendSignal(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.SendSignalRequest{Process: pidSel(9), Signal: procpb.Signal_SIGNAL_SIGTERM}))); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(g.api.signals, ","); got != "7:SIGKILL,9:SIGTERM" {
		t.Fatalf("signals: %q", got)
	}
	if _, err := g.rpc.Update(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.UpdateRequest{Process: pidSel(9), Pty: &procpb.PTY{Size: &procpb.PTY_Size{Cols: 100, Rows: 40}}}))); err != nil {
		t.Fatal(err)
	}
	if len(g.api.resizes) != 1 || g.api.resizes[0] != (wire.TermSize{Cols: 100, Rows: 40}) {
		t.Fatalf("resizes: %v", g.api.resizes)
	}
}

// TestProcessErrors: every refusal is the Connect code E2B's SDK maps
// (NotFound: kill answers false; ResourceExhausted; Unavailable: the
// sandbox is gone), and a refused start starts nothing.
func TestProcessErrors(t *testing.T) {
	t.Parallel()
	g := newProcRig(t)
	ctx := context.Background()
	g.api.procs[7] = wire.Process{PID: 7, State: "running"}
	g.api.procs[8] = wire.Process{PID: 8, State: "exited"}
	start := func(sb sandboxReply, m *procpb.StartRequest, h map[string]string) error {
		req := withSandbox(sb, connect.NewRequest(m))
		for k, v := range h {
			req.Header().Set(k, v)
		}
		st, err := g.rpc.Start(ctx, req)
		if err != nil {
			return err
		}
		_, err = collect[*procpb.StartResponse](st)
		return err
	}
	cmd := &procpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "true"}}
	nul, long := "a\x00b", strings.Repeat("d/", 2100)
	cases := []struct {
		name string
		call func() error
		code connect.Code
	}{
		{"no cmd", func() error { return start(g.sb, &procpb.StartRequest{Process: &procpb.ProcessConfig{}}, nil) }, connect.CodeInvalidArgument},
		{"cwd with NUL", func() error {
			return start(g.sb, &procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "x", Cwd: &nul}}, nil)
		}, connect.CodeInvalidArgument},
		{"cwd too long", func() error {
			return start(g.sb, &procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "x", Cwd: &long}}, nil)
		}, connect.CodeInvalidArgument},
		{"pty of no size", func() error {
			return start(g.sb, &procpb.StartRequest{Process: cmd, Pty: &procpb.PTY{Size: &procpb.PTY_Size{Cols: 0, Rows: 5}}}, nil)
		}, connect.CodeInvalidArgument},
		{"pty too big", func() error {
			return start(g.sb, &procpb.StartRequest{Process: cmd, Pty: &procpb.PTY{Size: &procpb.PTY_Size{Cols: 5000, Rows: 5}}}, nil)
		}, connect.CodeInvalidArgument},
		{"as root", func() error {
			return start(g.sb, &procpb.StartRequest{Process: cmd}, map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))})
		}, connect.CodePermissionDenied},
		{"unreadable user", func() error {
			return start(g.sb, &procpb.StartRequest{Process: cmd}, map[string]string{"Authorization": "Basic !!!"})
		}, connect.CodePermissionDenied},
		{"wrong token", func() error {
			return start(sandboxReply{SandboxID: g.sb.SandboxID, EnvdAccessToken: "e2bt_nope"}, &procpb.StartRequest{Process: cmd}, nil)
		}, connect.CodeUnauthenticated},
		{"process limit", func() error {
			g.api.mu.Lock()
			g.api.startErr = [2]string{"409", "process_limit"}
			g.api.mu.Unlock()
			return start(g.sb, &procpb.StartRequest{Process: cmd}, nil)
		}, connect.CodeResourceExhausted},
		{"start failed", func() error {
			g.api.mu.Lock()
			g.api.startErr = [2]string{"400", "process_start_failed"}
			g.api.mu.Unlock()
			return start(g.sb, &procpb.StartRequest{Process: cmd}, nil)
		}, connect.CodeInvalidArgument},
		{"no agent channel", func() error {
			g.api.mu.Lock()
			g.api.startErr = [2]string{"409", "process_channel_unavailable"}
			g.api.mu.Unlock()
			return start(g.sb, &procpb.StartRequest{Process: cmd}, nil)
		}, connect.CodeUnavailable},
		{"connect to an unknown pid", func() error {
			cs, err := g.rpc.Connect(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.ConnectRequest{Process: pidSel(4242)})))
			if err != nil {
				return err
			}
			_, err = collect[*procpb.ConnectResponse](cs)
			return err
		}, connect.CodeNotFound},
		{"connect to an unknown tag", func() error {
			cs, _ := g.rpc.Connect(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.ConnectRequest{Process: &procpb.ProcessSelector{Selector: &procpb.ProcessSelector_Tag{Tag: "none"}}})))
			_, err := collect[*procpb.ConnectResponse](cs)
			return err
		}, connect.CodeNotFound},
		{"no selector", func() error {
			_, err := g.rpc.SendSignal(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.SendSignalRequest{Signal: procpb.Signal_SIGNAL_SIGKILL})))
			return err
		}, connect.CodeInvalidArgument},
		{"pid 0", func() error {
			_, err := g.rpc.SendSignal(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.SendSignalRequest{Process: pidSel(0), Signal: procpb.Signal_SIGNAL_SIGKILL})))
			return err
		}, connect.CodeInvalidArgument},
		{"unspecified signal", func() error {
			_, err := g.rpc.SendSignal(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.SendSignalRequest{Process: pidSel(7)})))
			return err
		}, connect.CodeInvalidArgument},
		{"kill of an ended process", func() error {
			_, err := g.rpc.SendSignal(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.SendSignalRequest{Process: pidSel(8), Signal: procpb.Signal_SIGNAL_SIGKILL})))
			return err
		}, connect.CodeNotFound},
		{"stdin of a process without", func() error {
			_, err := g.rpc.SendInput(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.SendInputRequest{Process: pidSel(7), Input: &procpb.ProcessInput{Input: &procpb.ProcessInput_Stdin{Stdin: []byte("x")}}})))
			return err
		}, connect.CodeFailedPrecondition},
		{"input of nothing named", func() error {
			_, err := g.rpc.SendInput(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.SendInputRequest{Process: pidSel(7)})))
			return err
		}, connect.CodeInvalidArgument},
		{"resize without a terminal", func() error {
			_, err := g.rpc.Update(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.UpdateRequest{Process: pidSel(7), Pty: &procpb.PTY{Size: &procpb.PTY_Size{Cols: 10, Rows: 10}}})))
			return err
		}, connect.CodeFailedPrecondition},
		{"another key's process", func() error {
			_, err := g.rpc.SendSignal(ctx, withSandbox(g.other, connect.NewRequest(&procpb.SendSignalRequest{Process: pidSel(7), Signal: procpb.Signal_SIGNAL_SIGKILL})))
			return err
		}, connect.CodeNotFound},
		{"stream input without a start", func() error {
			in := g.rpc.StreamInput(ctx)
			for k, v := range sandboxHeaders(g.sb.SandboxID, g.sb.EnvdAccessToken) {
				in.RequestHeader().Set(k, v)
			}
			_ = in.Send(&procpb.StreamInputRequest{Event: &procpb.StreamInputRequest_Data{Data: &procpb.StreamInputRequest_DataEvent{Input: &procpb.ProcessInput{Input: &procpb.ProcessInput_Stdin{Stdin: []byte("x")}}}}})
			_, err := in.CloseAndReceive()
			return err
		}, connect.CodeInvalidArgument},
	}
	for _, c := range cases {
		err := c.call()
		if connect.CodeOf(err) != c.code {
			t.Errorf("%s: %v (code %v), want %v", c.name, err, connect.CodeOf(err), c.code)
		}
	}
	if n := len(g.api.started); n != 0 {
		t.Fatalf("refused starts started %d processes", n)
	}
	if len(g.api.signals) != 0 || len(g.api.stdin) != 0 {
		t.Fatalf("refused calls reached processes: %v %v", g.api.signals, g.api.stdin)
	}
	// "another key's process" went to the other key's sandbox: it has
	// none of this key's processes (the fake's 404 for its session).

	// A session that is ending or gone is the SDK's "sandbox is not
	// running" (Unavailable).
	g.api.fakeAPI.mu.Lock()
	g.api.fakeAPI.sessions[g.sb.SandboxID].state = "gone"
	g.api.fakeAPI.mu.Unlock()
	if _, err := g.rpc.List(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.ListRequest{}))); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("list of an ending session: %v", err)
	}
	g.api.fakeAPI.mu.Lock()
	delete(g.api.fakeAPI.sessions, g.sb.SandboxID)
	g.api.fakeAPI.mu.Unlock()
	if _, err := g.rpc.List(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.ListRequest{}))); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("list of a gone session: %v", err)
	}
}

// TestProcessFollowEnds: a caller that leaves a stream of a process that
// goes on (keepalives only) ends the /v1 output stream under it: nothing
// keeps reading for nobody.
func TestProcessFollowEnds(t *testing.T) {
	t.Parallel()
	g := newProcRig(t)
	g.api.procs[7] = wire.Process{PID: 7, State: "running"}
	g.api.events[7] = []string{chunkJSON("stdout", "first")}
	g.api.hold[7] = true
	ctx, cancel := context.WithCancel(context.Background())
	cs, err := g.rpc.Connect(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.ConnectRequest{Process: pidSel(7)})))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for cs.Receive() && len(kinds) < 4 {
		switch cs.Msg().GetEvent().GetEvent().(type) {
		case *procpb.ProcessEvent_Start:
			kinds = append(kinds, "start")
		case *procpb.ProcessEvent_Data:
			kinds = append(kinds, "data")
		case *procpb.ProcessEvent_Keepalive:
			kinds = append(kinds, "keepalive")
		}
	}
	if strings.Join(kinds, ",") != "start,data,keepalive,keepalive" {
		t.Fatalf("events: %v (%v)", kinds, cs.Err())
	}
	if g.api.activeStreams() != 1 {
		t.Fatalf("%d output streams while following", g.api.activeStreams())
	}
	cancel()
	cs.Close()
	deadline := time.Now().Add(10 * time.Second)
	for g.api.activeStreams() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the /v1 output stream goes on after its caller left")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProcCwd: a command's working folder, hostile ones included: E2B's
// home is ours, relative and ~ are under it; other absolute folders pass
// (the command runs as the sandbox's user, who can cd anywhere it may).
func TestProcCwd(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"wd", "/home/sandbox/wd"},
		{"~", "/home/sandbox"},
		{"~/a/../b", "/home/sandbox/b"},
		{"~root", "/home/sandbox/~root"},
		{"/home/user", "/home/sandbox"},
		{"/home/user/x/", "/home/sandbox/x"},
		{"/home/userx", "/home/userx"},
		{"/home/user/../../etc", "/etc"},
		{"../..", "/"},
		{"/tmp", "/tmp"},
		{"a\x00b", "!"},
		{"\xff", "!"},
		{strings.Repeat("a", maxPathBytes+1), "!"},
	} {
		got, err := procCwd(c.in)
		if err != nil {
			got = "!"
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("%q: %v, want invalid_argument", c.in, err)
			}
		}
		if got != c.want {
			t.Errorf("procCwd(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestBasicUser(t *testing.T) {
	t.Parallel()
	b := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"Bearer x", ""},
		{b("user:"), "user"},
		{b("root:"), "root"},
		{b("user"), "user"},
		{b(":pw"), ""},
		{"Basic %%%", "\x00unreadable"},
	} {
		if got := basicUser(c.in); got != c.want {
			t.Errorf("basicUser(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestProcessStreamPanics: a /v1 stream that panics under the adapter
// (the cluster's reverse proxy aborts a stream whose reader has gone with
// http.ErrAbortHandler) ends that stream, never the server.
func TestProcessStreamPanics(t *testing.T) {
	t.Parallel()
	g := newProcRig(t)
	ctx := context.Background()
	g.api.procs[7] = wire.Process{PID: 7, State: "running"}
	g.api.events[7] = []string{chunkJSON("stdout", "x"), exitJSON(0, "")}
	g.api.panics[7] = http.ErrAbortHandler
	g.api.procs[8] = wire.Process{PID: 8, State: "running"}
	g.api.events[8] = []string{chunkJSON("stdout", "x")}
	g.api.panics[8] = "boom"
	cs, err := g.rpc.Connect(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.ConnectRequest{Process: pidSel(7)})))
	if err != nil {
		t.Fatal(err)
	}
	evs, err := collect[*procpb.ConnectResponse](cs)
	if err != nil || len(evs) != 3 || evs[2].GetEnd() == nil {
		t.Fatalf("an abort after the end: %v %v", evs, err)
	}
	cs, err = g.rpc.Connect(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.ConnectRequest{Process: pidSel(8)})))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collect[*procpb.ConnectResponse](cs); connect.CodeOf(err) != connect.CodeInternal {
		t.Fatalf("a panic before the end: %v, want internal", err)
	}
	if _, err := g.rpc.List(ctx, withSandbox(g.sb, connect.NewRequest(&procpb.ListRequest{}))); err != nil {
		t.Fatalf("the server after the panics: %v", err)
	}
}
