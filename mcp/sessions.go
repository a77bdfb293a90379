package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// The session tools are thin calls of /v1/sessions: the session lives in
// the API (its home, its sandbox, its kernel), so the MCP transports stay
// stateless and a session made over MCP is the same as one made over REST.

// sessionIDPattern is one URL path segment. The API's ids are "sess_" and
// 26 base32 letters; the tools pass an id into the URL, where a "/", a
// ".." or a "?" would name another route (the server's mux answers a
// cleaned path with a 307 that keeps the method), so nothing else gets
// that far. The API itself answers an id of this shape it does not know.
const sessionIDPattern = `^[A-Za-z0-9_-]{1,64}$`

var sessionIDRe = regexp.MustCompile(sessionIDPattern)

// defaultDir is the session's home, where files live.
const defaultDir = "/home/sandbox"

// maxReadBytes bounds read_file: a larger file is refused (the agent can
// read a part with execute_in_session) rather than flooding its context.
const maxReadBytes = 1 << 20

// The session tools' inputs and results. Where the REST API has the shape,
// it is the API's own (package wire); the session id, which REST carries
// in the path, is a field beside it.
type (
	// CreateSessionInput is create_session's input, the body of
	// POST /v1/sessions (network credentials aside: see createSession).
	CreateSessionInput = wire.CreateSessionRequest
	// SessionResult is a session as the API reports it.
	SessionResult = wire.Session
	// SessionsResult is list_sessions' output.
	SessionsResult = wire.SessionList
	// InstallResult is install_packages' output.
	InstallResult = wire.InstallReply
	// FileInfo is write_file's output.
	FileInfo = wire.FileInfo
	// FilesResult is list_files' output.
	FilesResult = wire.FileListing
)

// SessionRef names a session (end_session's input).
type SessionRef struct {
	SessionID string `json:"session_id" jsonschema:"the session's id (create_session returns it; list_sessions lists them)"`
}

// SessionsInput is list_sessions' (empty) input.
type SessionsInput struct{}

// SessionExecuteInput is execute_in_session's input: the session and the
// body of POST /v1/sessions/{id}/execute.
type SessionExecuteInput struct {
	SessionID string  `json:"session_id" jsonschema:"the session's id"`
	Code      string  `json:"code" jsonschema:"the program to run in the session (in a kernel session: the cell)"`
	Stdin     string  `json:"stdin,omitempty" jsonschema:"standard input for the program"`
	Timeout   float64 `json:"timeout,omitempty" jsonschema:"wall-clock limit in seconds, at most your plan's max_timeout (see list_runtimes)"`
}

// InstallInput is install_packages' input: the session and the body of
// POST /v1/sessions/{id}/install.
type InstallInput struct {
	SessionID string `json:"session_id" jsonschema:"the session's id"`
	wire.InstallRequest
}

// WriteFileInput is write_file's input.
type WriteFileInput struct {
	SessionID string `json:"session_id" jsonschema:"the session's id"`
	Path      string `json:"path" jsonschema:"a path in the session's home: absolute (/home/sandbox/data.csv) or relative to the home (data.csv)"`
	Content   string `json:"content" jsonschema:"the file's content: text, or with encoding base64 the bytes in standard base64"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"utf-8 (content is the text) or base64 (content is the bytes)"`
}

// ReadFileInput is read_file's input.
type ReadFileInput struct {
	SessionID string `json:"session_id" jsonschema:"the session's id"`
	Path      string `json:"path" jsonschema:"a file in the session's home: absolute (/home/sandbox/out.txt) or relative to the home (out.txt)"`
}

