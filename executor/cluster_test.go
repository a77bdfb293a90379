package executor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/executor/fence"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

// Cluster-mode tests: two executors on one host, as two nodes of a
// cluster would be (distinct data dirs and runsc roots, one shared
// homes_dir, one store opened for node "a" and for node "b").

// fenceHelperArgv runs TestFenceHelperProcess of this test binary as the
// fence process; the fence flags follow the "--".
func fenceHelperArgv() []string {
	return []string{"/usr/bin/env", "SANDBOXAPI_FENCE_HELPER=1", os.Args[0], "-test.run=^TestFenceHelperProcess$", "--"}
}

// TestFenceHelperProcess is not a test: it is the fence process of the
// cluster tests' executors (see fenceHelperArgv).
func TestFenceHelperProcess(t *testing.T) {
	if os.Getenv("SANDBOXAPI_FENCE_HELPER") != "1" {
		t.Skip("the fence process of the cluster tests")
	}
	var cfg fence.Config
	fs := flag.NewFlagSet("fence", flag.ExitOnError)
	fs.StringVar(&cfg.Root, "root", "", "")
	fs.StringVar(&cfg.Homes, "homes", "", "")
	fs.StringVar(&cfg.Lock, "lock", "", "")
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	_ = fs.Parse(args)
	signal.Ignore(fence.Signals...)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := fence.Run(context.Background(), cfg, os.Stdin, os.Stdout, log); err != nil {
		log.Error("fence", "err", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// cluster is a shared store and homes folder for executors acting as
// nodes; both nodes hold leases for an hour (a claim passes a later
// "now" to find a lease run out). The store is a SQLite file, or a
// PostgreSQL database with SANDBOXAPI_TEST_STORE=postgres.
type cluster struct {
	st     *store.Store
	dbURL  string // empty: the SQLite file dbPath
	dbPath string
	homes  string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	c := &cluster{dbPath: filepath.Join(dir, "sandboxapi.db"), homes: filepath.Join(dir, "homes")}
	if testenv.TestStorePostgres() {
		c.dbURL = testenv.PostgresURL(t)
	}
	st, err := store.OpenURL(ctx, c.dbURL, c.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c.st = st
	now := time.Now()
	for _, n := range []string{"a", "b"} {
		if _, err := st.RegisterNode(ctx, store.NodeRow{Name: n, URL: "http://" + n, Capacity: 8, Free: 8, StartedAt: now, RenewedAt: now, LeaseUntil: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// nodeConfig is the config of node name's executor: its own data dir,
// the cluster's homes, no warm pool (unless mutated), the test fence.
func (c *cluster) nodeConfig(t *testing.T, mutate ...func(*Config)) Config {
	cfg := testConfig(t, t.TempDir())
	cfg.HomesDir, cfg.WarmPool, cfg.FenceArgv = c.homes, 0, fenceHelperArgv()
	for _, m := range mutate {
		m(&cfg)
	}
	return cfg
}

// start starts an executor for node name on cfg; it is stopped when the
// test ends (unless stopped before).
func (c *cluster) start(t *testing.T, name string, cfg Config) *Executor {
	t.Helper()
	rt, err := LoadRuntimes(configs.Runtimes, cfg.VersionsFile)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg, rt, c.st.ForNode(name), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(context.Background()); err != nil {
			t.Errorf("stopping node %s: %v", name, err)
		}
	})
	return e
}

// claim moves session id to node name as if its owner's lease had run out.
func (c *cluster) claim(t *testing.T, name, id string) {
	t.Helper()
	prev, ok, err := c.st.ForNode(name).ClaimSession(context.Background(), id, time.Now().Add(2*time.Hour))
	if err != nil || !ok {
		t.Fatalf("claiming %s for %s (previous owner %q): ok %v, %v", id, name, prev, ok, err)
	}
}

// loopWatch counts the loop devices backed by img every 10 ms until its
// stop is called, which returns the most seen at once.
func loopWatch(img string) (stop func() int) {
	done := make(chan struct{})
	most := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			most = max(most, len(host.LoopDevices(img)))
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return func() int {
		close(done)
		wg.Wait()
		return most
	}
}

func clusterRun(t *testing.T, e *Executor, id, code string) Result {
	t.Helper()
	res, err := e.Execute(context.Background(), "k1", id, ExecRequest{Code: code})
	if err != nil {
		t.Fatalf("execute %q: %v", code, err)
	}
	return res
}

// hostHolds lists what session id still holds on e's side of the host:
// sandbox or gofer processes under e's runsc root, a mount, loop devices
// on its image. (runsc commands that tidy up after a fence may still run.)
func hostHolds(e *Executor, id string) []string {
	var out []string
	for _, p := range host.RootProcesses(e.runsc.Root) {
		if !p.IsCLI() && strings.Contains(strings.Join(p.Argv, " "), id) {
			out = append(out, "process "+strings.Join(p.Argv, " "))
		}
	}
	if host.Mounted(host.HomeMount(e.boxes.dir(id))) {
		out = append(out, "mount")
	}
	for _, d := range host.LoopDevices(e.boxes.home(id).Image()) {
		out = append(out, "loop device "+d)
	}
	return out
}

// TestClusterFenceThenTakeover: node a fences (its lease is lost); node b
// claims the session and adopts it, and its next call resumes it from the
// shared image with a's file in it. The image is never on two loop
// devices.
func TestClusterFenceThenTakeover(t *testing.T) {
	// Serial (no t.Parallel): a fence must finish within 2.5 s (lease/4 of a 10 s lease); other tests' load would break that.
	c := newCluster(t)
	a := c.start(t, "a", c.nodeConfig(t))
	b := c.start(t, "b", c.nodeConfig(t))
	s, err := a.CreateSession(context.Background(), SessionSpec{Language: "python3", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(c.homes, s.ID, "home.img")
	if _, err := os.Stat(img); err != nil {
		t.Fatalf("home image not in homes_dir: %v", err)
	}
	if _, err := os.Stat(host.HomeImage(a.boxes.dir(s.ID))); err == nil {
		t.Fatal("home image also in the node-local folder")
	}
	stop := loopWatch(img)
	clusterRun(t, a, s.ID, "open('/home/sandbox/f.txt','w').write('from a')")
	if !a.Node().Has(s.ID) || b.Node().Has(s.ID) {
		t.Fatalf("Has: a %v b %v", a.Node().Has(s.ID), b.Node().Has(s.ID))
	}
	if a.Node().Capacity() != 8 || a.Node().Free() != 7 {
		t.Fatalf("capacity %d free %d, want 8 and 7", a.Node().Capacity(), a.Node().Free())
	}

	start := time.Now()
	if err := a.Node().Fence(context.Background()); err != nil {
		t.Fatalf("fence: %v", err)
	}
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Errorf("fence took %v, more than lease/4 of a 10 s lease", took)
	}
	if h := hostHolds(a, s.ID); len(h) > 0 {
		t.Fatalf("after the fence, a still holds %v", h)
	}
	if a.Node().Has(s.ID) || a.Node().Free() != 8 {
		t.Fatalf("after the fence: Has %v, free %d", a.Node().Has(s.ID), a.Node().Free())
	}
	if _, err := os.Stat(img); err != nil {
		t.Fatalf("the fence touched the image: %v", err)
	}
	if r, err := c.st.GetSession(context.Background(), s.ID); err != nil || r.Node != "a" || r.State != StateRunning {
		t.Fatalf("the fence wrote to the store: %+v %v", r, err)
	}

	// a registers again (its lease is back) and serves its own session
	// again: Adopt, then a resume that waits for the fence's tidying.
	if _, err := a.Node().Adopt(context.Background(), s.ID); err != nil {
		t.Fatalf("adopt on a after its own fence: %v", err)
	}
	if res := clusterRun(t, a, s.ID, "print(open('/home/sandbox/f.txt').read())"); res.Stdout != "from a\n" || res.ResumedMS == 0 {
		t.Fatalf("on a again: %+v", res)
	}
	if err := a.Node().Fence(context.Background()); err != nil {
		t.Fatalf("second fence: %v", err)
	}

	c.claim(t, "b", s.ID)
	got, err := b.Node().Adopt(context.Background(), s.ID)
	if err != nil || got.State != StateHibernated {
		t.Fatalf("adopt: %+v %v", got, err)
	}
	if again, err := b.Node().Adopt(context.Background(), s.ID); err != nil || again.ID != s.ID {
		t.Fatalf("second adopt: %+v %v", again, err)
	}
	res := clusterRun(t, b, s.ID, "print(open('/home/sandbox/f.txt').read())")
	if res.Stdout != "from a\n" || res.ResumedMS == 0 {
		t.Fatalf("on b: %+v", res)
	}
	if _, err := a.Execute(context.Background(), "k1", s.ID, ExecRequest{Code: "print(1)"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("execute on a after the move: %v", err)
	}
	if n := stop(); n > 1 {
		t.Fatalf("the image was on %d loop devices at once", n)
	}
}

// TestClusterStateWriteAfterClaim: node b claims a session that node a
// still runs (a missed its lease); a's next state write finds the row
// b's, answers ErrSessionMoved and kills a's sandbox, and b serves the
// session with its files.
func TestClusterStateWriteAfterClaim(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := c.start(t, "a", c.nodeConfig(t))
	b := c.start(t, "b", c.nodeConfig(t))
	s, err := a.CreateSession(context.Background(), SessionSpec{Language: "bash", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(c.homes, s.ID, "home.img")
	stop := loopWatch(img)
	clusterRun(t, a, s.ID, "echo kept > /home/sandbox/f.txt")
	c.claim(t, "b", s.ID)
	if _, err := a.Durable().HibernateSession(context.Background(), "k1", s.ID); !errors.Is(err, ErrSessionMoved) {
		t.Fatalf("hibernate on a after b's claim: %v, want ErrSessionMoved", err)
	}
	if h := hostHolds(a, s.ID); len(h) > 0 {
		t.Fatalf("a still holds %v", h)
	}
	if a.Node().Has(s.ID) || a.Node().Free() != 8 {
		t.Fatalf("a: Has %v, free %d", a.Node().Has(s.ID), a.Node().Free())
	}
	if _, err := os.Stat(a.boxes.dir(s.ID)); !os.IsNotExist(err) {
		t.Fatalf("a's node-local folder is left: %v", err)
	}
	if _, err := b.Node().Adopt(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	if res := clusterRun(t, b, s.ID, "cat /home/sandbox/f.txt"); res.Stdout != "kept\n" {
		t.Fatalf("on b: %+v", res)
	}
	if n := stop(); n > 1 {
		t.Fatalf("the image was on %d loop devices at once", n)
	}

	// The same for an end (DELETE) on a node that lost the session: b's
	// image stays.
	if _, err := b.Durable().HibernateSession(context.Background(), "k1", s.ID); err != nil {
		t.Fatal(err)
	}
	c.claim(t, "a", s.ID)
	if err := b.DeleteSession(context.Background(), "k1", s.ID); !errors.Is(err, ErrSessionMoved) {
		t.Fatalf("delete on b after a's claim: %v, want ErrSessionMoved", err)
	}
	if _, err := os.Stat(img); err != nil {
		t.Fatalf("the image went with a delete that was not b's: %v", err)
	}
	if r, _ := c.st.GetSession(context.Background(), s.ID); r.State == StateEnded {
		t.Fatalf("row ended by a node that did not own it: %+v", r)
	}
}

// TestClusterAdoptWithoutImage: a session whose image is not there (homes
// not shared) ends on Adopt with ErrSessionLost.
func TestClusterAdoptWithoutImage(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	b := c.start(t, "b", c.nodeConfig(t))
	ctx := context.Background()
	now := time.Now()
	id := newID("sess_")
	if err := c.st.ForNode("a").InsertSession(ctx, store.SessionRow{ID: id, KeyID: "k1", Language: "python3", State: StateHibernated,
		Network: "{}", IdleTTL: time.Minute, CreatedAt: now, LastUsedAt: now, DiskBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Node().Adopt(ctx, id); !errors.Is(err, ErrSessionMoved) {
		t.Fatalf("adopt before the claim: %v, want ErrSessionMoved", err)
	}
	c.claim(t, "b", id)
	if _, err := b.Node().Adopt(ctx, id); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("adopt: %v, want ErrSessionLost", err)
	}
	r, err := c.st.GetSession(ctx, id)
	if err != nil || r.State != StateEnded || r.EndReason != "sandbox lost" {
		t.Fatalf("row after a lost adopt: %+v %v", r, err)
	}
	if b.Node().Has(id) {
		t.Fatal("a lost session is held")
	}
	if _, err := b.Node().Adopt(ctx, newID("sess_")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("adopt of an unknown session: %v", err)
	}
}

// TestClusterStopHandsOver: a node that stops hibernates its sessions and
// leaves them unowned, its fence process exits without touching anything,
// and another node takes the sessions over at once.
func TestClusterStopHandsOver(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	cfgA := c.nodeConfig(t)
	rtA, err := LoadRuntimes(configs.Runtimes, cfgA.VersionsFile)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfgA, rtA, c.st.ForNode("a"), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	b := c.start(t, "b", c.nodeConfig(t))
	var ids []string
	for i := 0; i < 2; i++ {
		s, err := a.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"})
		if err != nil {
			t.Fatal(err)
		}
		clusterRun(t, a, s.ID, "echo "+s.ID+" > /home/sandbox/id")
		ids = append(ids, s.ID)
	}
	// A fence process that dies while its node runs is started again.
	first := a.currentFence()
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for a.currentFence() == first && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	fence := a.currentFence()
	if fence == first {
		t.Fatal("the fence was not started again")
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if st := fence.ProcessState; st == nil || st.ExitCode() != 0 {
		t.Fatalf("fence process after a normal stop: %v", st)
	}
	for _, id := range ids {
		r, err := c.st.GetSession(ctx, id)
		if err != nil || r.Node != "" || r.State != StateHibernated {
			t.Fatalf("row after stop: %+v %v", r, err)
		}
		if h := hostHolds(a, id); len(h) > 0 {
			t.Fatalf("a still holds %v", h)
		}
		// Unowned: claimable at once, without waiting for a lease.
		if _, ok, err := c.st.ForNode("b").ClaimSession(ctx, id, time.Now()); err != nil || !ok {
			t.Fatalf("claim after hand-over: %v %v", ok, err)
		}
		if _, err := b.Node().Adopt(ctx, id); err != nil {
			t.Fatal(err)
		}
		if res := clusterRun(t, b, id, "cat /home/sandbox/id"); res.Stdout != id+"\n" {
			t.Fatalf("on b: %+v", res)
		}
	}
}

// TestClusterReconcileKeepsOthersImages: a node starting on a shared
// homes_dir removes only its own leftovers: an image whose session
// another node owns stays (its node-local folder goes), as do the other
// node's warm homes; an image this node made for no session goes.
func TestClusterReconcileKeepsOthersImages(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	b := c.start(t, "b", c.nodeConfig(t, func(cfg *Config) { cfg.WarmPool = 1 }))
	s, err := b.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1", DiskBytes: 32 << 20}) // not from the pool
	if err != nil {
		t.Fatal(err)
	}
	clusterRun(t, b, s.ID, "echo b > /home/sandbox/f")
	deadline := time.Now().Add(30 * time.Second)
	for b.Pool().Ready() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if b.Pool().Ready() == 0 {
		t.Fatal("b's warm pool did not fill")
	}
	// b's session and its warm pool's home.
	warm, _ := filepath.Glob(filepath.Join(c.homes, "*", "home.img"))
	if len(warm) < 2 {
		t.Fatalf("images in homes_dir: %v", warm)
	}

	cfgA := c.nodeConfig(t)
	// What a crash of a would leave: the node-local folder of a session
	// that b took over, and a home a made for no session yet.
	if err := os.MkdirAll(host.HomeMount(filepath.Join(cfgA.DataDir, "sessions", s.ID)), 0o700); err != nil {
		t.Fatal(err)
	}
	orphan := newID("sess_")
	if err := os.MkdirAll(host.HomeMount(filepath.Join(cfgA.DataDir, "sessions", orphan)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(c.homes, orphan), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.homes, orphan, "home.img"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := c.start(t, "a", cfgA)
	for _, p := range warm {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("a's start removed b's image %s: %v", p, err)
		}
	}
	if _, err := os.Stat(a.boxes.dir(s.ID)); !os.IsNotExist(err) {
		t.Fatalf("a's leftover folder of b's session: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.homes, orphan)); !os.IsNotExist(err) {
		t.Fatalf("a's own orphan image: %v", err)
	}
	if res := clusterRun(t, b, s.ID, "cat /home/sandbox/f"); res.Stdout != "b\n" {
		t.Fatalf("b's session after a's start: %+v", res)
	}
}

// TestClusterNodeHelperProcess is not a test: it is node a of
// TestClusterFenceProcess, a process of its own that the test kills.
func TestClusterNodeHelperProcess(t *testing.T) {
	ctx := context.Background()
	e, _ := helperNode(t, "SANDBOXAPI_NODE_HELPER_CONFIG", "node a of TestClusterFenceProcess", quietLog())
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	// A program still running when the node dies.
	go func() {
		_, _ = e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "echo from-a > /home/sandbox/f; sync; sleep 600"})
	}()
	time.Sleep(time.Second)
	os.Stdout.WriteString("session " + s.ID + "\n")
	select {} // until killed
}

// helperNode is the executor of node a in a helper process: its config
// comes as JSON in the environment variable cfgVar (the test is skipped
// without it: it is not a test of its own), its store from
// SANDBOXAPI_NODE_HELPER_DB_URL or SANDBOXAPI_NODE_HELPER_DB. It is not
// started.
func helperNode(t *testing.T, cfgVar, skip string, log *slog.Logger) (*Executor, *store.Store) {
	t.Helper()
	raw := os.Getenv(cfgVar)
	if raw == "" {
		t.Skip(skip)
	}
	var cfg Config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenURL(context.Background(), os.Getenv("SANDBOXAPI_NODE_HELPER_DB_URL"), os.Getenv("SANDBOXAPI_NODE_HELPER_DB"))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := LoadRuntimes(configs.Runtimes, cfg.VersionsFile)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg, rt, st.ForNode("a"), log)
	if err != nil {
		t.Fatal(err)
	}
	return e, st
}

// TestClusterFenceProcess: node a runs in a process of its own and is
// killed with SIGKILL mid-call; its fence process kills a's sandboxes and
// unmounts a's homes within about a second, and lets go of a's output;
// node b then takes the session over with its files.
func TestClusterFenceProcess(t *testing.T) {
	// Serial (no t.Parallel): the fence must be done within 3 s of node a's SIGKILL; other tests' load would break that.
	c := newCluster(t)
	cfgA := c.nodeConfig(t)
	raw, err := json.Marshal(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterNodeHelperProcess$")
	cmd.Env = append(os.Environ(), "SANDBOXAPI_NODE_HELPER_CONFIG="+string(raw), "SANDBOXAPI_NODE_HELPER_DB="+c.dbPath, "SANDBOXAPI_NODE_HELPER_DB_URL="+c.dbURL)
	logs := &testenv.LogBuffer{}
	cmd.Stderr = logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "session "); ok {
				lines <- id
			}
		}
		_, _ = io.Copy(io.Discard, out)
		close(lines)
	}()
	var id string
	select {
	case id = <-lines:
	case <-time.After(2 * time.Minute):
		t.Fatalf("node a did not make its session; its log:\n%s", logs.String())
	}
	if id == "" {
		t.Fatalf("node a exited; its log:\n%s", logs.String())
	}
	img := filepath.Join(c.homes, id, "home.img")
	stop := loopWatch(img)
	root, sessions := filepath.Join(cfgA.DataDir, "runsc"), filepath.Join(cfgA.DataDir, "sessions")
	if len(host.RootProcesses(root)) == 0 || len(host.HomeMounts(sessions)) != 1 {
		t.Fatalf("node a runs no sandbox or mount: %d processes, mounts %v", len(host.RootProcesses(root)), host.HomeMounts(sessions))
	}

	killed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(exited) }()
	for len(host.RootProcesses(root)) > 0 || len(host.HomeMounts(sessions)) > 0 || len(host.LoopDevices(img)) > 0 {
		if time.Since(killed) > 3*time.Second {
			t.Fatalf("3 s after node a died: %d processes under its root, mounts %v, loop devices %v; log:\n%s",
				len(host.RootProcesses(root)), host.HomeMounts(sessions), host.LoopDevices(img), logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	fenced := time.Since(killed)
	// The fence holds a's stderr only while it works.
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("node a's output is still open 15 s after its death")
	}
	t.Logf("fenced %v after SIGKILL; output closed %v after", fenced, time.Since(killed))
	if !strings.Contains(logs.String(), "fenced its sandboxes") {
		t.Errorf("no fence line in a's log:\n%s", logs.String())
	}

	b := c.start(t, "b", c.nodeConfig(t))
	c.claim(t, "b", id)
	if _, err := b.Node().Adopt(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if res := clusterRun(t, b, id, "cat /home/sandbox/f"); res.Stdout != "from-a\n" {
		t.Fatalf("on b: %+v", res)
	}
	if n := stop(); n > 1 {
		t.Fatalf("the image was on %d loop devices at once", n)
	}

	// a restarts: its start waits for nothing (the fence is done), finds
	// nothing of its own to serve and leaves b's image alone.
	a := c.start(t, "a", cfgA)
	if a.Node().Has(id) {
		t.Fatal("restarted a serves b's session")
	}
	if _, err := os.Stat(img); err != nil {
		t.Fatalf("restarted a removed b's image: %v", err)
	}
}

// TestClusterFenceDuringCall: a call running when its node fences answers
// ErrSessionMoved at once and writes nothing to the session's row.
func TestClusterFenceDuringCall(t *testing.T) {
	// Serial (no t.Parallel): a 1 s sleep stands for the call being under way when the fence comes; other tests' load would break that.
	c := newCluster(t)
	a := c.start(t, "a", c.nodeConfig(t))
	ctx := context.Background()
	s, err := a.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Execute(ctx, "k1", s.ID, ExecRequest{Code: "echo started; sleep 30", Timeout: 40 * time.Second})
		done <- err
	}()
	time.Sleep(time.Second)
	if err := a.Node().Fence(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrSessionMoved) {
			t.Fatalf("the call in flight: %v, want ErrSessionMoved", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight did not end with the fence")
	}
	r, err := c.st.GetSession(ctx, s.ID)
	if err != nil || r.Node != "a" || r.State != StateRunning {
		t.Fatalf("row after the fence: %+v %v", r, err)
	}
	if h := hostHolds(a, s.ID); len(h) > 0 {
		t.Fatalf("a still holds %v", h)
	}
}

// currentFence is e's running fence process.
func (e *Executor) currentFence() *exec.Cmd { return e.node.fence.Process() }

// TestClusterReconcileKeepsUnreadableImage: a node that restarts while
// the shared homes_dir cannot answer for a session's image (an error
// other than "does not exist": here a symlink loop, as I/O errors or a
// stale handle would be) neither ends the session nor removes its image:
// shared storage that does not answer is not a lost session.
func TestClusterReconcileKeepsUnreadableImage(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	now := time.Now()
	id := newID("sess_")
	if err := c.st.ForNode("a").InsertSession(ctx, store.SessionRow{ID: id, KeyID: "k1", Language: "python3", State: StateHibernated,
		Network: "{}", IdleTTL: time.Minute, CreatedAt: now, LastUsedAt: now, DiskBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(c.homes, 0o700); err != nil {
		t.Fatal(err)
	}
	imgDir := filepath.Join(c.homes, id)
	if err := os.Symlink(imgDir, imgDir); err != nil { // stat of anything under it: ELOOP
		t.Fatal(err)
	}
	cfg := c.nodeConfig(t)
	if err := os.MkdirAll(host.HomeMount(filepath.Join(cfg.DataDir, "sessions", id)), 0o700); err != nil {
		t.Fatal(err)
	}
	a := c.start(t, "a", cfg)
	r, err := c.st.GetSession(ctx, id)
	if err != nil || r.State != StateHibernated || r.Node != "a" {
		t.Fatalf("row after a start that could not read the image: %+v %v", r, err)
	}
	if _, err := os.Lstat(imgDir); err != nil {
		t.Fatalf("image folder removed: %v", err)
	}
	if a.Node().Has(id) {
		t.Fatal("served a session whose image could not be read")
	}
}

// TestClusterEndOrphan: node a dies with a running session (its fence
// lets go of it, the row still says running on a); node b claims it for
// the sweep and ends it at once, idle clock or not: the row ends with the
// sweep's reason, the key's plan slot is freed, the image leaves
// homes_dir, and b holds nothing of it.
func TestClusterEndOrphan(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := c.start(t, "a", c.nodeConfig(t))
	b := c.start(t, "b", c.nodeConfig(t))
	ctx := context.Background()
	s, err := a.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.st.ForNode("a").ReserveSessionSlot(ctx, "k1", s.ID, "", 4); err != nil || !ok {
		t.Fatalf("reserving a slot: %v %v", ok, err)
	}
	if err := c.st.BindSessionSlot(ctx, "k1", s.ID, s.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := c.st.SessionSlots(ctx, "k1"); err != nil || n != 1 {
		t.Fatalf("slots %d, %v", n, err)
	}
	img := filepath.Join(c.homes, s.ID, "home.img")
	clusterRun(t, a, s.ID, "echo x > /home/sandbox/f.txt")
	if err := a.Node().Fence(ctx); err != nil {
		t.Fatalf("fence: %v", err)
	}
	if err := b.Node().EndOrphan(ctx, s.ID, "idle (owner node gone)"); !errors.Is(err, ErrSessionMoved) {
		t.Fatalf("end before the claim: %v, want ErrSessionMoved", err)
	}
	c.claim(t, "b", s.ID)
	if err := b.Node().EndOrphan(ctx, s.ID, "idle (owner node gone)"); err != nil {
		t.Fatal(err)
	}
	r, err := c.st.GetSession(ctx, s.ID)
	if err != nil || r.State != StateEnded || r.EndReason != "idle (owner node gone)" || r.Node != "b" {
		t.Fatalf("row after EndOrphan: %+v %v", r, err)
	}
	if n, err := c.st.SessionSlots(ctx, "k1"); err != nil || n != 0 {
		t.Fatalf("slots after EndOrphan %d, %v", n, err)
	}
	if _, err := os.Stat(filepath.Dir(img)); !os.IsNotExist(err) {
		t.Fatalf("the home image is left in homes_dir: %v", err)
	}
	if b.Node().Has(s.ID) || b.Node().Free() != 8 {
		t.Fatalf("b: Has %v, free %d", b.Node().Has(s.ID), b.Node().Free())
	}
	if h := hostHolds(b, s.ID); len(h) > 0 {
		t.Fatalf("b still holds %v", h)
	}
	if err := b.Node().EndOrphan(ctx, s.ID, "idle (owner node gone)"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second EndOrphan: %v, want ErrNotFound", err)
	}
}

// TestClusterEndOrphanWithoutImage: an orphan whose image is not there
// (homes not shared) is ended "sandbox lost", its slot freed, and what is
// left of its home folder removed; EndOrphan answers nil.
func TestClusterEndOrphanWithoutImage(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	b := c.start(t, "b", c.nodeConfig(t))
	ctx := context.Background()
	now := time.Now().Add(-2 * time.Hour)
	id := newID("sess_")
	if err := c.st.ForNode("a").InsertSession(ctx, store.SessionRow{ID: id, KeyID: "k1", Language: "python3", State: StateHibernated,
		Network: "{}", IdleTTL: time.Minute, CreatedAt: now, LastUsedAt: now, DiskBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.st.ForNode("a").ReserveSessionSlot(ctx, "k1", id, "", 4); err != nil || !ok {
		t.Fatalf("reserving a slot: %v %v", ok, err)
	}
	if err := c.st.BindSessionSlot(ctx, "k1", id, id); err != nil {
		t.Fatal(err)
	}
	// A folder without its image (a copy that never finished).
	if err := os.MkdirAll(filepath.Join(c.homes, id), 0o700); err != nil {
		t.Fatal(err)
	}
	c.claim(t, "b", id)
	if err := b.Node().EndOrphan(ctx, id, "idle (owner node gone)"); err != nil {
		t.Fatal(err)
	}
	r, err := c.st.GetSession(ctx, id)
	if err != nil || r.State != StateEnded || r.EndReason != "sandbox lost" {
		t.Fatalf("row after EndOrphan: %+v %v", r, err)
	}
	if n, err := c.st.SessionSlots(ctx, "k1"); err != nil || n != 0 {
		t.Fatalf("slots after EndOrphan %d, %v", n, err)
	}
	if _, err := os.Stat(filepath.Join(c.homes, id)); !os.IsNotExist(err) {
		t.Fatalf("the home folder is left in homes_dir: %v", err)
	}
	if b.Node().Has(id) {
		t.Fatal("an ended orphan is held")
	}
}
