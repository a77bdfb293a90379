package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// fakeSandboxes is an in-memory api.Sandboxes for logic tests: sessions are
// map entries and an execution echoes its code to stdout. Code "exit 1"
// yields status error, "sleep" a timeout. Methods the interface gains later
// are promoted from the nil embedded Sandboxes and panic if called. Safe
// for concurrent use.
type fakeSandboxes struct {
	Sandboxes
	mu       sync.Mutex
	sessions map[string]sandbox.Session
	next     int
	// noNetwork makes sessions with network fail as on a server without
	// egress.
	noNetwork bool
	// execErr, if set, is what every execution returns (with no result);
	// createErr likewise for session creates.
	execErr, createErr error
	// execs records every execution request received, in order.
	execs []sandbox.ExecRequest
	// creates counts the session creates that reached the fake;
	// createPanic, if set, is what every create panics with.
	creates     int
	createPanic any
	// idPrefix goes into every session id made (fakes of several nodes
	// make distinct ids).
	idPrefix string
}

// lastExec returns the latest execution request the fake received.
func (f *fakeSandboxes) lastExec(t *testing.T) sandbox.ExecRequest {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.execs) == 0 {
		t.Fatal("no execution reached the sandboxes")
	}
	return f.execs[len(f.execs)-1]
}

// record keeps req and returns the error every execution is to fail with.
func (f *fakeSandboxes) record(req sandbox.ExecRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	req.OnOutput = nil
	f.execs = append(f.execs, req)
	return f.execErr
}

func newFakeSandboxes() *fakeSandboxes {
	return &fakeSandboxes{sessions: map[string]sandbox.Session{}}
}

func (f *fakeSandboxes) CreateSession(ctx context.Context, spec sandbox.SessionSpec) (sandbox.Session, error) {
	if spec.Language != "python3" && spec.Language != "python" && spec.Language != "bash" {
		return sandbox.Session{}, fmt.Errorf("%w: %s", sandbox.ErrUnknownLanguage, spec.Language)
	}
	f.mu.Lock()
	f.creates++
	f.mu.Unlock()
	if f.createPanic != nil {
		panic(f.createPanic)
	}
	if f.noNetwork && spec.Network.Enabled {
		return sandbox.Session{}, sandbox.ErrNoNetwork
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createErr != nil {
		return sandbox.Session{}, f.createErr
	}
	f.next++
	ttl := spec.IdleTTL
	if ttl == 0 {
		ttl = 10 * time.Minute
	}
	now := time.Now()
	s := sandbox.Session{ID: fmt.Sprintf("s%s%015d", f.idPrefix, f.next), Owner: spec.Owner, Language: "python3", State: sandbox.StateRunning,
		IdleTTL: ttl, Network: spec.Network, CreatedAt: now, LastUsedAt: now}
	f.sessions[s.ID] = s
	return s, nil
}

func (f *fakeSandboxes) GetSession(ctx context.Context, owner, id string) (sandbox.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[id]
	if !ok || s.Owner != owner {
		return sandbox.Session{}, sandbox.ErrNotFound
	}
	return s, nil
}

func (f *fakeSandboxes) ListSessions(ctx context.Context, owner string) []sandbox.Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []sandbox.Session{}
	for _, s := range f.sessions {
		if s.Owner == owner {
			out = append(out, s)
		}
	}
	return out
}

func (f *fakeSandboxes) CountSessions(owner string) int {
	return len(f.ListSessions(context.Background(), owner))
}

func (f *fakeSandboxes) DeleteSession(ctx context.Context, owner, id string) error {
	if _, err := f.GetSession(ctx, owner, id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sessions, id)
	return nil
}

func (f *fakeSandboxes) run(req sandbox.ExecRequest) sandbox.Result {
	res := sandbox.Result{ExecutionID: "e1", Stdout: req.Code + "\n", Status: sandbox.StatusOK, DurationMS: 3}
	switch {
	case strings.Contains(req.Code, "exit 1"):
		res.Status, res.ExitCode, res.Stdout = sandbox.StatusError, 1, ""
	case strings.Contains(req.Code, "sleep"):
		res.Status, res.ExitCode, res.Signal, res.Stdout = sandbox.StatusTimeout, -1, "SIGKILL", ""
	}
	if req.OnOutput != nil && res.Stdout != "" {
		req.OnOutput("stdout", []byte(res.Stdout))
	}
	return res
}

func (f *fakeSandboxes) Execute(ctx context.Context, owner, id string, req sandbox.ExecRequest) (sandbox.Result, error) {
	if _, err := f.GetSession(ctx, owner, id); err != nil {
		return sandbox.Result{}, err
	}
	if err := f.record(req); err != nil {
		return sandbox.Result{}, err
	}
	return f.run(req), nil
}

func (f *fakeSandboxes) ExecuteStateless(ctx context.Context, owner string, req sandbox.ExecRequest) (sandbox.Result, error) {
	switch req.Language {
	case "python3", "python", "bash":
	default:
		return sandbox.Result{}, fmt.Errorf("%w: %s", sandbox.ErrUnknownLanguage, req.Language)
	}
	if err := f.record(req); err != nil {
		return sandbox.Result{}, err
	}
	return f.run(req), nil
}

