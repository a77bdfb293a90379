package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

// Quotas on several nodes: each test runs two Servers (two nodes, each
// with its own fake sandboxes and its own handle on one store, as two
// processes would have) behind two httptest servers, on SQLite (two
// handles on one file) and on PostgreSQL.

var (
	_ SessionSlots = (*store.Store)(nil)
	_ RateTokens   = (*store.Store)(nil)
)

// storeSandboxes is one node's fakeSandboxes that keeps its sessions' rows
// in the store as the executor does: a row is inserted (creating) before
// the sandbox starts, then moves to running, hibernated, failed (create
// failed, sandbox lost) or ended (deleted, idle), so that the store's
// session slots follow the sessions. Safe for concurrent use.
type storeSandboxes struct {
	*fakeSandboxes
	st *store.Store
	// failCreate makes creates fail after their row is written (a sandbox
	// that does not start); createDelay is how long a create takes.
	failCreate  atomic.Bool
	createDelay time.Duration
}

func newStoreSandboxes(st *store.Store, node string) *storeSandboxes {
	f := newFakeSandboxes()
	f.idPrefix = node
	return &storeSandboxes{fakeSandboxes: f, st: st}
}

func (f *storeSandboxes) drop(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sessions, id)
}

func (f *storeSandboxes) CreateSession(ctx context.Context, spec sandbox.SessionSpec) (sandbox.Session, error) {
	s, err := f.fakeSandboxes.CreateSession(ctx, spec)
	if err != nil {
		return s, err
	}
	now := time.Now()
	if err := f.st.InsertSession(ctx, store.SessionRow{ID: s.ID, KeyID: spec.Owner, Language: s.Language, State: "creating", Network: "{}",
		IdleTTL: s.IdleTTL, CreatedAt: now, LastUsedAt: now}); err != nil {
		f.drop(s.ID)
		return sandbox.Session{}, err
	}
	time.Sleep(f.createDelay)
	if f.failCreate.Load() {
		f.drop(s.ID)
		if err := f.st.SetSessionState(context.WithoutCancel(ctx), s.ID, "failed", "create failed", true); err != nil {
			return sandbox.Session{}, err
		}
		return sandbox.Session{}, fmt.Errorf("%w: the sandbox did not start", sandbox.ErrCapacity)
	}
	if err := f.st.SetSessionState(ctx, s.ID, "running", "", false); err != nil {
		return sandbox.Session{}, err
	}
	return s, nil
}

func (f *storeSandboxes) DeleteSession(ctx context.Context, owner, id string) error {
	if err := f.fakeSandboxes.DeleteSession(ctx, owner, id); err != nil {
		return err
	}
	return f.end(ctx, id, "deleted")
}

// end ends a session as the executor's endSession does (DELETE, idle
// TTL): ending, then ended.
func (f *storeSandboxes) end(ctx context.Context, id, reason string) error {
	if err := f.st.SetSessionState(ctx, id, "ending", reason, false); err != nil {
		return err
	}
	f.drop(id)
	return f.st.SetSessionState(ctx, id, "ended", reason, true)
}

// lose fails a session whose sandbox died, as the executor does: failed
// at once, ended after the teardown.
func (f *storeSandboxes) lose(ctx context.Context, id string) error {
	if err := f.st.SetSessionState(ctx, id, "failed", "sandbox lost", false); err != nil {
		return err
	}
	return f.end(ctx, id, "sandbox lost")
}

func (f *storeSandboxes) HibernateSession(ctx context.Context, owner, id string) (sandbox.Session, error) {
	s, err := f.GetSession(ctx, owner, id)
	if err != nil {
		return s, err
	}
	now := time.Now()
	if err := f.st.SetSessionHibernated(ctx, id, now, s.LastUsedAt); err != nil {
		return s, err
	}
	s.State, s.HibernatedAt = sandbox.StateHibernated, now
	return s, nil
}

