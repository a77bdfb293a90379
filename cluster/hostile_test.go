package cluster

import (
	"net/http"
	"strings"
	"testing"
)

// TestHostileIDs: a session id the store cannot hold (a NUL byte, bytes
// that are not UTF-8) is no session: the local API answers it (its 404,
// as on one node), not a 503 from a failed owner look-up.
func TestHostileIDs(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a := startNode(t, st, "a", 4)
	for _, path := range []string{"/v1/sessions/%00", "/v1/sessions/s%00/execute", "/v1/sessions/%ff%fe", "/v1/sessions/%c3%28/files"} {
		before := a.calls.Load()
		resp, body := call(t, "GET", a.url+path, nil, nil)
		if resp.StatusCode != http.StatusOK || a.calls.Load() != before+1 || resp.Header.Get(HeaderNode) != "a" {
			t.Errorf("GET %s: %d %s (API calls %d, want %d)", path, resp.StatusCode, strings.TrimSpace(body), a.calls.Load(), before+1)
		}
	}
}
