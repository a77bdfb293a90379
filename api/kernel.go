package api

import (
	"context"
	"net/http"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Kernels is what the kernel routes need from the executor. A kernel
// session's cells themselves go through Sandboxes.Execute.
type Kernels interface {
	// RestartKernel ends the kernel of a kernel session and starts a
	// fresh one (every variable is gone); ErrNoKernel for a session made
	// without one.
	RestartKernel(ctx context.Context, owner, id string) (sandbox.Session, error)
}

// mountKernels enables
//
//	POST /v1/sessions/{id}/kernel/restart -> 200 session
func (s *Server) mountKernels(k Kernels) {
	s.handle("POST /v1/sessions/{id}/kernel/restart", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		p := principal(r.Context())
		sess, err := k.RestartKernel(r.Context(), p.KeyID, r.PathValue("id"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, wire.SessionOf(sess))
		return nil
	}))
}
