package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// fakeLifecycle hibernates and forks sessions of a fakeSandboxes.
type fakeLifecycle struct {
	sb      *fakeSandboxes
	forkErr error
	forks   []sandbox.ForkSpec
}

func (f *fakeLifecycle) HibernateSession(ctx context.Context, owner, id string) (sandbox.Session, error) {
	s, err := f.sb.GetSession(ctx, owner, id)
	if err != nil {
		return s, err
	}
	s.State, s.HibernatedAt = sandbox.StateHibernated, time.Now()
	return s, nil
}

func (f *fakeLifecycle) ForkSession(ctx context.Context, id string, spec sandbox.ForkSpec) (sandbox.Session, error) {
	f.forks = append(f.forks, spec)
	if f.forkErr != nil {
		return sandbox.Session{}, f.forkErr
	}
	src, err := f.sb.GetSession(ctx, spec.Owner, id)
	if err != nil {
		return src, err
	}
	network := src.Network
	if spec.Network != nil {
		network = *spec.Network
	}
	child, err := f.sb.CreateSession(ctx, sandbox.SessionSpec{Language: src.Language, Owner: spec.Owner, Network: network})
	child.State, child.ForkedFrom = sandbox.StateHibernated, id
	return child, err
}

func TestForkAndHibernateRoutes(t *testing.T) {
	t.Parallel()
	lc := &fakeLifecycle{}
	srv, sb := newFakeServerDeps(t, nil, func(d *Deps) { d.Lifecycle = lc })
	lc.sb = sb
	call := func(method, path, plan, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("X-RapidAPI-Key", "key-"+plan)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		return w
	}
	w := call("POST", "/v1/sessions", "PRO", `{"language":"python3"}`)
	var src wire.Session
	_ = json.Unmarshal(w.Body.Bytes(), &src)

	cases := []struct {
		name, plan, path, body string
		forkErr                error
		status                 int
		code                   string
	}{
		{name: "hibernate", plan: "PRO", path: "/v1/sessions/" + src.ID + "/hibernate", status: 200},
		{name: "hibernate another key's", plan: "ULTRA", path: "/v1/sessions/" + src.ID + "/hibernate", status: 404, code: "not_found"},
		{name: "fork without a body", plan: "PRO", path: "/v1/sessions/" + src.ID + "/fork", status: 201},
		{name: "fork past the plan's sessions", plan: "PRO", path: "/v1/sessions/" + src.ID + "/fork", body: `{}`, status: 429, code: "quota_exceeded"},
		{name: "fork another key's", plan: "ULTRA", path: "/v1/sessions/" + src.ID + "/fork", status: 404, code: "not_found"},
		{name: "fork on a plan without sessions", plan: "BASIC", path: "/v1/sessions/" + src.ID + "/fork", status: 403, code: "plan_forbidden"},
		{name: "fork with an unknown field", plan: "PRO", path: "/v1/sessions/" + src.ID + "/fork", body: `{"lang":"x"}`, status: 400, code: "unknown_field"},
		{name: "fork with allowed_domains on PRO", plan: "PRO", path: "/v1/sessions/" + src.ID + "/fork", body: `{"network":{"enabled":true,"allowed_domains":["a.test"]}}`, status: 403, code: "plan_forbidden"},
	}
	for _, c := range cases {
		lc.forkErr = c.forkErr
		w := call("POST", c.path, c.plan, c.body)
		if w.Code != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, w.Code, w.Body, c.status)
			continue
		}
		if c.code != "" && !strings.Contains(w.Body.String(), `"code":"`+c.code+`"`) {
			t.Errorf("%s: %s, want code %s", c.name, w.Body, c.code)
		}
		if c.status == 200 && !strings.Contains(w.Body.String(), `"state":"hibernated"`) || c.status == 200 && !strings.Contains(w.Body.String(), `"hibernated_at"`) {
			t.Errorf("%s: %s", c.name, w.Body)
		}
		if c.status == 201 && !strings.Contains(w.Body.String(), `"forked_from":"`+src.ID+`"`) {
			t.Errorf("%s: %s", c.name, w.Body)
		}
	}
	// The disk budget: 507 insufficient_storage.
	lc2 := &fakeLifecycle{forkErr: sandbox.ErrNoStorage}
	srv2, sb2 := newFakeServerDeps(t, nil, func(d *Deps) { d.Lifecycle = lc2 })
	lc2.sb = sb2
	req := httptest.NewRequest("POST", "/v1/sessions", strings.NewReader(`{"language":"bash"}`))
	req.Header.Set("X-RapidAPI-Key", "key-MEGA")
	w = httptest.NewRecorder()
	srv2.ServeHTTP(w, req)
	var s2 wire.Session
	_ = json.Unmarshal(w.Body.Bytes(), &s2)
	req = httptest.NewRequest("POST", "/v1/sessions/"+s2.ID+"/fork", nil)
	req.Header.Set("X-RapidAPI-Key", "key-MEGA")
	w = httptest.NewRecorder()
	srv2.ServeHTTP(w, req)
	if w.Code != http.StatusInsufficientStorage || !strings.Contains(w.Body.String(), `"code":"insufficient_storage"`) {
		t.Fatalf("fork past the disk budget: %d %s", w.Code, w.Body)
	}
}

