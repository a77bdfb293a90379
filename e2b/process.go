package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/sandboxapi/sandboxapi/api/wire"
	procpb "github.com/sandboxapi/sandboxapi/e2b/internal/envdpb/process"
	"github.com/sandboxapi/sandboxapi/e2b/internal/envdpb/process/processconnect"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// envd's process service (commands and PTY) over the session's
// background processes (/v1/sessions/{id}/processes): Start is a POST of
// the process and then its output stream followed from the first byte;
// Connect follows a running one from its latest byte; the rest are one
// /v1 call each. Nothing is kept here: a process is the guest's, named
// by its pid in the session, so any node serves any call.

// procService implements envd's Process. Its zero value is not usable;
// it is safe for concurrent use.
type procService struct {
	processconnect.UnimplementedProcessHandler
	h *Handler
}

var _ processconnect.ProcessHandler = procService{}

// procTarget is the sandbox of a call and its user check: E2B's SDK
// names a user in Authorization (Basic, "name:") when the caller asks
// for one; sandboxapi runs everything as its one unprivileged user.
func procTarget(ctx context.Context, hdr http.Header) (*target, error) {
	t := targetOf(ctx)
	if t == nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no sandbox"))
	}
	if u := basicUser(hdr.Get("Authorization")); u != "" && u != "user" {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("user %q is not available: sandboxapi runs commands as the sandbox's one unprivileged user (E2B's user)", u))
	}
	return t, nil
}

// basicUser is the user name of a Basic Authorization header, "" for
// none or one that does not parse.
func basicUser(a string) string {
	enc, ok := strings.CutPrefix(a, "Basic ")
	if !ok {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "\x00unreadable"
	}
	u, _, _ := strings.Cut(string(b), ":")
	return u
}

// procCwd maps a command's working folder onto the session: relative is
// under the home (as envd resolves it), /home/user is /home/sandbox, and
// any other absolute folder is passed on (the command runs as the
// sandbox's unprivileged user, whose kernel resolves it; unlike file
// calls this reaches nothing the user could not cd into with the command
// itself).
func procCwd(cwd string) (string, error) {
	switch {
	case cwd == "":
		return "", nil
	case len(cwd) > maxPathBytes || strings.IndexByte(cwd, 0) >= 0 || !utf8.ValidString(cwd):
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("cwd must be a UTF-8 path of at most 4096 bytes without NUL"))
	}
	if strings.HasPrefix(cwd, "~") && (len(cwd) == 1 || cwd[1] == '/') {
		cwd = e2bHome + cwd[1:]
	}
	if !strings.HasPrefix(cwd, "/") {
		cwd = e2bHome + "/" + cwd
	}
	cwd = path.Clean(cwd)
	if rest, ok := underDir(cwd, e2bHome); ok {
		cwd = ourHome + rest
	}
	return cwd, nil
}

// procURI is the /v1 path of the target's processes, or of one of them.
func procURI(t *target, pid uint32, sub string) string {
	u := "/v1/sessions/" + url.PathEscape(t.id) + "/processes"
	if pid != 0 {
		u += "/" + strconv.FormatUint(uint64(pid), 10)
	}
	return u + sub
}

// procError is the Connect error of a failed process call, with the
// codes E2B's SDK maps: NotFound for a process that is unknown or has
// ended (envd forgets ended processes: kill answers false),
// ResourceExhausted for the process limit and a full stdin (try later),
// Unavailable for a session that is gone, ending or has no agent channel.
func procError(err error, t *target) error {
	var ae *apiError
	if !errors.As(err, &ae) {
		return rpcError(err, t.id)
	}
	msg := errors.New(e2bMessage(ae.Message))
	switch ae.Code {
	case "process_not_found", "process_not_running":
		return connect.NewError(connect.CodeNotFound, msg)
	case "process_limit", "process_stdin_full":
		return connect.NewError(connect.CodeResourceExhausted, msg)
	case "process_stdin_closed", "process_not_pty":
		return connect.NewError(connect.CodeFailedPrecondition, msg)
	case "process_channel_unavailable", "session_not_running":
		return connect.NewError(connect.CodeUnavailable, msg)
	}
	return rpcError(err, t.id)
}

