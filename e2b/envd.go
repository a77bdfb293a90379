package e2b

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandboxapi/sandboxapi/e2b/internal/envdpb/filesystem/filesystemconnect"
	"github.com/sandboxapi/sandboxapi/e2b/internal/envdpb/process/processconnect"
	"github.com/sandboxapi/sandboxapi/store"
)

// Sandbox traffic (E2B_SANDBOX_URL=.../e2b/sandbox): what envd serves in
// an E2B sandbox, for the sandbox named by E2b-Sandbox-Id, authenticated
// by its X-Access-Token. Each call becomes /v1 calls as the sandbox's
// owner key (unsealed with the token, seal.go).

const (
	// envdPort is envd's port; E2B's SDK names it in E2b-Sandbox-Port.
	envdPort = "49983"
	// maxUploadParts bounds the files of one multipart upload.
	maxUploadParts = 1000
)

func (h *Handler) mountSandbox() {
	p := SandboxPrefix
	h.mux.Handle("GET "+p+"/health", h.sandbox(false, http.HandlerFunc(h.health)))
	h.mux.Handle("GET "+p+"/files", h.sandbox(false, http.HandlerFunc(h.download)))
	h.mux.Handle("POST "+p+"/files", h.sandbox(false, http.HandlerFunc(h.upload)))
	opts := connect.WithReadMaxBytes(1 << 20)
	fsPath, fsHandler := filesystemconnect.NewFilesystemHandler(fsService{h: h}, opts)
	h.mux.Handle(p+fsPath, h.sandbox(true, http.StripPrefix(p, fsHandler)))
	procPath, procHandler := processconnect.NewProcessHandler(procService{h: h}, opts)
	h.mux.Handle(p+procPath, h.sandbox(true, http.StripPrefix(p, procHandler)))
	h.mux.Handle(p+"/", h.sandbox(false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no route "+r.Method+" "+strings.TrimPrefix(r.URL.Path, SandboxPrefix)+" in the sandbox")
	})))
}

// sandbox authenticates sandbox traffic and puts its target in the
// context. rpc says errors must be Connect's.
func (h *Handler) sandbox(rpc bool, next http.Handler) http.Handler {
	return h.sandboxOn(envdPort, rpc, next)
}

// sandboxOn is sandbox for the traffic of one port of the sandbox: envd's,
// or the code interpreter's (interpreter.go), whose SDK sends the token in
// E2B-Traffic-Access-Token on the calls where it sends no X-Access-Token.
func (h *Handler) sandboxOn(servedPort string, rpc bool, next http.Handler) http.Handler {
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(status int, code connect.Code, msg string) {
			if rpc {
				_ = ew.Write(w, r, connect.NewError(code, errors.New(msg)))
				return
			}
			writeError(w, status, msg)
		}
		id := r.Header.Get("E2b-Sandbox-Id")
		if id == "" || len(id) > 128 {
			fail(http.StatusBadRequest, connect.CodeInvalidArgument, "send the sandbox's id in E2b-Sandbox-Id")
			return
		}
		if port := r.Header.Get("E2b-Sandbox-Port"); port != servedPort && (port != "" || servedPort != envdPort) {
			fail(http.StatusBadGateway, connect.CodeUnavailable, fmt.Sprintf("port %s of the sandbox is not served: sandboxapi serves envd (%s) and the code interpreter (%s) only", port, envdPort, interpreterPort))
			return
		}
		token := r.Header.Get("X-Access-Token")
		if token == "" {
			token = r.Header.Get("E2B-Traffic-Access-Token")
		}
		rec, err := h.rec.E2BSandbox(r.Context(), id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// E2B's proxy answers a sandbox that is gone with 502.
			fail(http.StatusBadGateway, connect.CodeUnavailable, "sandbox "+id+" is not running: it was killed or timed out")
			return
		case err != nil:
			h.log.Warn("e2b: reading a sandbox record", "sandbox", id, "err", err)
			fail(http.StatusServiceUnavailable, connect.CodeUnavailable, "the store cannot be reached; try again")
			return
		case token == "" || !tokenMatches(token, rec.TokenHash):
			fail(http.StatusUnauthorized, connect.CodeUnauthenticated, "send the sandbox's access token in X-Access-Token (or E2B-Traffic-Access-Token)")
			return
		}
		key, err := unseal(token, id, purposeKey, rec.SealedKey)
		if err != nil {
			h.log.Error("e2b: a sandbox record's key does not open with its token", "sandbox", id)
			fail(http.StatusInternalServerError, connect.CodeInternal, "internal error")
			return
		}
		c := caller{api: h.api, in: r, key: string(key)}
		if h.now().After(rec.EndAt) {
			h.end(r, c, id)
			fail(http.StatusBadGateway, connect.CodeUnavailable, "sandbox "+id+" is not running: its timeout has passed")
			return
		}
		next.ServeHTTP(w, r.WithContext(withTarget(r.Context(), &target{id: id, caller: c, template: rec.Template, sealedEnv: rec.SealedEnv})))
	})
}

// sessionGone answers a /v1 404 for the session itself as E2B's proxy
// does for a sandbox that is gone (502); other errors as they are.
func (h *Handler) sandboxFail(w http.ResponseWriter, r *http.Request, err error, id string) {
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.Code == "not_found" {
		writeError(w, http.StatusBadGateway, "sandbox "+id+" is not running: it was killed or timed out")
		return
	}
	if errors.As(err, &ae) {
		writeError(w, ae.Status, e2bMessage(ae.Message))
		return
	}
	h.fail(w, r, err)
}