// FileContent is read_file's output. The REST API answers a file with its
// raw bytes, so this shape is the tool's own: the bytes as text when they
// are UTF-8, else in base64.
type FileContent struct {
	Path      string `json:"path"`
	Size      int64  `json:"size" jsonschema:"the file's size in bytes"`
	Mode      string `json:"mode,omitempty" jsonschema:"octal permission bits, e.g. 0644"`
	MediaType string `json:"media_type" jsonschema:"the content's type as sniffed: text/plain; charset=utf-8, image/png, application/octet-stream, ..."`
	Encoding  string `json:"encoding" jsonschema:"utf-8 (content is the text) or base64 (content is the bytes)"`
	Content   string `json:"content"`
}

// ListFilesInput is list_files' input.
type ListFilesInput struct {
	SessionID string `json:"session_id" jsonschema:"the session's id"`
	Dir       string `json:"dir,omitempty" jsonschema:"a folder in the session's home: absolute or relative to the home"`
}

// EndSessionResult is end_session's output.
type EndSessionResult struct {
	ID    string `json:"id"`
	Ended bool   `json:"ended" jsonschema:"true: the session, its sandbox and its files are gone"`
}

func registerSessionTools(s *sdk.Server, t *tools, defTimeout float64, runtimes []wire.Runtime) {
	f, tr := false, true
	sdk.AddTool(s, &sdk.Tool{
		Name:  "create_session",
		Title: "Create a stateful session",
		Description: "Create a session: a sandbox whose files (in /home/sandbox) and installed packages persist across calls until end_session " +
			"or its idle_ttl. With kernel: true (python3) every execute_in_session runs as a cell of one long-lived interpreter, " +
			"so variables and imports stay, and rich results (plots as images) come back. Your plan must allow sessions (see list_runtimes). " +
			"Returns the session; pass its id to the other session tools.",
		InputSchema:  createSessionInputSchema(runtimes),
		OutputSchema: sessionOutputSchema(),
		Annotations:  &sdk.ToolAnnotations{DestructiveHint: &f, OpenWorldHint: &f},
	}, t.createSession)
	sdk.AddTool(s, &sdk.Tool{
		Name:         "list_sessions",
		Title:        "List sessions",
		Description:  "List your sessions with their state (running, hibernated, ...), language and expiry.",
		OutputSchema: schemaFor[SessionsResult](nil),
		Annotations:  &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &f},
	}, t.listSessions)
	sdk.AddTool(s, &sdk.Tool{
		Name:  "execute_in_session",
		Title: "Execute code in a session",
		Description: "Run code in a session (in the session's language) and return stdout, stderr, exit code and status. " +
			"Files and packages persist between calls; in a plain session each call is a fresh process, in a kernel session a cell " +
			"whose variables persist, with results: the last expression's value and displays (text comes back as text, PNG plots as images) " +
			"and error {name, value, traceback} when the cell raised. kernel_restarted means the kernel died and earlier variables are gone. " +
			"Output is capped (32 KiB per stream).",
		InputSchema:  sessionExecuteInputSchema(defTimeout),
		OutputSchema: executeOutputSchema(),
		Annotations:  &sdk.ToolAnnotations{DestructiveHint: &f, OpenWorldHint: &f},
	}, t.executeInSession)
	sdk.AddTool(s, &sdk.Tool{
		Name:  "install_packages",
		Title: "Install packages into a session",
		Description: "Install pip or npm packages into a session's home from the curated mirror (check_packages says what it holds); " +
			"all or nothing: a package the mirror refuses fails the whole install with the reasons. List every package explicitly " +
			"(npm: with the dependencies check_packages names).",
		InputSchema:  installInputSchema(),
		OutputSchema: schemaFor[InstallResult](nil),
		Annotations:  &sdk.ToolAnnotations{DestructiveHint: &f, OpenWorldHint: &tr},
	}, t.install)
	sdk.AddTool(s, &sdk.Tool{
		Name:  "write_file",
		Title: "Write a file into a session",
		Description: "Write a file in the session's home (/home/sandbox), replacing one that is there. Text as is, " +
			"binary with encoding base64. Paths outside the home are refused.",
		InputSchema:  writeFileInputSchema(),
		OutputSchema: schemaFor[FileInfo](nil),
		Annotations:  &sdk.ToolAnnotations{DestructiveHint: &tr, IdempotentHint: true, OpenWorldHint: &f},
	}, t.writeFile)
	sdk.AddTool(s, &sdk.Tool{
		Name:  "read_file",
		Title: "Read a file from a session",
		Description: fmt.Sprintf("Read a file from the session's home: UTF-8 text comes back as text, an image (PNG, JPEG, GIF, WebP) "+
			"as an image, other bytes in base64. At most %d bytes: read a part of a larger file with execute_in_session.", maxReadBytes),
		InputSchema:  sessionPathSchema[ReadFileInput](),
		OutputSchema: schemaFor[FileContent](nil),
		Annotations:  &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &f},
	}, t.readFile)
	sdk.AddTool(s, &sdk.Tool{
		Name:         "list_files",
		Title:        "List files in a session",
		Description:  "List a folder of the session's home (default /home/sandbox), without following symlinks.",
		InputSchema:  listFilesInputSchema(),
		OutputSchema: schemaFor[FilesResult](nil),
		Annotations:  &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &f},
	}, t.listFiles)
	sdk.AddTool(s, &sdk.Tool{
		Name:         "end_session",
		Title:        "End a session",
		Description:  "End a session: its sandbox stops and its files and installed packages are deleted.",
		InputSchema:  sessionPathSchema[SessionRef](),
		OutputSchema: schemaFor[EndSessionResult](nil),
		Annotations:  &sdk.ToolAnnotations{DestructiveHint: &tr, IdempotentHint: true, OpenWorldHint: &f},
	}, t.endSession)
}