func (f *fakeSandboxes) NetworkAvailable() bool { return !f.noNetwork }

func (f *fakeSandboxes) RuntimeList() []sandbox.Runtime {
	return []sandbox.Runtime{
		{Language: "python3", Aliases: []string{"python"}, Version: "3.13.5"},
		{Language: "bash", Aliases: []string{}, Version: "5.2.37"},
	}
}

// fakeKeys holds secrets by plan: the secret of plan P is "key-P".
type fakeKeys struct{}

func (fakeKeys) Lookup(ctx context.Context, hash string) (string, string, string, error) {
	for _, plan := range []string{"BASIC", "PRO", "ULTRA", "MEGA"} {
		if HashKey("key-"+plan) == hash {
			return "id-" + plan, "test " + plan, plan, nil
		}
	}
	return "", "", "", ErrUnknownKey
}

type fakeUsage struct{}

func (fakeUsage) UsageTotals(ctx context.Context, keyID string, since time.Time) ([]wire.UsageTotal, error) {
	return []wire.UsageTotal{{KeyID: keyID, Day: "2026-11-30", Route: "POST /v1/execute", Requests: 1, Errors: 0,
		BytesIn: 40, BytesOut: 180, ExecMS: 12, DurationMS: 15}}, nil
}

type fakeEgressLog struct{}

func (fakeEgressLog) EgressDecisions(ctx context.Context, sessionID string, limit int) ([]wire.EgressDecision, error) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return []wire.EgressDecision{
		{Time: at, Mode: "connect", Host: "example.com", Port: 443, Outcome: "deny", Reason: "not_allowed", Count: 1},
		{Time: at, Mode: "connect", Host: "pypi.org", Port: 443, Addr: "127.0.0.1:443", Outcome: "allow", Reason: "allowed_domain",
			BytesUp: 500, BytesDown: 9000, DurationMS: 40, Count: 1},
	}, nil
}

func (fakeEgressLog) SessionOwner(ctx context.Context, sessionID string) (string, error) {
	return "", sandbox.ErrNotFound
}

type fakePackages struct{}

func (fakePackages) Check(ctx context.Context, manager string, specs []string) ([]PackageVerdict, error) {
	out := make([]PackageVerdict, len(specs))
	for i, s := range specs {
		out[i] = PackageVerdict{Spec: s, Name: s, Status: PackageNotFound, OSV: "unknown", Reasons: []string{"not in the mirror"}}
	}
	return out, nil
}

// fakeInstaller installs any "name==version" except names starting with
// "bad", which it rejects.
type fakeInstaller struct{}

func (fakeInstaller) Install(ctx context.Context, owner, id string, req sandbox.InstallRequest, timeout time.Duration) (sandbox.InstallReply, error) {
	reply := sandbox.InstallReply{Manager: req.Manager, Installed: []sandbox.InstalledPackage{}, DurationMS: 5}
	for _, p := range req.Packages {
		if strings.HasPrefix(p, "bad") {
			return sandbox.InstallReply{}, &sandbox.RejectedError{Packages: []sandbox.PackageRejection{{Package: p, Reason: "not in the mirror", Status: "missing"}}}
		}
		name, ver, _ := strings.Cut(p, "==")
		reply.Installed = append(reply.Installed, sandbox.InstalledPackage{Requested: p, Name: name, Version: ver})
	}
	return reply, nil
}

// fakeGate is ready unless its field says otherwise.
type fakeGate struct{ down bool }

func (g *fakeGate) Ready(ctx context.Context) (bool, []CheckResult) {
	if g.down {
		return false, []CheckResult{{Name: "osv", Status: "fail", Detail: "database is stale", LastRun: time.Now(), DurationMS: 1}}
	}
	return true, nil
}

// newFakeServer builds a Server over the fakes with the default plans.
func newFakeServer(t *testing.T) (*Server, *fakeSandboxes) {
	t.Helper()
	return newFakeServerWith(t, nil)
}

// newFakeServerWith is newFakeServer with edit applied to the Config first.
func newFakeServerWith(t *testing.T, edit func(*Config)) (*Server, *fakeSandboxes) {
	t.Helper()
	return newFakeServerDeps(t, edit, nil)
}

// newFakeServerDeps is newFakeServerWith with deps applied to the Deps
// (fake sandboxes, keys, the shipped plans, a silent log) first.
func newFakeServerDeps(t *testing.T, edit func(*Config), deps func(*Deps)) (*Server, *fakeSandboxes) {
	t.Helper()
	plans, err := LoadPlans(configs.Plans)
	if err != nil {
		t.Fatal(err)
	}
	sb := newFakeSandboxes()
	cfg := Config{MaxBodyBytes: 1 << 20, MaxCodeBytes: 1 << 16, MaxStdinBytes: 1 << 16,
		MaxIdleTTL: time.Hour}
	if edit != nil {
		edit(&cfg)
	}
	d := Deps{Sandboxes: sb, Keys: fakeKeys{}, Plans: plans, Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
	if deps != nil {
		deps(&d)
	}
	return New(cfg, d), sb
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
