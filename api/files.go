package api

import (
	"context"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// Files is what the files API needs from the executor. Paths are the
// caller's, unchecked: the implementation refuses anything outside the
// session's home with sandbox.ErrInvalid.
type Files interface {
	// PutFile writes r (size bytes, -1 if unknown) to path in the session.
	PutFile(ctx context.Context, owner, id, path string, r io.Reader, size int64) (sandbox.FileInfo, error)
	// GetFile opens a regular file; the reader yields exactly Size bytes
	// and must be closed.
	GetFile(ctx context.Context, owner, id, path string) (sandbox.FileInfo, io.ReadCloser, error)
	// List lists a folder without following symlinks, up to a limit
	// (Truncated says the folder holds more).
	List(ctx context.Context, owner, id, path string) (sandbox.Listing, error)
	// MaxFileBytes is the largest upload or download.
	MaxFileBytes() int64
	FileOps
}

// mountFiles enables the files API:
//
//	PUT /v1/sessions/{id}/files?path=P   raw body -> 200 file info
//	GET /v1/sessions/{id}/files?path=P   raw bytes (application/octet-stream)
//	GET /v1/sessions/{id}/files?dir=D    JSON listing
func (s *Server) mountFiles(f Files) {
	// An upload may be larger than the JSON body limit authed applies:
	// putFile lifts it to the file limit through its call.
	s.handle("PUT /v1/sessions/{id}/files", s.authedCall(func(w http.ResponseWriter, r *http.Request, c *call) error {
		return s.putFile(f, w, r, c)
	}))
	s.handle("GET /v1/sessions/{id}/files", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		return s.getFiles(f, w, r)
	}))
	s.mountFileOps(f)
}

// fileQuery returns the one query parameter name (path or dir) and its value.
func fileQuery(r *http.Request, allowed ...string) (string, string, error) {
	q := r.URL.Query()
	var name, value string
	for _, k := range allowed {
		vs, ok := q[k]
		if !ok {
			continue
		}
		if name != "" || len(vs) != 1 {
			return "", "", apiErr(http.StatusBadRequest, "invalid_request", "give exactly one of the query parameters %v, once", allowed)
		}
		name, value = k, vs[0]
	}
	if name == "" {
		return "", "", apiErr(http.StatusBadRequest, "invalid_request", "query parameter %q is required", allowed[0])
	}
	if value == "" {
		return "", "", apiErr(http.StatusBadRequest, "invalid_request", "query parameter %q is empty", name)
	}
	return name, value, nil
}

func (s *Server) putFile(f Files, w http.ResponseWriter, r *http.Request, c *call) error {
	p := principal(r.Context())
	_, file, err := fileQuery(r, "path")
	if err != nil {
		return err
	}
	max := f.MaxFileBytes()
	if r.ContentLength > max {
		return apiErr(http.StatusRequestEntityTooLarge, "too_large", "file of %d bytes is over the limit of %d", r.ContentLength, max)
	}
	// The body is still counted for metering, now up to the file limit
	// (the executor stops at max+1 bytes itself).
	c.liftBodyLimit(w, max+1)
	info, err := f.PutFile(r.Context(), p.KeyID, r.PathValue("id"), file, r.Body, r.ContentLength)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (s *Server) getFiles(f Files, w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	id := r.PathValue("id")
	kind, value, err := fileQuery(r, "path", "dir")
	if err != nil {
		return err
	}
	if _, ok := r.URL.Query()["depth"]; ok && kind != "dir" {
		return apiErr(http.StatusBadRequest, "invalid_request", "depth goes with dir, not path")
	}
	if kind == "dir" {
		depth, err := listDepth(r)
		if err != nil {
			return err
		}
		var l sandbox.Listing
		if depth == 0 {
			l, err = f.List(r.Context(), p.KeyID, id, value)
		} else {
			l, err = f.ListDepth(r.Context(), p.KeyID, id, value, depth)
		}
		if err != nil {
			return err
		}
		if l.Entries == nil {
			l.Entries = []sandbox.FileInfo{}
		}
		writeJSON(w, http.StatusOK, wire.FileListing{Path: value, Entries: l.Entries, Truncated: l.Truncated})
		return nil
	}
	info, rc, err := f.GetFile(r.Context(), p.KeyID, id, value)
	if err != nil {
		return err
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(info.Size, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	if cd := mime.FormatMediaType("attachment", map[string]string{"filename": info.Name}); cd != "" {
		h.Set("Content-Disposition", cd)
	}
	if !info.ModTime.IsZero() {
		h.Set("Last-Modified", info.ModTime.UTC().Format(http.TimeFormat))
	}
	h.Set("X-File-Mode", info.Mode)
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := io.Copy(w, rc); err != nil {
		// Headers are out; the short body tells the client. Logged by authed.
		return err
	}
	return nil
}
