package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// fakeTrail is an EgressLog that, like the store, keeps sessions' owners
// and decisions after the sessions end. Safe for concurrent use.
type fakeTrail struct {
	mu        sync.Mutex
	owners    map[string]string
	decisions map[string][]wire.EgressDecision
	limits    []int // limit of every EgressDecisions call
}

func (f *fakeTrail) EgressDecisions(ctx context.Context, sessionID string, limit int) ([]wire.EgressDecision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limits = append(f.limits, limit)
	l := f.decisions[sessionID]
	if len(l) > limit {
		l = l[len(l)-limit:]
	}
	return append([]wire.EgressDecision{}, l...), nil
}

func (f *fakeTrail) SessionOwner(ctx context.Context, sessionID string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	owner, ok := f.owners[sessionID]
	if !ok {
		return "", sandbox.ErrNotFound
	}
	return owner, nil
}

// add records the session's owner and one decision per host.
func (f *fakeTrail) add(sessionID, owner string, hosts ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.owners[sessionID] = owner
	for _, h := range hosts {
		f.decisions[sessionID] = append(f.decisions[sessionID], wire.EgressDecision{Host: h, Outcome: "deny", Count: 1})
	}
}

func (f *fakeTrail) lastLimit() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.limits) == 0 {
		return 0
	}
	return f.limits[len(f.limits)-1]
}

type egressReply struct {
	SessionID string           `json:"session_id"`
	Decisions []map[string]any `json:"decisions"`
	Error     *errorPayload    `json:"error"`
}

// TestEgressLogOutlivesSession lists a session's egress decisions while it
// is live and after it was deleted, and checks that other keys never see
// them and that ?limit= is checked.
func TestEgressLogOutlivesSession(t *testing.T) {
	trail := &fakeTrail{owners: map[string]string{}, decisions: map[string][]wire.EgressDecision{}}
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.EgressLog = trail })
	ts := httptest.NewServer(srv)
	defer ts.Close()

	send := func(method, path, key, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-API-Key", key)
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	do := func(method, path, key string) (int, egressReply) {
		t.Helper()
		status, b := send(method, path, key, "")
		var r egressReply
		if len(b) > 0 {
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatalf("%s %s: %d %q: %v", method, path, status, b, err)
			}
		}
		return status, r
	}
	const owner, other = "key-PRO", "key-ULTRA"
	status, b := send("POST", "/v1/sessions", owner, `{"language":"bash"}`)
	var sess struct{ ID string }
	if err := json.Unmarshal(b, &sess); status != http.StatusCreated || err != nil || sess.ID == "" {
		t.Fatalf("create: %d %s", status, b)
	}
	// What the store holds for it: the owner (sessions.key_id) and three
	// decisions.
	trail.add(sess.ID, "id-PRO", "a.test", "b.test", "c.test")
	// Another key's ended session, known only to the trail.
	trail.add("s-ultra-ended", "id-ULTRA", "x.test")
	egressPath := "/v1/sessions/" + sess.ID + "/egress"

	wantHosts := func(t *testing.T, r egressReply, want ...string) {
		t.Helper()
		if r.SessionID != sess.ID || len(r.Decisions) != len(want) {
			t.Fatalf("reply %+v, want hosts %v", r, want)
		}
		for i, h := range want {
			if r.Decisions[i]["host"] != h {
				t.Fatalf("decision %d = %v, want host %s", i, r.Decisions[i], h)
			}
		}
	}
	wantNotFound := func(t *testing.T, path, key string) {
		t.Helper()
		status, r := do("GET", path, key)
		if status != http.StatusNotFound || r.Error == nil || r.Error.Code != "not_found" || r.Decisions != nil {
			t.Fatalf("GET %s as %s: %d %+v, want 404 not_found", path, key, status, r)
		}
	}

	t.Run("live session", func(t *testing.T) {
		status, r := do("GET", egressPath, owner)
		if status != http.StatusOK {
			t.Fatalf("status %d: %+v", status, r.Error)
		}
		wantHosts(t, r, "a.test", "b.test", "c.test")
		if got := trail.lastLimit(); got != defaultEgressLimit {
			t.Fatalf("default limit %d, want %d", got, defaultEgressLimit)
		}
		status, r = do("GET", egressPath+"?limit=2", owner)
		if status != http.StatusOK {
			t.Fatalf("status %d: %+v", status, r.Error)
		}
		wantHosts(t, r, "b.test", "c.test")
		if status, _ := do("GET", egressPath+"?limit=10000", owner); status != http.StatusOK || trail.lastLimit() != 10000 {
			t.Fatalf("limit=10000: %d, limit passed %d", status, trail.lastLimit())
		}
	})
	t.Run("live session of another key", func(t *testing.T) {
		wantNotFound(t, egressPath, other)
	})

	if status, _ := do("DELETE", "/v1/sessions/"+sess.ID, owner); status != http.StatusNoContent {
		t.Fatalf("delete: %d", status)
	}
	if status, _ := do("GET", "/v1/sessions/"+sess.ID, owner); status != http.StatusNotFound {
		t.Fatalf("deleted session still live: %d", status)
	}

	t.Run("ended session", func(t *testing.T) {
		status, r := do("GET", egressPath, owner)
		if status != http.StatusOK {
			t.Fatalf("status %d: %+v", status, r.Error)
		}
		wantHosts(t, r, "a.test", "b.test", "c.test")
		status, r = do("GET", egressPath+"?limit=1", owner)
		if status != http.StatusOK {
			t.Fatalf("status %d: %+v", status, r.Error)
		}
		wantHosts(t, r, "c.test")
	})
	t.Run("ended session of another key", func(t *testing.T) {
		wantNotFound(t, egressPath, other)
		wantNotFound(t, "/v1/sessions/s-ultra-ended/egress", owner)
	})
	t.Run("no such session", func(t *testing.T) {
		wantNotFound(t, "/v1/sessions/s-never/egress", owner)
	})

	for _, tc := range []struct {
		name, query string
	}{
		{name: "zero", query: "limit=0"},
		{name: "negative", query: "limit=-1"},
		{name: "over the maximum", query: "limit=10001"},
		{name: "not a number", query: "limit=ten"},
		{name: "empty", query: "limit="},
		{name: "fraction", query: "limit=1.5"},
		{name: "twice", query: "limit=1&limit=2"},
	} {
		t.Run("bad limit "+tc.name, func(t *testing.T) {
			// Checked before the session is looked up: the same 400 for
			// an own, another key's or no session.
			for _, path := range []string{egressPath, "/v1/sessions/s-ultra-ended/egress", "/v1/sessions/s-never/egress"} {
				status, r := do("GET", path+"?"+tc.query, owner)
				if status != http.StatusBadRequest || r.Error == nil || r.Error.Code != "invalid_request" || !strings.Contains(r.Error.Message, "limit") {
					t.Fatalf("GET %s?%s: %d %+v, want 400 invalid_request", path, tc.query, status, r.Error)
				}
			}
		})
	}
}
