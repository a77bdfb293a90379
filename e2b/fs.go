package e2b

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxapi/sandboxapi/api/wire"
	fspb "github.com/sandboxapi/sandboxapi/e2b/internal/envdpb/filesystem"
	"github.com/sandboxapi/sandboxapi/e2b/internal/envdpb/filesystem/filesystemconnect"
)

// envd's filesystem service. Stat, make dir, move, remove and list are
// one execute each of fsop.py in the session (through /v1, so they are
// rate-limited and metered as executes); watches are not served yet.

//go:embed fsop.py
var fsopScript string

// fsEnv is the variable fsop.py reads its arguments from.
const fsEnv = "SBX_E2B_FS"

// fsEntry is what fsop.py reports of one file.
type fsEntry struct {
	Name    string  `json:"name"`
	Type    string  `json:"type"`
	Path    string  `json:"path"`
	Size    int64   `json:"size"`
	Mode    uint32  `json:"mode"`
	Perm    string  `json:"perm"`
	Owner   string  `json:"owner"`
	Group   string  `json:"group"`
	MtimeNS int64   `json:"mtime_ns"`
	Target  *string `json:"target,omitempty"`
}

// fsReply is fsop.py's answer.
type fsReply struct {
	Err     string    `json:"err"`
	Msg     string    `json:"msg"`
	Entry   *fsEntry  `json:"entry"`
	Entries []fsEntry `json:"entries"`
}

type fsArgs struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Dest  string `json:"dest,omitempty"`
	Depth uint32 `json:"depth,omitempty"`
}

// maxDepth bounds a listing's depth.
const maxDepth = 64

// fsService implements envd's Filesystem over the session's executes.
type fsService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	h *Handler
}

var _ filesystemconnect.FilesystemHandler = fsService{}

// fsop runs one operation in the target's session.
func (s fsService) fsop(ctx context.Context, a fsArgs) (*fsReply, error) {
	t := targetOf(ctx)
	if t == nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no sandbox"))
	}
	args, err := json.Marshal(a)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	code := fsopScript
	var res wire.ExecuteResult
	if _, err := t.caller.call(http.MethodPost, "/v1/sessions/"+url.PathEscape(t.id)+"/execute",
		wire.ExecuteRequest{Code: &code, Env: map[string]string{fsEnv: string(args)}}, &res); err != nil {
		return nil, rpcError(err, t.id)
	}
	if res.Status != "ok" || res.Truncated {
		s.h.log.Warn("e2b: file operation failed in the sandbox", "sandbox", t.id, "op", a.Op, "status", res.Status, "exit_code", res.ExitCode)
		if res.Status == "timeout" {
			return nil, connect.NewError(connect.CodeDeadlineExceeded, errors.New("the file operation ran out of time"))
		}
		if res.Status == "output_limit" || res.Truncated {
			return nil, connect.NewError(connect.CodeOutOfRange, errors.New("the answer is over the server's output limit: list a smaller folder or depth"))
		}
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("the file operation failed in the sandbox (%s)", res.Status))
	}
	var out fsReply
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		return nil, connect.NewError(connect.CodeInternal, errors.New("the file operation answered nothing readable"))
	}
	if out.Err != "" {
		return nil, connect.NewError(fsCode(out.Err), errors.New(e2bMessage(out.Msg)))
	}
	return &out, nil
}

// e2bMessage maps the session's home back to E2B's in a message.
func e2bMessage(msg string) string {
	return strings.ReplaceAll(msg, ourHome, e2bHome)
}

// fsCode is the Connect code of an fsop.py refusal (the SDK's errors:
// NotFound is FileNotFoundError, AlreadyExists makes makeDir answer false).
func fsCode(kind string) connect.Code {
	switch kind {
	case "not_found":
		return connect.CodeNotFound
	case "exists":
		return connect.CodeAlreadyExists
	case "not_dir", "invalid":
		return connect.CodeInvalidArgument
	case "permission":
		return connect.CodePermissionDenied
	case "too_many":
		// Not ResourceExhausted: the SDK raises that as a RateLimitError.
		return connect.CodeOutOfRange
	}
	return connect.CodeInternal
}