func (f *storeSandboxes) ForkSession(ctx context.Context, id string, spec sandbox.ForkSpec) (sandbox.Session, error) {
	src, err := f.GetSession(ctx, spec.Owner, id)
	if err != nil {
		return src, err
	}
	child, err := f.CreateSession(ctx, sandbox.SessionSpec{Language: src.Language, Owner: spec.Owner})
	if err != nil {
		return child, err
	}
	if err := f.st.SetSessionHibernated(ctx, child.ID, time.Now(), child.LastUsedAt); err != nil {
		return child, err
	}
	child.State, child.ForkedFrom = sandbox.StateHibernated, id
	return child, nil
}

// clusterNode is one Server of a test cluster.
type clusterNode struct {
	url string
	sb  *storeSandboxes
	st  *store.Store
}

// storeOpener opens a new handle on the test's one store.
type storeOpener func(t *testing.T) *store.Store

// eachStore runs f on SQLite and on PostgreSQL (skipped without a server
// unless SANDBOXAPI_REQUIRE_POSTGRES=1), each a fresh store.
func eachStore(t *testing.T, f func(t *testing.T, open storeOpener)) {
	opener := func(url, path string) storeOpener {
		return func(t *testing.T) *store.Store {
			t.Helper()
			st, err := store.OpenURL(context.Background(), url, path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}
	}
	t.Run("sqlite", func(t *testing.T) { f(t, opener("", filepath.Join(t.TempDir(), "sandboxapi.db"))) })
	t.Run("postgres", func(t *testing.T) { f(t, opener(testenv.PostgresURL(t), "")) })
}

// clusterOptions are the knobs of newCluster.
type clusterOptions struct {
	plans       []byte // plans.yaml; nil: the shipped plans
	memoryRate  bool   // each node's own in-memory rate bucket, not the store's
	createDelay time.Duration
}

// newCluster starts n Servers on handles of one store.
func newCluster(t *testing.T, open storeOpener, n int, o clusterOptions) []*clusterNode {
	t.Helper()
	data := o.plans
	if data == nil {
		data = configs.Plans
	}
	plans, err := LoadPlans(data)
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]*clusterNode, n)
	for i := range nodes {
		st := open(t).ForNode(fmt.Sprintf("node%d", i))
		sb := newStoreSandboxes(st, fmt.Sprintf("n%d", i))
		sb.createDelay = o.createDelay
		d := Deps{Sandboxes: sb, Keys: fakeKeys{}, Plans: plans, Log: slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Lifecycle: sb, SessionSlots: st, RateTokens: st}
		if o.memoryRate {
			d.RateTokens = nil
		}
		cfg := Config{MaxBodyBytes: 1 << 20, MaxCodeBytes: 1 << 16, MaxStdinBytes: 1 << 16, MaxIdleTTL: time.Hour}
		hs := httptest.NewServer(New(cfg, d))
		t.Cleanup(hs.Close)
		nodes[i] = &clusterNode{url: hs.URL, sb: sb, st: st}
	}
	return nodes
}

// reply is what a test keeps of an answer.
type reply struct {
	status     int
	code       string // the error's code
	id         string // the session's id
	retryAfter string
}

// call sends one request with plan's key and reads the reply.
func (n *clusterNode) call(t *testing.T, method, path, plan, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, n.url+path, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return reply{}
	}
	req.Header.Set("X-RapidAPI-Key", "key-"+plan)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v struct {
		ID    string       `json:"id"`
		Error errorPayload `json:"error"`
	}
	_ = json.Unmarshal(b, &v)
	return reply{status: resp.StatusCode, code: v.Error.Code, id: v.ID, retryAfter: resp.Header.Get("Retry-After")}
}

func (n *clusterNode) create(t *testing.T) reply {
	t.Helper()
	return n.call(t, "POST", "/v1/sessions", "PRO", `{"language":"python3"}`)
}