// A call that resumed its session carries X-Sandbox-Resumed, set by the
// executor's note before the reply's header is written.
func TestResumeHeader(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.Sandboxes = resumingSandboxes{d.Sandboxes.(*fakeSandboxes)} })
	req := httptest.NewRequest("POST", "/v1/sessions", strings.NewReader(`{"language":"bash"}`))
	req.Header.Set("X-RapidAPI-Key", "key-PRO")
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	var s wire.Session
	_ = json.Unmarshal(w.Body.Bytes(), &s)
	for _, body := range []string{`{"code":"true"}`, `{"code":"true","stream":true}`} {
		req = httptest.NewRequest("POST", "/v1/sessions/"+s.ID+"/execute", strings.NewReader(body))
		req.Header.Set("X-RapidAPI-Key", "key-PRO")
		w = httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != 200 || w.Header().Get("X-Sandbox-Resumed") != "123" {
			t.Fatalf("execute %s: %d header %q %s", body, w.Code, w.Header().Get("X-Sandbox-Resumed"), w.Body)
		}
	}
}

// resumingSandboxes reports a resume of 123 ms on every execute, as the
// executor does for a hibernated session, before any output.
type resumingSandboxes struct{ *fakeSandboxes }

func (r resumingSandboxes) Execute(ctx context.Context, owner, id string, req sandbox.ExecRequest) (sandbox.Result, error) {
	sandbox.NoteResume(ctx, 123*time.Millisecond)
	return r.fakeSandboxes.Execute(ctx, owner, id, req)
}

// TestResumeHeaderWaitsForSlowResume: a stream that waits for a resume
// (its own or another call's) longer than the header hold still carries
// X-Sandbox-Resumed: its headers wait for the resume, up to a heartbeat.
func TestResumeHeaderWaitsForSlowResume(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServerDeps(t, func(c *Config) { c.StreamHeartbeat = 5 * time.Second }, func(d *Deps) { d.Sandboxes = slowResumeSandboxes{d.Sandboxes.(*fakeSandboxes)} })
	ts := httptest.NewServer(srv)
	defer ts.Close()
	post := func(path, body string) *http.Response {
		req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
		req.Header.Set("X-RapidAPI-Key", "key-PRO")
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post("/v1/sessions", `{"language":"bash"}`)
	var s wire.Session
	_ = json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	resp = post("/v1/sessions/"+s.ID+"/execute", `{"code":"true","stream":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Sandbox-Resumed") != "1500" || !strings.Contains(string(b), "event: result") {
		t.Fatalf("stream after a 1.5 s resume: %d header %q %s", resp.StatusCode, resp.Header.Get("X-Sandbox-Resumed"), b)
	}
}

// slowResumeSandboxes waits 1.5 s for a resume (longer than the stream's
// header hold) before running, as a call behind a slow resume does.
type slowResumeSandboxes struct{ *fakeSandboxes }

func (r slowResumeSandboxes) Execute(ctx context.Context, owner, id string, req sandbox.ExecRequest) (sandbox.Result, error) {
	sandbox.NoteResumePending(ctx)
	time.Sleep(1500 * time.Millisecond)
	sandbox.NoteResume(ctx, 1500*time.Millisecond)
	return r.fakeSandboxes.Execute(ctx, owner, id, req)
}
