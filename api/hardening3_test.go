package api

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/httperr"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// TestShutdownInterruptAnswersDraining: a call whose context shutdown
// cancels (cause httperr.ErrShutdown: the grace period ended) is answered
// 503 "draining" with Retry-After, JSON or as the stream's error event,
// not a 500; a call cancelled otherwise is not called draining.
func TestShutdownInterruptAnswersDraining(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.Sandboxes = blockingSandboxes{d.Sandboxes.(*fakeSandboxes)} })
	req := httptest.NewRequest("POST", "/v1/sessions", strings.NewReader(`{"language":"bash"}`))
	req.Header.Set("X-RapidAPI-Key", "key-PRO")
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	var s wire.Session
	_ = json.Unmarshal(w.Body.Bytes(), &s)
	for _, tc := range []struct {
		name, body string
		cause      error
		want       string
	}{
		{name: "json", body: `{"code":"sleep 60"}`, cause: httperr.ErrShutdown, want: `"code":"draining"`},
		{name: "stream", body: `{"code":"sleep 60","stream":true}`, cause: httperr.ErrShutdown, want: "event: error\ndata: {\"code\":\"draining\""},
		{name: "other cancel", body: `{"code":"sleep 60"}`, cause: context.Canceled, want: `"code":"internal"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(1200*time.Millisecond, func() { cancel(tc.cause) }) // after a stream's headers
			req := httptest.NewRequest("POST", "/v1/sessions/"+s.ID+"/execute", strings.NewReader(tc.body)).WithContext(ctx)
			req.Header.Set("X-RapidAPI-Key", "key-PRO")
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, req)
			if !strings.Contains(w.Body.String(), tc.want) {
				t.Fatalf("%d %s, want %s", w.Code, w.Body, tc.want)
			}
			if tc.name == "json" && (w.Code != 503 || w.Header().Get("Retry-After") == "") {
				t.Fatalf("%d Retry-After %q, want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
			}
		})
	}
}

// blockingSandboxes runs every execute until its context ends, as the
// executor does with a long program that is then killed.
type blockingSandboxes struct{ *fakeSandboxes }

func (b blockingSandboxes) Execute(ctx context.Context, owner, id string, req sandbox.ExecRequest) (sandbox.Result, error) {
	<-ctx.Done()
	return sandbox.Result{}, ctx.Err()
}
