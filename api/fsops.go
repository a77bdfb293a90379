package api

import (
	"context"
	"net/http"
	"strconv"

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
}

// maxListDepth bounds ?depth= (the guest's own bound, guest.MaxListDepth).
const maxListDepth = 64

// mountFileOps enables:
//
//	GET    /v1/sessions/{id}/files/stat?path=P        file info
//	POST   /v1/sessions/{id}/files/mkdir {path, parents?} -> 201 file info
//	POST   /v1/sessions/{id}/files/move {from, to, overwrite?} -> file info
//	DELETE /v1/sessions/{id}/files?path=P             204
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