// sessionPath is the escaped API path of session id, plus suffix; an id
// that is not one path segment is refused before any call.
func sessionPath(id, suffix string) (string, error) {
	if !sessionIDRe.MatchString(id) {
		return "", fmt.Errorf("session_id %s is not a session id (create_session returns one; list_sessions lists them)", sandbox.Quote(id))
	}
	return "/v1/sessions/" + url.PathEscape(id) + suffix, nil
}

func (t *tools) createSession(ctx context.Context, req *sdk.CallToolRequest, in CreateSessionInput) (*sdk.CallToolResult, SessionResult, error) {
	// A credential's value would pass through the assistant's context
	// and, being write-only in the API's JSON (Credential.MarshalJSON),
	// would not even reach the API: refuse it rather than lose it. The
	// schema leaves the field out; this covers a client that skips it.
	if in.Network != nil && len(in.Network.Credentials) > 0 {
		return nil, SessionResult{}, errors.New("network.credentials are not taken over MCP (a secret in a tool call passes through the assistant); create such a session with the REST API")
	}
	var res SessionResult
	if err := t.c.call(ctx, headersOf(req), "POST", "/v1/sessions", in, &res); err != nil {
		return nil, SessionResult{}, err
	}
	return textResult(describeSession(res)), res, nil
}

func describeSession(s SessionResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "session %s: %s", s.ID, s.Language)
	if s.Version != "" {
		fmt.Fprintf(&b, " %s", s.Version)
	}
	fmt.Fprintf(&b, ", %s, idle ttl %d s, expires %s", s.State, s.IdleTTL, s.ExpiresAt.Format("2006-01-02T15:04:05Z"))
	if s.Network.Enabled {
		b.WriteString(", network on")
		if len(s.Network.AllowedDomains) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(s.Network.AllowedDomains, ", "))
		}
	}
	return b.String()
}

func (t *tools) listSessions(ctx context.Context, req *sdk.CallToolRequest, _ SessionsInput) (*sdk.CallToolResult, SessionsResult, error) {
	var res SessionsResult
	if err := t.c.call(ctx, headersOf(req), "GET", "/v1/sessions", nil, &res); err != nil {
		return nil, SessionsResult{}, err
	}
	if res.Sessions == nil {
		res.Sessions = []SessionResult{}
	}
	if len(res.Sessions) == 0 {
		return textResult("no sessions"), res, nil
	}
	lines := make([]string, len(res.Sessions))
	for i, s := range res.Sessions {
		lines[i] = describeSession(s)
	}
	return textResult(strings.Join(lines, "\n")), res, nil
}