// slots is how many session slots the PRO key holds in the store.
func (n *clusterNode) slots(t *testing.T) int {
	t.Helper()
	got, err := n.st.SessionSlots(context.Background(), "id-PRO")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestSessionQuotaExactAcrossNodes: 50 parallel creates of one PRO key (2
// sessions) spread over two nodes give exactly 2 sessions and 48 × 429
// quota_exceeded; after a DELETE one more create succeeds, and so does a
// fork, which takes a slot too.
func TestSessionQuotaExactAcrossNodes(t *testing.T) {
	eachStore(t, func(t *testing.T, open storeOpener) {
		// Creates that take a moment overlap, as sandboxes starting do.
		nodes := newCluster(t, open, 2, clusterOptions{createDelay: 20 * time.Millisecond})
		const creates = 50
		replies := make([]reply, creates)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range creates {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				replies[i] = nodes[i%2].create(t)
			}()
		}
		close(start)
		wg.Wait()
		owner := map[string]*clusterNode{} // session id -> its node
		var ids []string
		refused := 0
		for i, r := range replies {
			switch {
			case r.status == http.StatusCreated && r.id != "":
				owner[r.id] = nodes[i%2]
				ids = append(ids, r.id)
			case r.status == http.StatusTooManyRequests && r.code == "quota_exceeded" && r.retryAfter != "":
				refused++
			default:
				t.Errorf("create %d: %+v", i, r)
			}
		}
		if len(ids) != 2 || refused != creates-2 {
			t.Fatalf("%d sessions and %d quota_exceeded of %d parallel creates; want 2 and %d", len(ids), refused, creates, creates-2)
		}
		if got := nodes[1].slots(t); got != 2 {
			t.Fatalf("store holds %d slots, want 2", got)
		}
		// A hibernated session keeps its slot.
		if r := owner[ids[0]].call(t, "POST", "/v1/sessions/"+ids[0]+"/hibernate", "PRO", ""); r.status != http.StatusOK {
			t.Fatalf("hibernate: %+v", r)
		}
		for _, n := range nodes {
			if r := n.create(t); r.status != http.StatusTooManyRequests || r.code != "quota_exceeded" {
				t.Fatalf("create with one running and one hibernated: %+v", r)
			}
		}
		// A DELETE on one node frees a slot for a create on the other.
		if r := owner[ids[1]].call(t, "DELETE", "/v1/sessions/"+ids[1], "PRO", ""); r.status != http.StatusNoContent {
			t.Fatalf("delete: %+v", r)
		}
		other := nodes[0]
		if owner[ids[1]] == nodes[0] {
			other = nodes[1]
		}
		r := other.create(t)
		if r.status != http.StatusCreated {
			t.Fatalf("create after a delete: %+v", r)
		}
		owner[r.id] = other
		if r := nodes[0].create(t); r.status != http.StatusTooManyRequests || r.code != "quota_exceeded" {
			t.Fatalf("create past the plan again: %+v", r)
		}
		// A fork takes a slot: refused while full, made after a delete,
		// and then it holds the slot.
		src := ids[0]
		if r := owner[src].call(t, "POST", "/v1/sessions/"+src+"/fork", "PRO", ""); r.status != http.StatusTooManyRequests || r.code != "quota_exceeded" {
			t.Fatalf("fork past the plan: %+v", r)
		}
		if r := other.call(t, "DELETE", "/v1/sessions/"+r.id, "PRO", ""); r.status != http.StatusNoContent {
			t.Fatalf("delete: %+v", r)
		}
		if r := owner[src].call(t, "POST", "/v1/sessions/"+src+"/fork", "PRO", ""); r.status != http.StatusCreated {
			t.Fatalf("fork after a delete: %+v", r)
		}
		for _, n := range nodes {
			if r := n.create(t); r.status != http.StatusTooManyRequests || r.code != "quota_exceeded" {
				t.Fatalf("create beside a fork: %+v", r)
			}
		}
		if got := nodes[0].slots(t); got != 2 {
			t.Fatalf("store holds %d slots, want 2", got)
		}
	})
}

// rate10 is a plan table whose BASIC plan allows 10 requests a minute.
var rate10 = []byte(`version: v1
plans:
  BASIC: {sessions: false, max_sessions: 0, max_timeout: 30s, requests_per_minute: 10}
`)

// TestRateLimitExactAcrossNodes: a key allowed 10 requests a minute gets
// exactly 10 of 30 parallel requests spread over two nodes through the
// store's bucket, the rest 429 rate_limited with a Retry-After; each
// node's own in-memory bucket (what a single node uses) would let 20 by.
func TestRateLimitExactAcrossNodes(t *testing.T) {
	eachStore(t, func(t *testing.T, open storeOpener) {
		cases := []struct {
			name   string
			memory bool
			want   int
		}{
			{name: "store bucket", want: 10},
			{name: "in-memory buckets", memory: true, want: 20},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				nodes := newCluster(t, open, 2, clusterOptions{plans: rate10, memoryRate: c.memory})
				var ok, limited atomic.Int32
				var wg sync.WaitGroup
				for i := range 30 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := nodes[i%2].call(t, "GET", "/v1/runtimes", "BASIC", "")
						switch {
						case r.status == http.StatusOK:
							ok.Add(1)
						case r.status == http.StatusTooManyRequests && r.code == "rate_limited":
							if s, err := strconv.Atoi(r.retryAfter); err != nil || s < 1 || s > 6 {
								t.Errorf("Retry-After %q; want 1 to 6 s (a token every 6 s)", r.retryAfter)
							}
							limited.Add(1)
						default:
							t.Errorf("request %d: %+v", i, r)
						}
					}()
				}
				wg.Wait()
				if int(ok.Load()) != c.want || int(limited.Load()) != 30-c.want {
					t.Fatalf("%d allowed and %d rate_limited of 30; want %d and %d", ok.Load(), limited.Load(), c.want, 30-c.want)
				}
			})
		}
	})
}

