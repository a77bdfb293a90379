package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/duration"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres()
	os.Exit(code)
}

const testSecret = "test-secret-0123456789abcdef-0123456789"

const testLease = 2 * time.Second

// fakeExec stands in for the executor at the Executor seam.
type fakeExec struct {
	mu       sync.Mutex
	has      map[string]bool
	adopts   map[string]int
	lost     map[string]bool // Adopt fails with ErrSessionLost
	orphans  map[string]int  // EndOrphan calls, by session
	st       *store.Store    // the node's store: EndOrphan ends the row
	fences   int
	fenced   chan struct{} // gets one value per Fence
	capacity int
	free     int
	hold     time.Time // the last HoldUntil
}

func newFakeExec(free int) *fakeExec {
	return &fakeExec{has: map[string]bool{}, adopts: map[string]int{}, lost: map[string]bool{}, orphans: map[string]int{}, fenced: make(chan struct{}, 16), capacity: 16, free: free}
}

func (f *fakeExec) Has(id string) bool { f.mu.Lock(); defer f.mu.Unlock(); return f.has[id] }

func (f *fakeExec) Adopt(ctx context.Context, id string) (sandbox.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost[id] {
		return sandbox.Session{}, fmt.Errorf("adopting %s: %w", id, sandbox.ErrSessionLost)
	}
	if !f.has[id] {
		f.adopts[id]++
		f.has[id] = true
	}
	return sandbox.Session{ID: id, State: sandbox.StateHibernated}, nil
}

func (f *fakeExec) EndOrphan(ctx context.Context, id, reason string) error {
	f.mu.Lock()
	f.orphans[id]++
	delete(f.has, id)
	f.mu.Unlock()
	if err := f.st.SetSessionState(ctx, id, "ended", reason, true); err != nil {
		return fmt.Errorf("ending %s: %w", id, err)
	}
	return nil
}

// endedOrphans is how many times EndOrphan was called for session id.
func (f *fakeExec) endedOrphans(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.orphans[id]
}

func (f *fakeExec) Fence(ctx context.Context) error {
	f.mu.Lock()
	f.fences++
	clear(f.has)
	f.mu.Unlock()
	f.fenced <- struct{}{}
	return nil
}

// holds makes the node hold session id's sandbox, as a create would.
// The node's loop clears the set when it fences, so it is written under
// the lock.
func (f *fakeExec) holds(id string) { f.mu.Lock(); f.has[id] = true; f.mu.Unlock() }

func (f *fakeExec) HoldUntil(t time.Time) { f.mu.Lock(); f.hold = t; f.mu.Unlock() }

func (f *fakeExec) Capacity() int { return f.capacity }
func (f *fakeExec) Free() int     { f.mu.Lock(); defer f.mu.Unlock(); return f.free }

func (f *fakeExec) adopted(id string) int { f.mu.Lock(); defer f.mu.Unlock(); return f.adopts[id] }

// countObs counts what the node observes.
type countObs struct {
	forwards  sync.Map     // outcome -> *atomic.Int64
	takeovers atomic.Int64 // claims for a call ("expired", "handover")
	swept     atomic.Int64 // claims by a sweep
}