// rpcError is the Connect error of a failed /v1 call (or of ours).
func rpcError(err error, id string) error {
	var ae *apiError
	var ce *e2bError
	switch {
	case errors.Is(err, errBadPath):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.As(err, &ce):
		return connect.NewError(codeOfStatus(ce.status), errors.New(ce.msg))
	case errors.As(err, &ae):
		if ae.Status == http.StatusNotFound && ae.Code == "not_found" {
			// The session itself is gone: the SDK's answer to a sandbox
			// that was killed or timed out.
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s is not running anymore", id))
		}
		return connect.NewError(codeOfStatus(ae.Status), errors.New(e2bMessage(ae.Message)))
	}
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

func codeOfStatus(status int) connect.Code {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusConflict:
		return connect.CodeFailedPrecondition
	case http.StatusTooManyRequests:
		return connect.CodeResourceExhausted
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return connect.CodeUnavailable
	case http.StatusNotImplemented:
		return connect.CodeUnimplemented
	}
	return connect.CodeInternal
}

func entryInfo(e fsEntry) *fspb.EntryInfo {
	out := &fspb.EntryInfo{Name: e.Name, Path: e2bPath(e.Path), Size: e.Size, Mode: e.Mode, Permissions: e.Perm,
		Owner: e.Owner, Group: e.Group, ModifiedTime: timestamppb.New(time.Unix(0, e.MtimeNS)), SymlinkTarget: e.Target}
	switch e.Type {
	case "file":
		out.Type = fspb.FileType_FILE_TYPE_FILE
	case "dir":
		out.Type = fspb.FileType_FILE_TYPE_DIRECTORY
	case "symlink":
		out.Type = fspb.FileType_FILE_TYPE_SYMLINK
	}
	return out
}

func pathArg(p string) (string, error) {
	g, err := guestPath(p)
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, err)
	}
	return g, nil
}

// notHome refuses an operation on the home itself.
func notHome(p, what string) error {
	if p == ourHome {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cannot %s the home %s", what, e2bHome))
	}
	return nil
}

func (s fsService) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	p, err := pathArg(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	out, err := s.fsop(ctx, fsArgs{Op: "stat", Path: p})
	if err != nil {
		return nil, err
	}
	if out.Entry == nil {
		return nil, connect.NewError(connect.CodeInternal, errors.New("stat answered no entry"))
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: entryInfo(*out.Entry)}), nil
}

func (s fsService) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	p, err := pathArg(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	out, err := s.fsop(ctx, fsArgs{Op: "mkdir", Path: p})
	if err != nil {
		return nil, err
	}
	if out.Entry == nil {
		return nil, connect.NewError(connect.CodeInternal, errors.New("make dir answered no entry"))
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: entryInfo(*out.Entry)}), nil
}

func (s fsService) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	src, err := pathArg(req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := pathArg(req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	if err := notHome(src, "move"); err != nil {
		return nil, err
	}
	if err := notHome(dst, "replace"); err != nil {
		return nil, err
	}
	out, err := s.fsop(ctx, fsArgs{Op: "move", Path: src, Dest: dst})
	if err != nil {
		return nil, err
	}
	if out.Entry == nil {
		return nil, connect.NewError(connect.CodeInternal, errors.New("move answered no entry"))
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: entryInfo(*out.Entry)}), nil
}

func (s fsService) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	p, err := pathArg(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := notHome(p, "remove"); err != nil {
		return nil, err
	}
	if _, err := s.fsop(ctx, fsArgs{Op: "remove", Path: p}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}

func (s fsService) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	p, err := pathArg(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	depth := req.Msg.GetDepth()
	if depth == 0 {
		depth = 1
	}
	if depth > maxDepth {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("depth must be at most %d", maxDepth))
	}
	out, err := s.fsop(ctx, fsArgs{Op: "list", Path: p, Depth: depth})
	if err != nil {
		return nil, err
	}
	entries := make([]*fspb.EntryInfo, 0, len(out.Entries))
	for _, e := range out.Entries {
		entries = append(entries, entryInfo(e))
	}
	return connect.NewResponse(&fspb.ListDirResponse{Entries: entries}), nil
}
