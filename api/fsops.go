package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// FileOps are the files API's operations besides moving bytes. The
// executor has the guest do them inside the sandbox (no execute, no
// process of the user touched); paths are the caller's, unchecked, as for
// Files.
type FileOps interface {
	// Stat describes a file without following a symlink.
	Stat(ctx context.Context, owner, id, path string) (sandbox.FileInfo, error)
	// MakeDir makes a folder (with parents, the missing ones above it);
	// an existing path is sandbox.ErrFileExists.
	MakeDir(ctx context.Context, owner, id, path string, parents bool) (sandbox.FileInfo, error)
	// Move renames from to to (making missing folders above to); an
	// existing to is sandbox.ErrFileExists unless overwrite.
	Move(ctx context.Context, owner, id, from, to string, overwrite bool) (sandbox.FileInfo, error)
	// Remove deletes a file, symlink or folder tree (bounded).
	Remove(ctx context.Context, owner, id, path string) error
	// ListDepth lists a folder and the folders below it to depth levels.
	ListDepth(ctx context.Context, owner, id, path string, depth int) (sandbox.Listing, error)
	// Watch follows the changes under a folder until it is closed, the
	// folder goes (io.EOF) or the sandbox stops.
	Watch(ctx context.Context, owner, id, path string, recursive bool) (sandbox.FileWatch, error)
}

// maxWatchDuration bounds one watch request; a client that wants longer
// watches again.
const maxWatchDuration = time.Hour

// maxListDepth bounds ?depth= (the guest's own bound, guest.MaxListDepth).
const maxListDepth = 64

// mountFileOps enables:
//
//	GET    /v1/sessions/{id}/files/stat?path=P        file info
//	POST   /v1/sessions/{id}/files/mkdir {path, parents?} -> 201 file info
//	POST   /v1/sessions/{id}/files/move {from, to, overwrite?} -> file info
//	DELETE /v1/sessions/{id}/files?path=P             204
//	GET    /v1/sessions/{id}/files/watch?path=P&recursive=B  SSE of changes
//
// and ?depth= on GET /v1/sessions/{id}/files?dir= (getFiles).
func (s *Server) mountFileOps(f FileOps) {
	s.handle("GET /v1/sessions/{id}/files/stat", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		_, path, err := fileQuery(r, "path")
		if err != nil {
			return err
		}
		info, err := f.Stat(r.Context(), principal(r.Context()).KeyID, r.PathValue("id"), path)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	}))
	s.handle("POST /v1/sessions/{id}/files/mkdir", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		var req wire.MakeDirRequest
		if err := decodeJSON(r, &req); err != nil {
			return err
		}
		if req.Path == "" {
			return apiErr(http.StatusBadRequest, "invalid_request", "path is required")
		}
		info, err := f.MakeDir(r.Context(), principal(r.Context()).KeyID, r.PathValue("id"), req.Path, req.Parents)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, info)
		return nil
	}))
	s.handle("POST /v1/sessions/{id}/files/move", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		var req wire.MoveRequest
		if err := decodeJSON(r, &req); err != nil {
			return err
		}
		if req.From == "" || req.To == "" {
			return apiErr(http.StatusBadRequest, "invalid_request", "from and to are required")
		}
		info, err := f.Move(r.Context(), principal(r.Context()).KeyID, r.PathValue("id"), req.From, req.To, req.Overwrite)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	}))
	s.handle("GET /v1/sessions/{id}/files/watch", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		return s.watchFiles(f, w, r)
	}))
	s.handle("DELETE /v1/sessions/{id}/files", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		_, path, err := fileQuery(r, "path")
		if err != nil {
			return err
		}
		if err := f.Remove(r.Context(), principal(r.Context()).KeyID, r.PathValue("id"), path); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}))
}

// listDepth reads ?depth= of a listing: 0 when absent (a plain listing),
// else 1 to maxListDepth.
func listDepth(r *http.Request) (int, error) {
	vs, ok := r.URL.Query()["depth"]
	if !ok {
		return 0, nil
	}
	if len(vs) != 1 {
		return 0, apiErr(http.StatusBadRequest, "invalid_request", "query parameter \"depth\" given more than once")
	}
	d, err := strconv.Atoi(vs[0])
	if err != nil || d < 1 || d > maxListDepth {
		return 0, apiErr(http.StatusBadRequest, "invalid_request", "depth must be a whole number from 1 to %d", maxListDepth)
	}
	return d, nil
}

// watchFiles streams a watch as SSE: "start" once the watch runs, a
// "change" (wire.FileEvent) per change, a keepalive comment while quiet,
// and "end" (wire.WatchEnd) when the folder went, the watch ran for
// maxWatchDuration, or "error" when the sandbox stopped. A refusal before
// the watch runs (bad path, symlink, too many watches) is a JSON error.
func (s *Server) watchFiles(f FileOps, w http.ResponseWriter, r *http.Request) error {
	_, path, err := fileQuery(r, "path")
	if err != nil {
		return err
	}
	recursive := false
	if vs, ok := r.URL.Query()["recursive"]; ok {
		if len(vs) != 1 || (vs[0] != "true" && vs[0] != "false") {
			return apiErr(http.StatusBadRequest, "invalid_request", "recursive must be true or false, once")
		}
		recursive = vs[0] == "true"
	}
	if _, ok := w.(http.Flusher); !ok {
		return errors.New("streaming unsupported by the response writer")
	}
	ctx, cancel := context.WithTimeout(r.Context(), maxWatchDuration)
	defer cancel()
	wt, err := f.Watch(ctx, principal(r.Context()).KeyID, r.PathValue("id"), path, recursive)
	if err != nil {
		return err
	}
	defer wt.Close()
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.streamWriteTimeout(), cancel: cancel, begin: time.Now()}
	sw.mu.Lock()
	sw.event("start", wire.WatchEnd{})
	sw.mu.Unlock()
	sw.startHeartbeat(s.streamHeartbeat(), s.streamHeartbeat())
	finish := func(event string, v any) error {
		sw.mu.Lock()
		defer sw.mu.Unlock()
		sw.stopHeartbeat()
		defer sw.clearDeadline()
		if v != nil {
			sw.event(event, v)
		}
		return nil
	}
	for {
		evs, err := wt.Next(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return finish("end", wire.WatchEnd{Reason: "removed"})
		case r.Context().Err() != nil:
			return finish("", nil) // the client left
		case ctx.Err() != nil:
			return finish("end", wire.WatchEnd{Reason: "timeout"})
		case err != nil:
			s.log.Info("watch ended", "request_id", requestID(r.Context()), "err", err)
			return finish("error", errorPayload{Code: "sandbox_lost", Message: "the session's sandbox stopped; watch again", RequestID: requestID(r.Context())})
		}
		sw.mu.Lock()
		for _, ev := range evs {
			sw.event("change", ev)
		}
		failed := sw.err != nil
		sw.mu.Unlock()
		if failed {
			return finish("", nil)
		}
	}
}
