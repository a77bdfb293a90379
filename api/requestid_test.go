package api

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// TestClientRequestID checks which X-Request-Id values a client may
// choose; anything else is replaced by a generated id, never echoed.
func TestClientRequestID(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServer(t)
	cases := []struct {
		name string
		id   string
		kept bool
	}{
		{name: "plain", id: "client-chosen-42", kept: true},
		{name: "all allowed characters", id: "A.z_0-9", kept: true},
		{name: "uuid", id: "5f0c8e2a-8d3b-4c7e-9b1a-2f6d4e8a0c11", kept: true},
		{name: "64 characters", id: strings.Repeat("a", 64), kept: true},
		{name: "65 characters", id: strings.Repeat("a", 65)},
		{name: "space", id: "a b"},
		{name: "log forging newline", id: "x\n{\"level\":\"ERROR\"}"},
		{name: "carriage return", id: "x\r"},
		{name: "quote", id: `x"y`},
		{name: "html", id: "<script>"},
		{name: "slash", id: "../etc"},
		{name: "colon", id: "a:b"},
		{name: "non-ascii", id: "idé"},
		{name: "nul", id: "a\x00b"},
		{name: "tab", id: "a\tb"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest("GET", "/v1/runtimes", nil)
			req.Header["X-Request-Id"] = []string{tc.id} // raw: no header validation here
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			got := rec.Header().Get("X-Request-Id")
			if tc.kept {
				if got != tc.id {
					t.Fatalf("X-Request-Id %q, want the client's %q", got, tc.id)
				}
				return
			}
			if got == tc.id || !validRequestID(got) {
				t.Fatalf("X-Request-Id %q for a client's %q, want a generated one", got, tc.id)
			}
			if strings.Contains(rec.Body.String(), tc.id) {
				t.Fatalf("the client's id is echoed in the body: %s", rec.Body)
			}
		})
	}
}

// FuzzValidRequestID checks that an accepted id is always safe to echo.
func FuzzValidRequestID(f *testing.F) {
	for _, s := range []string{"", "abc", "a\nb", strings.Repeat("z", 65), "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if !validRequestID(id) {
			return
		}
		if len(id) == 0 || len(id) > 64 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
			t.Fatalf("accepted %q", id)
		}
	})
}

// recMeter keeps every usage record. Safe for concurrent use.
type recMeter struct {
	mu   sync.Mutex
	rows []Usage
}

func (m *recMeter) Record(u Usage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows = append(m.rows, u)
}

// slowFailingInstaller fails every install after d.
type slowFailingInstaller struct{ d time.Duration }

func (i slowFailingInstaller) Install(ctx context.Context, owner, id string, req sandbox.InstallRequest, timeout time.Duration) (sandbox.InstallReply, error) {
	time.Sleep(i.d)
	return sandbox.InstallReply{}, sandbox.ErrInstallFailed
}

// TestFailedInstallMetersItsTime checks that an install that fails is
// metered with the time it took, not 0.
func TestFailedInstallMetersItsTime(t *testing.T) {
	t.Parallel()
	m := &recMeter{}
	const took = 40 * time.Millisecond
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) {
		d.Meter, d.Installer, d.Gate = m, slowFailingInstaller{took}, &fakeGate{}
	})
	h := map[string]string{"X-API-Key": "key-PRO"}
	rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, h)
	if rec.Code != 201 {
		t.Fatalf("session: %d %s", rec.Code, rec.Body)
	}
	id := strings.Split(strings.Split(rec.Body.String(), `"id":"`)[1], `"`)[0]
	rec = send(t, srv, "POST", "/v1/sessions/"+id+"/install", `{"manager":"pip","packages":["six==1.16.0"]}`, h)
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), "install_failed") {
		t.Fatalf("install: %d %s", rec.Code, rec.Body)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	last := m.rows[len(m.rows)-1]
	if last.Route != "POST /v1/sessions/{id}/install" || last.Status != 500 {
		t.Fatalf("last usage row %+v", last)
	}
	if last.ExecMillis < took.Milliseconds() {
		t.Fatalf("failed install metered %d ms of execution, want at least %d", last.ExecMillis, took.Milliseconds())
	}
}
