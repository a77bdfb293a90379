package e2b

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/store"
)

const (
	// maxForks bounds one fork call's count: more than any plan's
	// sessions, so the plan's quota (429 per fork) is what stops a call.
	maxForks = 16
	// forkTimeout is E2B's default timeout of a fork, in seconds (its
	// SandboxForkRequest).
	forkTimeout = 15
)

// forkBody is E2B's SandboxForkRequest.
type forkBody struct {
	Count   *int   `json:"count"`
	Timeout *int64 `json:"timeout"`
}

// forkResult is E2B's SandboxForkResult: exactly one of the two is set.
type forkResult struct {
	Sandbox *sandboxReply `json:"sandbox,omitempty"`
	Error   *errorReply   `json:"error,omitempty"`
}

// fork: POST /sandboxes/{id}/fork -> count times POST
// /v1/sessions/{id}/fork. Each child is a session of ours (a copy of the
// home; a live session's memory restored from a copy of its checkpoint)
// with a record of its own: the source's template, metadata and env vars,
// a new access token, and its own end. Each fork succeeds or fails on its
// own (the plan's quota, capacity, disk), as E2B reports them: one entry
// per fork, the call itself 201.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request, c caller) error {
	var b forkBody
	if err := decodeBody(w, r, &b); err != nil {
		return err
	}
	count := 1
	if b.Count != nil {
		count = *b.Count
	}
	if count < 1 || count > maxForks {
		return errf(http.StatusBadRequest, fmt.Sprintf("count must be 1 to %d", maxForks))
	}
	secs := int64(forkTimeout)
	if b.Timeout != nil {
		secs = *b.Timeout
	}
	if secs <= 0 || secs > 86400*30 {
		return errf(http.StatusBadRequest, "timeout must be a positive whole number of seconds, at most 30 days")
	}
	id := r.PathValue("id")
	_, src, err := h.lookup(r, c, id)
	if err != nil {
		return err
	}
	var env []byte
	if src.SealedEnv != "" {
		if env, err = unseal(c.key, id, purposeEnv, src.SealedEnv); err != nil {
			return err
		}
	}
	out := make([]forkResult, 0, count)
	for range count {
		reply, err := h.forkOne(r, c, id, src, env, time.Duration(secs)*time.Second)
		if err != nil {
			out = append(out, forkResult{Error: h.forkError(r, err)})
			continue
		}
		out = append(out, forkResult{Sandbox: &reply})
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// forkOne makes one child and its record, and resumes it (our fork
// starts hibernated; E2B's is running). A failure after the session was
// made removes it.
func (h *Handler) forkOne(r *http.Request, c caller, id string, src store.E2BSandbox, env []byte, ttl time.Duration) (sandboxReply, error) {
	var sess wire.Session
	if _, err := c.call(http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/fork", nil, &sess); err != nil {
		return sandboxReply{}, notFoundAs(err, id)
	}
	token := newAccessToken()
	rec := store.E2BSandbox{ID: sess.ID, Template: src.Template, Metadata: src.Metadata, TokenHash: tokenHash(token),
		CreatedAt: h.now(), EndAt: h.now().Add(ttl)}
	err := func() (err error) {
		if len(env) > 0 {
			if rec.SealedEnv, err = seal(c.key, sess.ID, purposeEnv, env); err != nil {
				return err
			}
		}
		if rec.SealedToken, err = seal(c.key, sess.ID, purposeToken, []byte(token)); err != nil {
			return err
		}
		if rec.SealedKey, err = seal(token, sess.ID, purposeKey, []byte(c.key)); err != nil {
			return err
		}
		if err := h.rec.InsertE2BSandbox(r.Context(), rec); err != nil {
			return err
		}
		// Any call on a hibernated session resumes it: a listing of the
		// home runs no process.
		_, err = c.call(http.MethodGet, "/v1/sessions/"+url.PathEscape(sess.ID)+"/files?dir="+url.QueryEscape(ourHome), nil, nil)
		return err
	}()
	if err != nil {
		if _, derr := c.call(http.MethodDelete, "/v1/sessions/"+url.PathEscape(sess.ID), nil, nil); derr != nil {
			h.log.Warn("e2b: removing the session of a failed fork", "session", sess.ID, "err", derr)
		}
		if derr := h.rec.DeleteE2BSandbox(r.Context(), sess.ID); derr != nil {
			h.log.Warn("e2b: removing the record of a failed fork", "session", sess.ID, "err", derr)
		}
		return sandboxReply{}, err
	}
	return sandboxReply{TemplateID: rec.Template, SandboxID: sess.ID, ClientID: clientID, EnvdVersion: envdVersion, EnvdAccessToken: token}, nil
}

// forkError is one failed fork's entry: the API's status and message (the
// SDK maps them to its typed errors), or 500 without the internal text.
func (h *Handler) forkError(r *http.Request, err error) *errorReply {
	var ae *apiError
	var ce *e2bError
	switch {
	case errors.As(err, &ce):
		return &errorReply{Code: ce.status, Message: ce.msg}
	case errors.As(err, &ae):
		return &errorReply{Code: ae.Status, Message: ae.Message}
	}
	rid := r.Header.Get("X-Request-Id")
	h.log.Error("e2b: fork failed", "path", r.URL.Path, "request_id", rid, "err", err)
	return &errorReply{Code: http.StatusInternalServerError, Message: "internal error (request " + rid + ")"}
}