// TestSessionEndFreesSlotAcrossNodes: a session that ends by its idle TTL
// or by losing its sandbox, or a create that fails after its row was
// written, gives its slot back to every node, with no call to the API.
func TestSessionEndFreesSlotAcrossNodes(t *testing.T) {
	eachStore(t, func(t *testing.T, open storeOpener) {
		ctx := context.Background()
		a, b := func() (*clusterNode, *clusterNode) {
			n := newCluster(t, open, 2, clusterOptions{})
			return n[0], n[1]
		}()
		s1, s2 := a.create(t), b.create(t)
		if s1.status != http.StatusCreated || s2.status != http.StatusCreated {
			t.Fatalf("creates: %+v %+v", s1, s2)
		}
		full := func(n *clusterNode) {
			t.Helper()
			if r := n.create(t); r.status != http.StatusTooManyRequests || r.code != "quota_exceeded" {
				t.Fatalf("create past the plan: %+v", r)
			}
		}
		full(a)
		full(b)

		// Idle TTL on node a: node b may create.
		if err := a.sb.end(ctx, s1.id, "idle"); err != nil {
			t.Fatal(err)
		}
		s3 := b.create(t)
		if s3.status != http.StatusCreated {
			t.Fatalf("create after an idle end: %+v", s3)
		}
		full(a)

		// A lost sandbox on node b: its slot is free, and a create on
		// node a that fails after writing its row does not keep it.
		if err := b.sb.lose(ctx, s2.id); err != nil {
			t.Fatal(err)
		}
		a.sb.failCreate.Store(true)
		if r := a.create(t); r.status != http.StatusServiceUnavailable || r.code != "no_capacity" {
			t.Fatalf("failing create: %+v", r)
		}
		a.sb.failCreate.Store(false)
		if got := a.slots(t); got != 1 {
			t.Fatalf("after a lost sandbox and a failed create: %d slots, want 1", got)
		}
		if r := a.create(t); r.status != http.StatusCreated {
			t.Fatalf("create after a lost sandbox and a failed create: %+v", r)
		}
		full(b)
	})
}