func (t *tools) executeInSession(ctx context.Context, req *sdk.CallToolRequest, in SessionExecuteInput) (*sdk.CallToolResult, ExecuteResult, error) {
	path, err := sessionPath(in.SessionID, "/execute")
	if err != nil {
		return nil, ExecuteResult{}, err
	}
	if in.Timeout < 0 {
		return nil, ExecuteResult{}, errors.New("timeout must be a positive number of seconds")
	}
	body := wire.ExecuteRequest{Code: &in.Code, Stdin: in.Stdin}
	if in.Timeout > 0 {
		body.Timeout = &in.Timeout
	}
	var res ExecuteResult
	if err := t.c.call(ctx, headersOf(req), "POST", path, body, &res); err != nil {
		return nil, ExecuteResult{}, err
	}
	out := cellContent(res)
	res = capResult(res)
	switch res.Status {
	case sandbox.StatusTimeout, sandbox.StatusOOM:
		out.IsError = true
	}
	return out, res, nil
}

func (t *tools) install(ctx context.Context, req *sdk.CallToolRequest, in InstallInput) (*sdk.CallToolResult, InstallResult, error) {
	path, err := sessionPath(in.SessionID, "/install")
	if err != nil {
		return nil, InstallResult{}, err
	}
	var res InstallResult
	if err := t.c.call(ctx, headersOf(req), "POST", path, in.InstallRequest, &res); err != nil {
		return nil, InstallResult{}, err
	}
	if res.Installed == nil {
		res.Installed = []wire.InstalledPackage{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "installed %d %s package(s) in %d ms:", len(res.Installed), res.Manager, res.DurationMS)
	for _, p := range res.Installed {
		fmt.Fprintf(&b, "\n- %s %s", p.Name, p.Version)
		if p.Requested != "" && p.Requested != p.Name {
			fmt.Fprintf(&b, " (asked: %s)", p.Requested)
		}
		if len(p.Stripped) > 0 {
			fmt.Fprintf(&b, "; stripped by the mirror: %s", strings.Join(p.Stripped, ", "))
		}
	}
	return textResult(b.String()), res, nil
}

func (t *tools) writeFile(ctx context.Context, req *sdk.CallToolRequest, in WriteFileInput) (*sdk.CallToolResult, FileInfo, error) {
	path, err := sessionPath(in.SessionID, "/files")
	if err != nil {
		return nil, FileInfo{}, err
	}
	if in.Path == "" {
		return nil, FileInfo{}, errors.New("path is required")
	}
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8":
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, FileInfo{}, fmt.Errorf("content is not standard base64: %w", err)
		}
	default:
		return nil, FileInfo{}, fmt.Errorf("encoding %s is neither utf-8 nor base64", sandbox.Quote(in.Encoding))
	}
	rep, err := t.c.send(ctx, headersOf(req), request{method: "PUT", path: path + "?path=" + url.QueryEscape(in.Path),
		contentType: "application/octet-stream", body: bytes.NewReader(data)})
	if err != nil {
		return nil, FileInfo{}, err
	}
	var info FileInfo
	if err := decodeReply(rep, &info); err != nil {
		return nil, FileInfo{}, err
	}
	return textResult(fmt.Sprintf("wrote %s: %d bytes, mode %s", in.Path, info.Size, info.Mode)), info, nil
}

