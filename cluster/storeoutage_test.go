package cluster

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// TestSessionCallsWhileStoreDown: a call for a session reads its owner in
// the store before anything else. While PostgreSQL is stopped it answers
// 503 store_unavailable with Retry-After, as the API does, not a 500 nor
// node_unavailable; once PostgreSQL is started again, the same node
// serves the session's calls again without a restart.
func TestSessionCallsWhileStoreDown(t *testing.T) {
	pg := testenv.StartPostgres(t)
	st := openStore(t, pg.URL())
	a := startNode(t, st, "a", 4)
	insertSession(t, st, "a", "s1")
	if resp, body := call(t, "GET", a.url+"/v1/sessions/s1", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("up: %d %s", resp.StatusCode, body)
	}

	pg.Stop(t)
	start := time.Now()
	resp, body := call(t, "GET", a.url+"/v1/sessions/s1", nil, nil)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("down: %d (Retry-After %q) %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != "store_unavailable" {
		t.Fatalf("down: body %s", body)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("down: the call took %v", d)
	}

	pg.Start(t)
	// The node may have let its lease go meanwhile: it registers again.
	var last string
	if !waitFor(3*testLease+5*time.Second, func() bool {
		resp, body := call(t, "GET", a.url+"/v1/sessions/s1", nil, nil)
		last = body
		return resp.StatusCode == 200
	}) {
		t.Fatalf("after the restart: never 200; last reply %s", last)
	}
}
