package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/reqid"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// A timeout under a millisecond used to round to 0, which the guest read
// as "no deadline": the program ran on until the host's backstop.
func TestSubMillisecondTimeoutStillKills(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	start := time.Now()
	r := run(t, e, s.ID, "sleep 20; echo never", 400*time.Microsecond)
	took := time.Since(start)
	if r.Status != StatusTimeout || r.Stdout != "" {
		t.Fatalf("sub-millisecond timeout: %+v", r)
	}
	if took > 10*time.Second {
		t.Fatalf("sub-millisecond timeout took %v", took)
	}
	if r = run(t, e, s.ID, "echo alive", 0); r.Stdout != "alive\n" {
		t.Fatalf("after the timeout: %+v", r)
	}
}

// A file list that clashes is the caller's fault: 400, not 500, whether
// the host catches it or the guest does.
func TestStatelessClashingFilesAreInvalid(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	ctx := context.Background()
	for _, files := range [][]string{{"a", "a/b"}, {"./main.py"}, {"x", "./x"}} {
		req := ExecRequest{Language: "python3", Code: "print(1)"}
		for _, p := range files {
			req.Files = append(req.Files, sandbox.File{Path: p, Content: []byte("x")})
		}
		if _, err := e.ExecuteStateless(ctx, "k1", req); !errors.Is(err, ErrInvalid) {
			t.Fatalf("files %q: err %v, want ErrInvalid", files, err)
		}
	}
	// The guest's own refusal of a clash (here a repeated file) reaches the
	// caller as ErrInvalid too, and names none of its folders.
	ws, err := e.pool.prepare()
	if err != nil {
		t.Fatal(err)
	}
	defer e.pool.destroy(context.Background(), ws.id)
	greq := &guest.Request{
		Files: []guest.File{{Path: "d.txt", Content: []byte("1")}, {Path: "d.txt", Content: []byte("2")}},
		Argv:  []string{"true"}, Cwd: "{dir}", UID: host.SandboxUID, GID: host.SandboxUID, TimeoutMS: 5000,
	}
	_, err = e.guestRun(ctx, ws.id, greq, nil, nil)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("guest clash: err %v, want ErrInvalid", err)
	}
	if msg := err.Error(); strings.Contains(msg, "/tmp") || strings.Contains(msg, ".sbx") {
		t.Fatalf("error names the guest's folders: %q", msg)
	}
	// Valid nested folders, which the guest once made deepest first.
	res, err := e.ExecuteStateless(ctx, "k1", ExecRequest{Language: "python3",
		Code:  "print(open('a/b/c.txt').read())",
		Files: []sandbox.File{{Path: "a/b/c.txt", Content: []byte("deep")}}})
	if err != nil || res.Stdout != "deep\n" {
		t.Fatalf("nested file: %+v %v", res, err)
	}
}

// A call's own memory limit is enforced below the executor's default,
// and the session survives it.
func TestPerCallMemoryLimit(t *testing.T) {
	t.Parallel()
	e, cfg := startExecutor(t)
	if cfg.MemoryBytes < 200<<20 {
		t.Fatalf("test config's default memory %d is too small for this test", cfg.MemoryBytes)
	}
	s := mustSession(t, e, "python3")
	ctx := context.Background()
	const alloc = "x = b'x' * (150 << 20)\nprint(len(x))"
	exec := func(code string, mem int64) Result {
		t.Helper()
		res, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: code, Timeout: 30 * time.Second, MemoryBytes: mem})
		if err != nil {
			t.Fatalf("execute (memory %d): %v", mem, err)
		}
		return res
	}
	if r := exec("print('small')", 64<<20); r.Status != StatusOK || r.Stdout != "small\n" {
		t.Fatalf("a small program under 64 MiB: %+v", r)
	}
	if r := exec(alloc, 64<<20); r.Status != StatusOOM {
		t.Fatalf("150 MiB under a 64 MiB limit: %+v", r)
	}
	if r := exec("print('alive')", 0); r.Status != StatusOK || r.Stdout != "alive\n" {
		t.Fatalf("after the oom: %+v", r)
	}
	if r := exec(alloc, 0); r.Status != StatusOK || r.Stdout != "157286400\n" {
		t.Fatalf("150 MiB under the default limit of %d: %+v", cfg.MemoryBytes, r)
	}
	// A limit above the executor's is capped to it, not refused.
	if r := exec(alloc, 1<<40); r.Status != StatusOK {
		t.Fatalf("150 MiB with a limit above the server's: %+v", r)
	}
	// The same limit applies to stateless calls.
	res, err := e.ExecuteStateless(ctx, "k1", ExecRequest{Language: "python3", Code: alloc, Timeout: 30 * time.Second, MemoryBytes: 64 << 20})
	if err != nil || res.Status != StatusOOM {
		t.Fatalf("stateless 150 MiB under 64 MiB: %+v %v", res, err)
	}
}