// selectPID resolves a selector: a pid as it is, a tag to the newest
// running process that carries it.
func (s procService) selectPID(t *target, sel *procpb.ProcessSelector) (uint32, error) {
	switch v := sel.GetSelector().(type) {
	case *procpb.ProcessSelector_Pid:
		if v.Pid == 0 {
			return 0, connect.NewError(connect.CodeInvalidArgument, errors.New("pid must be above 0"))
		}
		return v.Pid, nil
	case *procpb.ProcessSelector_Tag:
		var l wire.ProcessList
		if _, err := t.caller.call(http.MethodGet, procURI(t, 0, ""), nil, &l); err != nil {
			return 0, procError(err, t)
		}
		for i := len(l.Processes) - 1; i >= 0; i-- {
			if p := l.Processes[i]; p.Tag == v.Tag && p.State == sandbox.ProcessRunning {
				return uint32(p.PID), nil
			}
		}
		return 0, connect.NewError(connect.CodeNotFound, fmt.Errorf("no running process with tag %q", v.Tag))
	}
	return 0, connect.NewError(connect.CodeInvalidArgument, errors.New("name the process by pid or tag"))
}

// sandboxEnv is the env vars the sandbox was created with (sealed under
// its owner's key): every command gets them under its own.
func (s procService) sandboxEnv(t *target) (map[string]string, error) {
	if t.sealedEnv == "" {
		return nil, nil
	}
	b, err := unseal(t.caller.key, t.id, purposeEnv, t.sealedEnv)
	if err != nil {
		s.h.log.Error("e2b: a sandbox's env vars do not open with its key", "sandbox", t.id)
		return nil, connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
	var env map[string]string
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
	return env, nil
}

// maxStartTimeout bounds the timeout a start passes on from its deadline
// (the API refuses one over the server's longest idle TTL anyway).
const maxStartTimeout = 30 * 24 * time.Hour

// Start starts a process (commands.run: /bin/bash -l -c CMD; pty.create:
// /bin/bash -i -l on a terminal) and streams its events: start with the
// pid, its output, and its end. As envd does, the call's deadline (the
// SDK's timeoutMs, 60 s unless set, none for 0) is the process's timeout:
// it is killed then, whether or not anyone still follows it.
func (s procService) Start(ctx context.Context, req *connect.Request[procpb.StartRequest], stream *connect.ServerStream[procpb.StartResponse]) error {
	t, err := procTarget(ctx, req.Header())
	if err != nil {
		return err
	}
	m := req.Msg
	cfg := m.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	cwd, err := procCwd(cfg.GetCwd())
	if err != nil {
		return err
	}
	env, err := s.sandboxEnv(t)
	if err != nil {
		return err
	}
	if len(cfg.GetEnvs()) > 0 && env == nil {
		env = make(map[string]string, len(cfg.GetEnvs()))
	}
	for k, v := range cfg.GetEnvs() {
		env[k] = v
	}
	body := wire.StartProcessRequest{Cmd: cfg.GetCmd(), Args: cfg.GetArgs(), Env: env, Cwd: cwd, Stdin: m.GetStdin(), Tag: m.GetTag()}
	if m.Pty != nil {
		size := m.GetPty().GetSize()
		if size.GetCols() == 0 || size.GetRows() == 0 || size.GetCols() > sandbox.MaxTermSize || size.GetRows() > sandbox.MaxTermSize {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pty cols and rows must be between 1 and %d", sandbox.MaxTermSize))
		}
		body.PTY = &wire.TermSize{Cols: int(size.GetCols()), Rows: int(size.GetRows())}
	}
	if dl, ok := ctx.Deadline(); ok {
		secs := min(time.Until(dl), maxStartTimeout).Seconds()
		if secs <= 0 {
			return connect.NewError(connect.CodeDeadlineExceeded, errors.New("the call's deadline has passed"))
		}
		body.Timeout = &secs
	}
	var p wire.Process
	if _, err := t.caller.call(http.MethodPost, procURI(t, 0, ""), body, &p); err != nil {
		return procError(err, t)
	}
	if err := stream.Send(&procpb.StartResponse{Event: startEvent(p.PID)}); err != nil {
		return err
	}
	return s.follow(ctx, t, uint32(p.PID), 0, func(ev *procpb.ProcessEvent) error {
		return stream.Send(&procpb.StartResponse{Event: ev})
	})
}

// Connect follows a process from now: a start event with its pid, then
// the output it prints from here and its end. A process that has ended
// answers its start and end at once.
func (s procService) Connect(ctx context.Context, req *connect.Request[procpb.ConnectRequest], stream *connect.ServerStream[procpb.ConnectResponse]) error {
	t, err := procTarget(ctx, req.Header())
	if err != nil {
		return err
	}
	pid, err := s.selectPID(t, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	var p wire.Process
	if _, err := t.caller.call(http.MethodGet, procURI(t, pid, ""), nil, &p); err != nil {
		return procError(err, t)
	}
	if err := stream.Send(&procpb.ConnectResponse{Event: startEvent(p.PID)}); err != nil {
		return err
	}
	return s.follow(ctx, t, pid, p.OutputBytes, func(ev *procpb.ProcessEvent) error {
		return stream.Send(&procpb.ConnectResponse{Event: ev})
	})
}

// named is the sandbox of a call on one process and that process's pid,
// from its headers and selector.
func (s procService) named(ctx context.Context, hdr http.Header, sel *procpb.ProcessSelector) (*target, uint32, error) {
	t, err := procTarget(ctx, hdr)
	if err != nil {
		return nil, 0, err
	}
	pid, err := s.selectPID(t, sel)
	if err != nil {
		return nil, 0, err
	}
	return t, pid, nil
}

func startEvent(pid int) *procpb.ProcessEvent {
	return &procpb.ProcessEvent{Event: &procpb.ProcessEvent_Start{Start: &procpb.ProcessEvent_StartEvent{Pid: uint32(pid)}}}
}

// List lists the running processes (envd forgets ended ones). Their
// envs and cwd are not reported.
func (s procService) List(ctx context.Context, req *connect.Request[procpb.ListRequest]) (*connect.Response[procpb.ListResponse], error) {
	t, err := procTarget(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	var l wire.ProcessList
	if _, err := t.caller.call(http.MethodGet, procURI(t, 0, ""), nil, &l); err != nil {
		return nil, procError(err, t)
	}
	out := &procpb.ListResponse{Processes: []*procpb.ProcessInfo{}}
	for _, p := range l.Processes {
		if p.State != sandbox.ProcessRunning {
			continue
		}
		info := &procpb.ProcessInfo{Pid: uint32(p.PID), Config: &procpb.ProcessConfig{Cmd: p.Cmd, Args: p.Args, Envs: map[string]string{}}}
		if p.Tag != "" {
			info.Tag = &p.Tag
		}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

// stdin writes input (stdin or terminal bytes alike: a terminal process's
// stdin is its terminal) and, with eof, closes it after them.
func (s procService) stdin(t *target, pid uint32, data []byte, eof bool) error {
	if len(data) == 0 && !eof {
		return nil
	}
	uri := procURI(t, pid, "/stdin")
	if eof {
		uri += "?eof=true"
	}
	r, err := t.caller.newRequest(http.MethodPost, uri, strings.NewReader(string(data)), int64(len(data)))
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	r.Header.Set("Content-Type", "application/octet-stream")
	rec := newRecorder(64 << 10)
	s.h.api.ServeHTTP(rec, r)
	if rec.status != http.StatusOK {
		return procError(rec.apiError(), t)
	}
	return nil
}

func inputBytes(in *procpb.ProcessInput) ([]byte, error) {
	switch v := in.GetInput().(type) {
	case *procpb.ProcessInput_Stdin:
		return v.Stdin, nil
	case *procpb.ProcessInput_Pty:
		return v.Pty, nil
	}
	return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input must be stdin or pty bytes"))
}

// SendInput writes to a process's stdin or terminal.
func (s procService) SendInput(ctx context.Context, req *connect.Request[procpb.SendInputRequest]) (*connect.Response[procpb.SendInputResponse], error) {
	t, pid, err := s.named(ctx, req.Header(), req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	data, err := inputBytes(req.Msg.GetInput())
	if err != nil {
		return nil, err
	}
	if err := s.stdin(t, pid, data, false); err != nil {
		return nil, err
	}
	return connect.NewResponse(&procpb.SendInputResponse{}), nil
}

// StreamInput writes a stream of input: a start event naming the process,
// then data events, each written in order as it comes.
func (s procService) StreamInput(ctx context.Context, stream *connect.ClientStream[procpb.StreamInputRequest]) (*connect.Response[procpb.StreamInputResponse], error) {
	t, err := procTarget(ctx, stream.RequestHeader())
	if err != nil {
		return nil, err
	}
	var pid uint32
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *procpb.StreamInputRequest_Start:
			if pid != 0 {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("one start event per input stream"))
			}
			if pid, err = s.selectPID(t, ev.Start.GetProcess()); err != nil {
				return nil, err
			}
		case *procpb.StreamInputRequest_Data:
			if pid == 0 {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the input stream must start with a start event"))
			}
			data, err := inputBytes(ev.Data.GetInput())
			if err != nil {
				return nil, err
			}
			if err := s.stdin(t, pid, data, false); err != nil {
				return nil, err
			}
		case *procpb.StreamInputRequest_Keepalive:
		default:
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("unknown input event"))
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&procpb.StreamInputResponse{}), nil
}

// CloseStdin closes a process's stdin (a terminal gets ^D).
func (s procService) CloseStdin(ctx context.Context, req *connect.Request[procpb.CloseStdinRequest]) (*connect.Response[procpb.CloseStdinResponse], error) {
	t, pid, err := s.named(ctx, req.Header(), req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := s.stdin(t, pid, nil, true); err != nil {
		return nil, err
	}
	return connect.NewResponse(&procpb.CloseStdinResponse{}), nil
}

// SendSignal sends SIGTERM or SIGKILL (handle.kill, commands.kill).
func (s procService) SendSignal(ctx context.Context, req *connect.Request[procpb.SendSignalRequest]) (*connect.Response[procpb.SendSignalResponse], error) {
	var sig string
	switch req.Msg.GetSignal() {
	case procpb.Signal_SIGNAL_SIGKILL:
		sig = "SIGKILL"
	case procpb.Signal_SIGNAL_SIGTERM:
		sig = "SIGTERM"
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("signal must be SIGTERM or SIGKILL"))
	}
	t, pid, err := s.named(ctx, req.Header(), req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if _, err := t.caller.call(http.MethodPost, procURI(t, pid, "/signal"), wire.SignalRequest{Signal: sig}, nil); err != nil {
		return nil, procError(err, t)
	}
	return connect.NewResponse(&procpb.SendSignalResponse{}), nil
}

// Update resizes a process's terminal (pty.resize); without a pty it
// changes nothing.
func (s procService) Update(ctx context.Context, req *connect.Request[procpb.UpdateRequest]) (*connect.Response[procpb.UpdateResponse], error) {
	t, pid, err := s.named(ctx, req.Header(), req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty != nil {
		size := req.Msg.GetPty().GetSize()
		if size.GetCols() == 0 || size.GetRows() == 0 || size.GetCols() > sandbox.MaxTermSize || size.GetRows() > sandbox.MaxTermSize {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pty cols and rows must be between 1 and %d", sandbox.MaxTermSize))
		}
		if _, err := t.caller.call(http.MethodPost, procURI(t, pid, "/resize"), wire.TermSize{Cols: int(size.GetCols()), Rows: int(size.GetRows())}, nil); err != nil {
			return nil, procError(err, t)
		}
	}
	return connect.NewResponse(&procpb.UpdateResponse{}), nil
}

// endEvent is envd's end of a process: as Go's os/exec reports it (envd
// is Go), "exit status N" with exited set, or "signal: killed" with exit
// code -1; error is set when the command did not succeed, and the SDK
// raises it as CommandExitError's message.
func endEvent(p wire.Process) *procpb.ProcessEvent {
	end := &procpb.ProcessEvent_EndEvent{}
	code := 0
	if p.ExitCode != nil {
		code = *p.ExitCode
	}
	if p.Signal != "" && code > 128 {
		end.ExitCode = -1
		end.Status = "signal: " + syscall.Signal(code-128).String()
	} else {
		end.ExitCode, end.Exited = int32(code), true
		end.Status = "exit status " + strconv.Itoa(code)
	}
	if end.ExitCode != 0 {
		msg := end.Status
		switch {
		case p.TimedOut:
			msg += " (the command ran past its timeout)"
		case p.OOMKilled:
			msg += " (the sandbox ran out of memory)"
		}
		end.Error = &msg
	}
	return &procpb.ProcessEvent{Event: &procpb.ProcessEvent_End{End: end}}
}