func (t *tools) readFile(ctx context.Context, req *sdk.CallToolRequest, in ReadFileInput) (*sdk.CallToolResult, FileContent, error) {
	path, err := sessionPath(in.SessionID, "/files")
	if err != nil {
		return nil, FileContent{}, err
	}
	if in.Path == "" {
		return nil, FileContent{}, errors.New("path is required")
	}
	rep, err := t.c.send(ctx, headersOf(req), request{method: "GET", path: path + "?path=" + url.QueryEscape(in.Path), limit: maxReadBytes})
	if err != nil {
		return nil, FileContent{}, err
	}
	if rep.over {
		size := rep.header.Get("Content-Length")
		if size == "" {
			size = "more than " + strconv.Itoa(maxReadBytes)
		}
		return nil, FileContent{}, fmt.Errorf("%s is %s bytes, over read_file's limit of %d bytes: read a part of it with execute_in_session (head -c, tail -c, a pager)",
			sandbox.Quote(in.Path), size, maxReadBytes)
	}
	out := FileContent{Path: in.Path, Size: int64(len(rep.body)), Mode: rep.header.Get("X-File-Mode"), MediaType: http.DetectContentType(rep.body)}
	res := &sdk.CallToolResult{}
	switch {
	case imageTypes[out.MediaType]:
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(rep.body)
		res.Content = []sdk.Content{
			&sdk.TextContent{Text: fmt.Sprintf("%s: %s, %d bytes (the image follows)", in.Path, out.MediaType, out.Size)},
			&sdk.ImageContent{Data: rep.body, MIMEType: out.MediaType},
		}
	case utf8.Valid(rep.body) && !strings.ContainsRune(string(rep.body), 0):
		out.Encoding, out.Content = "utf-8", string(rep.body)
		if !strings.HasPrefix(out.MediaType, "text/") {
			out.MediaType = "text/plain; charset=utf-8"
		}
		res.Content = []sdk.Content{&sdk.TextContent{Text: out.Content}}
	default:
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(rep.body)
		res.Content = []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("%s: %s, %d bytes of binary data (base64 in the structured result's content)", in.Path, out.MediaType, out.Size)}}
	}
	return res, out, nil
}

func (t *tools) listFiles(ctx context.Context, req *sdk.CallToolRequest, in ListFilesInput) (*sdk.CallToolResult, FilesResult, error) {
	path, err := sessionPath(in.SessionID, "/files")
	if err != nil {
		return nil, FilesResult{}, err
	}
	dir := in.Dir
	if dir == "" {
		dir = defaultDir
	}
	var res FilesResult
	if err := t.c.call(ctx, headersOf(req), "GET", path+"?dir="+url.QueryEscape(dir), nil, &res); err != nil {
		return nil, FilesResult{}, err
	}
	if res.Entries == nil {
		res.Entries = []FileInfo{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d entries", res.Path, len(res.Entries))
	if res.Truncated {
		b.WriteString(" (the folder holds more: listing cut)")
	}
	for _, e := range res.Entries {
		fmt.Fprintf(&b, "\n%s %s %8d %s", e.Type, e.Mode, e.Size, e.Name)
	}
	return textResult(b.String()), res, nil
}

func (t *tools) endSession(ctx context.Context, req *sdk.CallToolRequest, in SessionRef) (*sdk.CallToolResult, EndSessionResult, error) {
	path, err := sessionPath(in.SessionID, "")
	if err != nil {
		return nil, EndSessionResult{}, err
	}
	if err := t.c.call(ctx, headersOf(req), "DELETE", path, nil, nil); err != nil {
		return nil, EndSessionResult{}, err
	}
	return textResult("session " + in.SessionID + " ended: its sandbox and files are gone"), EndSessionResult{ID: in.SessionID, Ended: true}, nil
}

// decodeReply decodes a JSON reply that send returned.
func decodeReply(rep apiReply, out any) error {
	if rep.over {
		return fmt.Errorf("the reply is over %d bytes", maxReplyBytes)
	}
	if err := json.Unmarshal(rep.body, out); err != nil {
		return fmt.Errorf("decoding the reply: %w", err)
	}
	return nil
}

func textResult(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}