// health: GET /health -> 204 while the session lives.
func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	if _, err := t.caller.call(http.MethodGet, "/v1/sessions/"+url.PathEscape(t.id), nil, nil); err != nil {
		h.sandboxFail(w, r, err, t.id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// checkUser refuses a user other than E2B's default: code runs as the
// session's one unprivileged user.
func checkUser(r *http.Request) error {
	switch u := r.URL.Query().Get("username"); u {
	case "", "user":
		return nil
	default:
		return errf(http.StatusBadRequest, fmt.Sprintf("user %q is not available: sandboxapi runs everything as the sandbox's one unprivileged user (E2B's user)", u))
	}
}

// download: GET /files?path=P -> the file's bytes.
func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	if err := checkUser(r); err != nil {
		h.fail(w, r, err)
		return
	}
	p, err := guestPath(r.URL.Query().Get("path"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	req, err := t.caller.newRequest(http.MethodGet, "/v1/sessions/"+url.PathEscape(t.id)+"/files?path="+url.QueryEscape(p), nil, 0)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	pw := &passWriter{w: w, rec: newRecorder(64 << 10), copyHdr: []string{"Content-Length", "Content-Type", "Last-Modified", "Content-Disposition"}}
	h.api.ServeHTTP(pw, req)
	if pw.passing {
		return
	}
	if pw.rec.status == 0 {
		pw.rec.status = http.StatusInternalServerError
	}
	h.sandboxFail(w, r, pw.rec.apiError(), t.id)
}

// uploaded is envd's EntryInfo of a written file.
type uploaded struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// upload: POST /files. The SDK sends multipart/form-data with one part
// per file (its filename is the file's path, or the path query names it),
// or, from envd 0.5.7 on, one file as application/octet-stream, gzip
// when Content-Encoding says so. Each file is one PUT of our files API,
// streamed: the file size limit is that API's.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	if err := checkUser(r); err != nil {
		h.fail(w, r, err)
		return
	}
	query := r.URL.Query().Get("path")
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		ct = ""
	}
	var out []uploaded
	switch {
	case ct == "multipart/form-data":
		out, err = h.uploadParts(r, t, query, params["boundary"])
	case ct == "application/octet-stream" || ct == "":
		var body io.Reader = r.Body
		switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
		case "", "identity":
		case "gzip":
			zr, zerr := gzip.NewReader(r.Body)
			if zerr != nil {
				h.fail(w, r, errf(http.StatusBadRequest, "body is not gzip"))
				return
			}
			defer zr.Close()
			body = zr
		default:
			h.fail(w, r, errf(http.StatusBadRequest, "Content-Encoding "+enc+" is not supported (gzip is)"))
			return
		}
		size := r.ContentLength
		if body != r.Body {
			size = -1
		}
		var u uploaded
		u, err = h.put(t, query, body, size)
		out = []uploaded{u}
	default:
		err = errf(http.StatusBadRequest, "Content-Type must be multipart/form-data or application/octet-stream")
	}
	if err != nil {
		h.sandboxFail(w, r, err, t.id)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) uploadParts(r *http.Request, t *target, query, boundary string) ([]uploaded, error) {
	if boundary == "" {
		return nil, errf(http.StatusBadRequest, "multipart body without a boundary")
	}
	mr := multipart.NewReader(r.Body, boundary)
	var out []uploaded
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errf(http.StatusBadRequest, "reading the multipart body: "+err.Error())
		}
		if len(out) == maxUploadParts {
			return nil, errf(http.StatusBadRequest, fmt.Sprintf("more than %d files in one upload", maxUploadParts))
		}
		// Part.FileName keeps only the base name: the SDK sends the
		// whole path there, so read the header's parameter itself.
		name := ""
		if _, ps, err := mime.ParseMediaType(part.Header.Get("Content-Disposition")); err == nil {
			name = ps["filename"]
		}
		if query != "" {
			if len(out) > 0 {
				return nil, errf(http.StatusBadRequest, "the path query names one file: send one part, or name each part's path as its filename")
			}
			name = query
		}
		u, err := h.put(t, name, part, -1)
		part.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, errf(http.StatusBadRequest, "the upload holds no file")
	}
	return out, nil
}

// put writes one file through PUT /v1/sessions/{id}/files.
func (h *Handler) put(t *target, name string, body io.Reader, size int64) (uploaded, error) {
	p, err := guestPath(name)
	if err != nil {
		return uploaded{}, err
	}
	if p == ourHome {
		return uploaded{}, errf(http.StatusBadRequest, "cannot write over the home "+e2bHome)
	}
	req, err := t.caller.newRequest(http.MethodPut, "/v1/sessions/"+url.PathEscape(t.id)+"/files?path="+url.QueryEscape(p), body, size)
	if err != nil {
		return uploaded{}, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	rec := newRecorder(64 << 10)
	h.api.ServeHTTP(rec, req)
	if rec.status != http.StatusOK {
		return uploaded{}, rec.apiError()
	}
	return uploaded{Name: lastElem(p), Type: "file", Path: e2bPath(p)}, nil
}

func lastElem(p string) string {
	return p[strings.LastIndexByte(p, '/')+1:]
}
