package cluster

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// createOn posts a new session to n and returns the node that made it.
func createOn(t *testing.T, n *testNode) string {
	t.Helper()
	resp, body := call(t, "POST", n.url+"/v1/sessions", strings.NewReader(`{"language":"python"}`), nil)
	var out struct{ ID, Node string }
	if err := json.Unmarshal([]byte(body), &out); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get(HeaderNode) != out.Node {
		t.Fatalf("X-Sandbox-Node %q, made on %q", resp.Header.Get(HeaderNode), out.Node)
	}
	return out.Node
}

// TestPlacement: a new session goes to the alive, non-draining node with
// the most free sandboxes; on a tie it stays where it arrived.
func TestPlacement(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, b, c := startNode(t, st, "a", 1), startNode(t, st, "b", 5), startNode(t, st, "c", 3)
	if got := createOn(t, a); got != "b" {
		t.Fatalf("placed on %s, want b (most free)", got)
	}
	if got := createOn(t, b); got != "b" {
		t.Fatalf("placed on %s from b", got)
	}
	// b drains: c (3) has the most free of the others.
	b.node.Drain()
	if got := createOn(t, a); got != "c" {
		t.Fatalf("placed on %s, want c (b drains)", got)
	}
	// A draining node sends its new sessions elsewhere too.
	if got := createOn(t, b); got != "c" {
		t.Fatalf("from draining b: placed on %s", got)
	}
	// Tie between a and c: it stays on a.
	a.ex.mu.Lock()
	a.ex.free = 3
	a.ex.mu.Unlock()
	c.ex.mu.Lock()
	c.ex.free = 3
	c.ex.mu.Unlock()
	if err := c.node.renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := createOn(t, a); got != "a" {
		t.Fatalf("tie placed on %s, want a", got)
	}
	// A dead node is not chosen however free it says it is.
	c.kill()
	c.ex.mu.Lock()
	c.ex.free = 100
	c.ex.mu.Unlock()
	if !waitFor(2*testLease, func() bool { n, _ := st.GetNode(t.Context(), "c"); return !n.Alive(time.Now()) }) {
		t.Fatal("c's lease does not run out")
	}
	if got := createOn(t, a); got != "a" {
		t.Fatalf("placed on %s with c dead", got)
	}
}

// TestPlacementBurst: creates sent to a node between two of its renewals
// count against the free capacity it reported, so a burst spreads.
func TestPlacementBurst(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, _ := startNode(t, st, "a", 2), startNode(t, st, "b", 4)
	got := map[string]int{}
	for range 4 {
		got[createOn(t, a)]++
	}
	if got["b"] < 2 || got["a"] < 1 {
		t.Fatalf("placements %v", got)
	}
}

// TestListSessions: a key's list holds its sessions on every node: the
// local ones as the executor reports them, the others from the store.
func TestListSessions(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a := startNode(t, st, "a", 4)
	t0 := time.Now().Add(-time.Minute)
	for i, x := range []struct{ node, id, key string }{{"a", "s1", "k1"}, {"b", "s2", "k1"}, {"b", "s3", "k2"}, {"", "s4", "k1"}} {
		if err := st.ForNode(x.node).InsertSession(t.Context(), store.SessionRow{ID: x.id, KeyID: x.key, Language: "python", State: "running",
			Network: `{"enabled":true,"allowed_domains":["pypi.org"]}`, CreatedAt: t0.Add(time.Duration(i) * time.Second), LastUsedAt: t0, IdleTTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	local := []sandbox.Session{{ID: "s1", Owner: "k1", State: sandbox.StateHibernated, CreatedAt: t0}}
	got := a.node.ListSessions(t.Context(), "k1", local)
	var ids []string
	for _, s := range got {
		ids = append(ids, s.ID)
	}
	if strings.Join(ids, ",") != "s1,s2,s4" || got[0].State != sandbox.StateHibernated || got[1].Owner != "k1" ||
		!got[1].Network.Enabled || got[1].IdleTTL != time.Hour {
		t.Fatalf("list %+v", got)
	}
}

// TestWriteStatus: one line per node with its state and lease.
func TestWriteStatus(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	nodes := []store.NodeRow{
		{Name: "a", URL: "http://10.0.0.1:8080", Epoch: 3, Capacity: 16, Free: 12, StartedAt: now.Add(-time.Hour), LeaseUntil: now.Add(7 * time.Second)},
		{Name: "b", URL: "http://10.0.0.2:8080", Epoch: 1, Capacity: 16, Free: 0, Draining: true, StartedAt: now.Add(-time.Hour), LeaseUntil: now.Add(time.Second)},
		{Name: "c", URL: "http://10.0.0.3:8080", Epoch: 9, Capacity: 16, StartedAt: now.Add(-time.Hour), LeaseUntil: now.Add(-time.Minute)},
		{Name: "d", URL: "http://10.0.0.4:8080", Epoch: 2, Capacity: 16, StartedAt: now.Add(-time.Hour), LeaseUntil: time.Unix(0, 0)},
	}
	var buf bytes.Buffer
	if err := WriteStatus(&buf, nodes, now); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"NODE", "a     alive     3      12/16  ends in 7s", "b     draining", "c     expired   9", "ran out 1m0s ago", "given up"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if Alive(nodes, now) != 2 {
		t.Errorf("alive %d", Alive(nodes, now))
	}
}

// TestPlacementUnreachable: a new session placed on a node that cannot be
// reached is made where the call arrived.
func TestPlacementUnreachable(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a := startNode(t, st, "a", 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	now := time.Now()
	if _, err := st.RegisterNode(t.Context(), store.NodeRow{Name: "ghost", URL: gone, Capacity: 16, Free: 16, StartedAt: now, RenewedAt: now,
		LeaseUntil: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := createOn(t, a); got != "a" {
		t.Fatalf("placed on %s", got)
	}
	if !waitFor(time.Second, func() bool { return a.obs.forwarded("unreachable") == 1 }) {
		t.Fatalf("unreachable forwards %d", a.obs.forwarded("unreachable"))
	}
}
