package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxapi/sandboxapi/api/wire"
	fspb "github.com/sandboxapi/sandboxapi/e2b/internal/envdpb/filesystem"
	"github.com/sandboxapi/sandboxapi/e2b/internal/envdpb/filesystem/filesystemconnect"
)

// envd's filesystem service. Stat, make dir, move, remove and list are
// the files API's own operations (GET /v1/sessions/{id}/files/stat, POST
// .../files/mkdir and .../files/move, DELETE .../files, GET .../files?dir=
// &depth=), which the guest does inside the sandbox: no execute, no
// process of the user touched; each is one /v1 call, so it is
// rate-limited and metered as that call. Watches are not served yet.

// maxDepth bounds a listing's depth (the files API's own bound).
const maxDepth = 64

// fsService implements envd's Filesystem over the files API.
type fsService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	h *Handler
}

var _ filesystemconnect.FilesystemHandler = fsService{}

// filesCall makes one files API call on the target's session; uri is
// below /v1/sessions/{id}/files.
func (s fsService) filesCall(ctx context.Context, method, uri string, in, out any) error {
	t := targetOf(ctx)
	if t == nil {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("no sandbox"))
	}
	if _, err := t.caller.call(method, "/v1/sessions/"+url.PathEscape(t.id)+"/files"+uri, in, out); err != nil {
		return rpcError(err, t.id)
	}
	return nil
}

// e2bMessage maps the session's home back to E2B's in a message.
func e2bMessage(msg string) string {
	return strings.ReplaceAll(msg, ourHome, e2bHome)
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
		return connect.NewError(fileCode(ae), errors.New(e2bMessage(ae.Message)))
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

// entryInfo is envd's entry of a file the files API described. Owner and
// group are E2B's user: every file of the home is the sandbox user's own
// (code runs as no one else), and the API reports no owner.
func entryInfo(fi wire.FileInfo) *fspb.EntryInfo {
	perm, _ := strconv.ParseUint(fi.Mode, 8, 32)
	out := &fspb.EntryInfo{Name: fi.Name, Path: e2bPath(fi.Path), Size: fi.Size, Mode: uint32(perm),
		Permissions: permString(fi.Type, uint32(perm)), Owner: e2bUser, Group: e2bUser,
		ModifiedTime: timestamppb.New(fi.ModTime)}
	switch fi.Type {
	case "file":
		out.Type = fspb.FileType_FILE_TYPE_FILE
	case "dir":
		out.Type = fspb.FileType_FILE_TYPE_DIRECTORY
	case "symlink":
		out.Type = fspb.FileType_FILE_TYPE_SYMLINK
		target := fi.Target
		out.SymlinkTarget = &target
	}
	return out
}

// permString is ls's text of a mode ("drwxr-xr-x").
func permString(typ string, perm uint32) string {
	kind := map[string]byte{"dir": 'd', "symlink": 'l', "fifo": 'p', "socket": 's', "char_device": 'c', "block_device": 'b'}[typ]
	if kind == 0 {
		kind = '-'
	}
	const rwx = "rwxrwxrwx"
	b := []byte{kind}
	for i := 0; i < 9; i++ {
		if perm&(1<<(8-i)) != 0 {
			b = append(b, rwx[i])
		} else {
			b = append(b, '-')
		}
	}
	return string(b)
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
	var fi wire.FileInfo
	if err := s.filesCall(ctx, http.MethodGet, "/stat?path="+url.QueryEscape(p), nil, &fi); err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: entryInfo(fi)}), nil
}

// MakeDir makes the folder and the missing ones above it (envd does);
// an existing path is AlreadyExists, which the SDK answers as false.
func (s fsService) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	p, err := pathArg(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	var fi wire.FileInfo
	if err := s.filesCall(ctx, http.MethodPost, "/mkdir", wire.MakeDirRequest{Path: p, Parents: true}, &fi); err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: entryInfo(fi)}), nil
}

// Move replaces what is at the destination, as envd's rename does.
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
	var fi wire.FileInfo
	if err := s.filesCall(ctx, http.MethodPost, "/move", wire.MoveRequest{From: src, To: dst, Overwrite: true}, &fi); err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: entryInfo(fi)}), nil
}

func (s fsService) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	p, err := pathArg(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := notHome(p, "remove"); err != nil {
		return nil, err
	}
	if err := s.filesCall(ctx, http.MethodDelete, "?path="+url.QueryEscape(p), nil, nil); err != nil {
		return nil, err
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}

// ListDir lists to the depth asked; a listing the files API cut short
// (over 10000 entries) is refused rather than answered in part.
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
	var l wire.FileListing
	if err := s.filesCall(ctx, http.MethodGet, "?dir="+url.QueryEscape(p)+"&depth="+strconv.Itoa(int(depth)), nil, &l); err != nil {
		return nil, err
	}
	if l.Truncated {
		// Not ResourceExhausted: the SDK raises that as a RateLimitError.
		return nil, connect.NewError(connect.CodeOutOfRange, errors.New("the listing holds more than 10000 entries: list a smaller folder or depth"))
	}
	entries := make([]*fspb.EntryInfo, 0, len(l.Entries))
	for _, fi := range l.Entries {
		entries = append(entries, entryInfo(fi))
	}
	return connect.NewResponse(&fspb.ListDirResponse{Entries: entries}), nil
}
