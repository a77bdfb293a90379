package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// pgTrail is a fakeTrail that, like PostgreSQL, fails a query whose text
// is not UTF-8 or holds a NUL byte.
type pgTrail struct{ *fakeTrail }

func (p pgTrail) SessionOwner(ctx context.Context, id string) (string, error) {
	if !utf8.ValidString(id) || strings.IndexByte(id, 0) >= 0 {
		return "", errors.New("ERROR: invalid byte sequence for encoding \"UTF8\" (SQLSTATE 22021)")
	}
	return p.fakeTrail.SessionOwner(ctx, id)
}

// TestHostileSessionIDs: an id the store cannot hold is no session: 404
// not_found on the routes that look a session up in the store after it
// ended (egress here; sbom, through the same look-up, in the e2e
// TestClusterHostile), not a 500 from the failed query.
func TestHostileSessionIDs(t *testing.T) {
	trail := pgTrail{&fakeTrail{owners: map[string]string{}, decisions: map[string][]wire.EgressDecision{}}}
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.EgressLog = trail })
	ts := httptest.NewServer(srv)
	defer ts.Close()
	for _, path := range []string{"/v1/sessions/%00/egress", "/v1/sessions/a%00b/egress", "/v1/sessions/%ff%fe/egress"} {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.Header.Set("X-API-Key", "key-PRO")
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"code":"not_found"`) {
			t.Errorf("GET %s: %d %s, want 404 not_found", path, resp.StatusCode, b)
		}
	}
}

// stalledBody gives some bytes, then fails as a read past
// server.read_timeout does.
type stalledBody struct{ sent bool }

func (b *stalledBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, `{"co`), nil
	}
	return 0, os.ErrDeadlineExceeded
}

func (b *stalledBody) Close() error { return nil }

// TestBodyNotReadInTime: a call whose body stops arriving (a client
// slower than server.read_timeout, or a body a forwarding node cut) is
// the client's 400 invalid_request, the same on every route, and not a
// 500 internal logged as a server fault (an upload's was).
func TestBodyNotReadInTime(t *testing.T) {
	ff := &fakeFiles{files: map[string][]byte{}, max: 3 << 20}
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.Files = ff })
	for _, tc := range []struct{ method, path string }{
		{"PUT", "/v1/sessions/s1/files?path=up.bin"},
		{"POST", "/v1/sessions/s1/execute"},
		{"POST", "/v1/execute"},
	} {
		req := httptest.NewRequest(tc.method, tc.path, &stalledBody{})
		req.ContentLength = 100000
		req.Header.Set("X-API-Key", "key-PRO")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"code":"invalid_request"`) {
			t.Errorf("%s %s: %d %s, want 400 invalid_request", tc.method, tc.path, rec.Code, rec.Body)
		}
	}
	if len(ff.files) != 0 {
		t.Errorf("files written: %v", ff.files)
	}
}
