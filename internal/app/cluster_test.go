package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/cluster"
	"github.com/sandboxapi/sandboxapi/configs"
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

// nodeSandboxes answers every session call as node name would.
type nodeSandboxes struct{ name string }

func (s nodeSandboxes) CreateSession(ctx context.Context, spec sandbox.SessionSpec) (sandbox.Session, error) {
	return sandbox.Session{}, sandbox.ErrCapacity
}
func (s nodeSandboxes) GetSession(ctx context.Context, owner, id string) (sandbox.Session, error) {
	return sandbox.Session{ID: id, Owner: owner, Language: "python", State: sandbox.StateRunning, CreatedAt: time.Now(), LastUsedAt: time.Now()}, nil
}
func (s nodeSandboxes) ListSessions(ctx context.Context, owner string) []sandbox.Session { return nil }
func (s nodeSandboxes) CountSessions(owner string) int                                   { return 0 }
func (s nodeSandboxes) DeleteSession(ctx context.Context, owner, id string) error        { return nil }
func (s nodeSandboxes) Execute(ctx context.Context, owner, id string, req sandbox.ExecRequest) (sandbox.Result, error) {
	return sandbox.Result{ExecutionID: "e1", Stdout: s.name, Status: sandbox.StatusOK}, nil
}
func (s nodeSandboxes) ExecuteStateless(ctx context.Context, owner string, req sandbox.ExecRequest) (sandbox.Result, error) {
	return sandbox.Result{}, sandbox.ErrCapacity
}
func (s nodeSandboxes) RuntimeList() []sandbox.Runtime {
	return []sandbox.Runtime{{Language: "python", Version: "3"}}
}
func (s nodeSandboxes) NetworkAvailable() bool { return false }

// heldSessions is the executor seam of a node that holds every session.
type heldSessions struct{}

func (heldSessions) Has(string) bool { return true }
func (heldSessions) Adopt(ctx context.Context, id string) (sandbox.Session, error) {
	return sandbox.Session{ID: id}, nil
}
func (heldSessions) EndOrphan(context.Context, string, string) error { return nil }
func (heldSessions) Fence(context.Context) error                     { return nil }
func (heldSessions) HoldUntil(time.Time)                             {}
func (heldSessions) Capacity() int                                   { return 4 }
func (heldSessions) Free() int                                       { return 4 }

type anyKey struct{}

func (anyKey) Lookup(ctx context.Context, hash string) (string, string, string, error) {
	return "k1", "test", "PRO", nil
}

type countMeter struct{ n atomic.Int64 }

func (m *countMeter) Record(api.Usage) { m.n.Add(1) }

// TestClusterMetersOnce: the real API behind two cluster nodes: a call
// for a session of node b sent to node a is authenticated, served and
// metered by b alone, with the request id the client sent.
func TestClusterMetersOnce(t *testing.T) {
	st, err := store.OpenURL(t.Context(), testenv.PostgresURL(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	plans, err := api.LoadPlans(configs.Plans)
	if err != nil {
		t.Fatal(err)
	}
	type node struct {
		url   string
		meter *countMeter
	}
	nodes := map[string]*node{}
	for _, name := range []string{"a", "b"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nd := &node{url: "http://" + ln.Addr().String(), meter: &countMeter{}}
		nodes[name] = nd
		srv := api.New(api.Config{MaxBodyBytes: 1 << 20, MaxCodeBytes: 1 << 20, MaxStdinBytes: 1 << 20, MaxIdleTTL: time.Hour},
			api.Deps{Sandboxes: nodeSandboxes{name}, Keys: anyKey{}, Plans: plans, Log: slog.New(slog.DiscardHandler), Meter: nd.meter})
		cn, err := cluster.New(cluster.Settings{Node: name, AdvertiseURL: nd.url, Secret: strings.Repeat("s", 32), Lease: duration.Duration(5 * time.Second)},
			cluster.Deps{Store: st.ForNode(name), Executor: heldSessions{}})
		if err != nil {
			t.Fatal(err)
		}
		if err := cn.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer cn.Stop(context.Background())
		hs := httptest.NewUnstartedServer(cn.Handler(&drainGate{next: srv}))
		hs.Listener.Close()
		hs.Listener = ln
		hs.Start()
		defer hs.Close()
	}
	if err := st.ForNode("b").InsertSession(t.Context(), store.SessionRow{ID: "s1", KeyID: "k1", Language: "python", State: "running",
		CreatedAt: time.Now(), LastUsedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", nodes["a"].url+"/v1/sessions/s1/execute", strings.NewReader(`{"code":"print(1)"}`))
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("X-Request-Id", "trace-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct{ Stdout string }
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 || out.Stdout != "b" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if resp.Header.Get(cluster.HeaderNode) != "b" || resp.Header.Get("X-Request-Id") != "trace-1" {
		t.Fatalf("headers %v", resp.Header)
	}
	deadline := time.Now().Add(time.Second)
	for nodes["b"].meter.n.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a, b := nodes["a"].meter.n.Load(), nodes["b"].meter.n.Load(); a != 0 || b != 1 {
		t.Fatalf("metered on a %d, on b %d", a, b)
	}
}