func (o *countObs) ClusterForward(outcome string) {
	v, _ := o.forwards.LoadOrStore(outcome, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (o *countObs) ClusterTakeover(from string) {
	if from == "swept" {
		o.swept.Add(1)
		return
	}
	o.takeovers.Add(1)
}

func (o *countObs) forwarded(outcome string) int64 {
	v, ok := o.forwards.Load(outcome)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// testNode is one node on a loopback listener, with a fake API behind
// its handler.
type testNode struct {
	name  string
	url   string
	node  *Node
	ex    *fakeExec
	obs   *countObs
	srv   *httptest.Server
	st    *store.Store
	calls atomic.Int64 // requests the fake API served
	mu    sync.Mutex
	seen  []http.Header // headers of the requests the fake API served
	// release, when set, is what the streaming route waits for between
	// its two events.
	release chan struct{}
	alive   atomic.Bool  // the lease loop runs
	skew    atomic.Int64 // added to the node's clock
}

func openStore(t *testing.T, url string) *store.Store {
	t.Helper()
	st, err := store.OpenURL(t.Context(), url, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// startNode starts node name on st's database, free sandboxes free.
func startNode(t *testing.T, st *store.Store, name string, free int) *testNode {
	t.Helper()
	return startNodeSecret(t, st, name, free, testSecret)
}

// steadyLease is the lease of the nodes of tests whose subject is not
// leases: with testLease, a node starved on a loaded machine (the race
// pass beside the sandboxed tests) renews late, fences itself, and lets
// its sessions go in the middle of the test.
const steadyLease = time.Minute

// steady gives a node steadyLease.
func steady(s *Settings) { s.Lease = duration.Duration(steadyLease) }

// startSteadyNode is startNode with steadyLease.
func startSteadyNode(t *testing.T, st *store.Store, name string, free int) *testNode {
	t.Helper()
	return startNodeWith(t, st, name, free, nodeOpts{conf: steady})
}

// startNodeSecret is startNode with cluster.secret secret.
func startNodeSecret(t *testing.T, st *store.Store, name string, free int, secret string) *testNode {
	t.Helper()
	return startNodeWith(t, st, name, free, nodeOpts{secret: secret})
}

// nodeOpts are what startNodeWith changes from startNode's node.
type nodeOpts struct {
	secret string            // empty: testSecret
	tls    *tls.Config       // set: the node serves HTTPS with it, and advertises https
	conf   func(s *Settings) // set: changes the settings before New
	// api, when set, serves the node's local calls instead of the fake
	// API (testNode.api).
	api http.Handler
	// server, when set, changes the node's http.Server before it starts
	// (its timeouts).
	server func(s *http.Server)
	// log, when set, gets the node's lines.
	log *slog.Logger
	// trans, when set, is the node's Transport (Deps.Transport).
	trans http.RoundTripper
	// caller, when set, is the node's key resolution (Deps.Caller).
	caller CallerFunc
}

// startNodeWith starts node name on st's database, free sandboxes free,
// as o says.
func startNodeWith(t *testing.T, st *store.Store, name string, free int, o nodeOpts) *testNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scheme, secret := "http://", o.secret
	if o.tls != nil {
		scheme = "https://"
	}
	if secret == "" {
		secret = testSecret
	}
	tn := &testNode{name: name, url: scheme + ln.Addr().String(), ex: newFakeExec(free), obs: &countObs{}, st: st.ForNode(name)}
	tn.ex.st = tn.st
	s := Settings{Node: name, AdvertiseURL: tn.url, Secret: secret, Lease: duration.Duration(testLease)}
	if o.conf != nil {
		o.conf(&s)
	}
	n, err := New(s, Deps{Store: tn.st, Executor: tn.ex, Observer: tn.obs, Log: o.log, Now: func() time.Time { return time.Now().Add(time.Duration(tn.skew.Load())) }, Transport: o.trans, Caller: o.caller})
	if err != nil {
		t.Fatal(err)
	}
	tn.node = n
	var api http.Handler = http.HandlerFunc(tn.api)
	if o.api != nil {
		api = o.api
	}
	tn.srv = httptest.NewUnstartedServer(n.Handler(api))
	tn.srv.Listener.Close()
	tn.srv.Listener = ln
	if o.server != nil {
		o.server(tn.srv.Config)
	}
	if o.tls != nil {
		tn.srv.TLS = o.tls
		tn.srv.StartTLS()
	} else {
		tn.srv.Start()
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	tn.alive.Store(true)
	t.Cleanup(func() {
		tn.srv.Close()
		if tn.alive.Load() {
			_ = n.Stop(context.Background())
		}
	})
	return tn
}

// kill stops the node the way SIGKILL does: no more renewals, no
// ExpireNode, its listener closed.
func (tn *testNode) kill() {
	tn.srv.CloseClientConnections()
	tn.srv.Listener.Close()
	tn.srv.Close()
	close(tn.node.stop)
	<-tn.node.done
	tn.alive.Store(false)
}

// api is the fake API: it creates sessions (owned by this node), answers
// calls with the node's name, streams two events and swallows uploads.
func (tn *testNode) api(w http.ResponseWriter, r *http.Request) {
	tn.calls.Add(1)
	tn.mu.Lock()
	tn.seen = append(tn.seen, r.Header.Clone())
	tn.mu.Unlock()
	w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/sessions":
		id := fmt.Sprintf("s-%s-%d", tn.name, time.Now().UnixNano())
		if err := tn.st.InsertSession(r.Context(), store.SessionRow{ID: id, KeyID: "k1", Language: "python", State: "running",
			IdleTTL: time.Hour, CreatedAt: time.Now(), LastUsedAt: time.Now()}); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		tn.ex.holds(id)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]string{"id": id, "node": tn.name})
	case strings.HasSuffix(r.URL.Path, "/stream"):
		// The body is read first, as the API reads its JSON: until the
		// body's end the server does not watch the connection, so a
		// client that left would never end the wait below (a stream
		// node a served itself, after claiming a session whose owner's
		// lease ran out, kept httptest.Server.Close waiting for ever).
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: stdout\ndata: {\"data\":\"first\"}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-tn.release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "event: result\ndata: {}\n\n")
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/files"):
		w.Header().Set("Content-Type", "application/octet-stream")
		io.Copy(w, io.LimitReader(zeros{}, 64<<20))
	case r.Method == http.MethodPut:
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"bytes": n, "node": tn.name})
	default:
		json.NewEncoder(w).Encode(map[string]string{"node": tn.name, "path": r.URL.Path})
	}
}

// insertSession records session id as owned by node (empty: unowned),
// used now, with an idle TTL of an hour (no sweep ends it).
func insertSession(t *testing.T, st *store.Store, node, id string) {
	t.Helper()
	insertIdleSession(t, st, node, id, time.Now(), time.Hour)
}

// insertIdleSession records session id as owned by node (empty:
// unowned), last used at used, with idle TTL ttl.
func insertIdleSession(t *testing.T, st *store.Store, node, id string, used time.Time, ttl time.Duration) {
	t.Helper()
	if err := st.ForNode(node).InsertSession(t.Context(), store.SessionRow{ID: id, KeyID: "k1", Language: "python", State: "running",
		IdleTTL: ttl, CreatedAt: used, LastUsedAt: used}); err != nil {
		t.Fatal(err)
	}
}

// call sends a request to base and returns the reply with its body read.
func call(t *testing.T, method, url string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	return callWith(t, http.DefaultClient, method, url, body, hdr)
}

// callWith is call through client c.
func callWith(t *testing.T, c *http.Client, method, url string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer test-key")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func testPostgres(t *testing.T) string { return testenv.PostgresURL(t) }

// waitFor polls cond until it holds or d passed.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