// A session idle past its idle_ttl is reaped, and everything it held on
// the host goes with it.
func TestIdleTTLReapsSession(t *testing.T) {
	t.Parallel()
	e, cfg := startExecutor(t, func(c *Config) { c.WarmPool = 0; c.ReapInterval = 100 * time.Millisecond })
	ctx := context.Background()
	// The shared nsfs mount of --network=none is made by a first session.
	warm := mustSession(t, e, "bash")
	if err := e.DeleteSession(ctx, "k1", warm.ID); err != nil {
		t.Fatal(err)
	}
	before := hostResources(t, cfg)
	s, err := e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1", IdleTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Work keeps it alive: calls spaced under the TTL, past it in all.
	for range 3 {
		if r := run(t, e, s.ID, "echo x >> /home/sandbox/log; sleep 0.5", 0); r.Status != StatusOK {
			t.Fatalf("busy call: %+v", r)
		}
	}
	during := hostResources(t, cfg)
	if during.mounts <= before.mounts || during.procs <= before.procs || during.loops <= before.loops || during.cgroups <= before.cgroups {
		t.Fatalf("session left no trace to count: before %+v during %+v", before, during)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := e.GetSession(ctx, "k1", s.ID); errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("idle session was not reaped")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var after resources
	for end := time.Now().Add(5 * time.Second); ; {
		if after = hostResources(t, cfg); after == before || time.Now().After(end) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if after != before {
		t.Fatalf("reaped session leaked: before %+v after %+v", before, after)
	}
	if _, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "echo 1"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("execute after reaping: %v", err)
	}
}

// A listing cut at MaxListEntries says so.
func TestListTruncated(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	r := run(t, e, s.ID, fmt.Sprintf("mkdir -p /home/sandbox/many /home/sandbox/few && cd /home/sandbox/many && touch $(seq -f 'f%%05g' 1 %d) && touch ../few/a ../few/b && ls | wc -l", MaxListEntries+1), 60*time.Second)
	if strings.TrimSpace(r.Stdout) != fmt.Sprint(MaxListEntries+1) {
		t.Fatalf("making the files: %+v", r)
	}
	ctx := context.Background()
	l, err := e.files.List(ctx, "k1", s.ID, "many")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Truncated || len(l.Entries) != MaxListEntries || l.Entries[0].Name != "f00001" {
		t.Fatalf("big folder: truncated %v, %d entries", l.Truncated, len(l.Entries))
	}
	l, err = e.files.List(ctx, "k1", s.ID, "few")
	if err != nil {
		t.Fatal(err)
	}
	if l.Truncated || len(l.Entries) != 2 {
		t.Fatalf("small folder: %+v", l)
	}
}

// ctxHandler records, per message, the request id of the context each
// record was logged with.
type ctxHandler struct {
	mu  *sync.Mutex
	ids map[string]string
}

func (h ctxHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids[r.Message] = reqid.From(ctx)
	return nil
}
func (h ctxHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h ctxHandler) WithGroup(string) slog.Handler      { return h }

// The per-request log lines carry the request's context, so a handler can
// stamp its request id.
func TestRequestLogLinesCarryContext(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	h := ctxHandler{mu: &sync.Mutex{}, ids: map[string]string{}}
	e.log = slog.New(h)
	e.files.log = e.log
	ctx := reqid.With(context.Background(), "req_test")
	s, err := e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "echo 1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.files.List(ctx, "k1", s.ID, "/home/sandbox"); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteSession(ctx, "k1", s.ID); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, msg := range []string{"session created", "execution", "session ended"} {
		if got, ok := h.ids[msg]; !ok || got != "req_test" {
			t.Errorf("log line %q: request id %q (logged: %v)", msg, got, ok)
		}
	}
}
