package executor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

// realNetwork is a Network over egress.Network: per session a netns, a
// veth pair, an nft chain and a /30 of the pool (no proxy listeners, which
// these tests do not dial). detachPanics makes Detach panic after it has
// torn down, as a broken network layer's would.
type realNetwork struct {
	n            *egress.Network
	detachPanics bool
	mu           sync.Mutex
	updates      map[string][]sandbox.NetworkRequest // by Update, per session
	updateErr    error                               // what Update returns
}

func (r *realNetwork) Attach(ctx context.Context, id string, _ sandbox.NetworkRequest) (*Attachment, error) {
	att, err := r.n.Setup(ctx, id)
	if err != nil {
		return nil, err
	}
	return &Attachment{NetnsPath: att.NetnsPath, ResolvConf: att.ResolvConf()}, nil
}

func (r *realNetwork) Detach(ctx context.Context, id string) error {
	err := r.n.Teardown(ctx, id)
	if r.detachPanics {
		panic("detach panics after teardown")
	}
	return err
}

// Update records the session's new request (no proxy here to hold it).
func (r *realNetwork) Update(ctx context.Context, id string, n sandbox.NetworkRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.updates == nil {
		r.updates = map[string][]sandbox.NetworkRequest{}
	}
	r.updates[id] = append(r.updates[id], n)
	return r.updateErr
}

func (r *realNetwork) Reconcile(ctx context.Context, live []string) error {
	return r.n.Reconcile(ctx, live)
}

// faultEnv is a real executor with a real sandbox network and the names
// needed to look for leftovers.
type faultEnv struct {
	e   *Executor
	cfg Config
	st  *store.Store
	net *realNetwork
	tn  testenv.Net
}

// startFaultExecutor starts an executor on a fresh data dir with a real
// network layer installed before Start (so Start reconciles it).
func startFaultExecutor(t *testing.T) *faultEnv {
	t.Helper()
	cfg := testConfig(t, t.TempDir())
	cfg.MaxSandboxes = 3 // a leaked slot shows within a few creates
	cfg.WarmPool = 1     // sessions without network come from the pool
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "network faults need %s: %v", tool, err)
		}
	}
	tn := testenv.NewNet(t, 'f')
	ecfg := egress.DefaultConfig()
	ecfg.Resolvers = []string{"127.0.0.1:53"}
	ecfg.Network.Pool, ecfg.Network.Table, ecfg.Network.Prefix = tn.Pool, tn.Table, tn.Prefix
	nw, err := egress.NewNetwork(ecfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(cfg.DataDir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := LoadRuntimes(configs.Runtimes, cfg.VersionsFile)
	if err != nil {
		t.Fatal(err)
	}
	rn := &realNetwork{n: nw}
	e, err := New(cfg, rt, st, quietLog(), WithNetwork(rn))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.createFault = nil
		rn.detachPanics = false
		if err := e.Stop(context.Background()); err != nil {
			t.Errorf("stopping executor: %v", err)
		}
		st.Close()
	})
	return &faultEnv{e: e, cfg: cfg, st: st, net: rn, tn: tn}
}

// leftovers lists everything of sandbox id still on the host or in the
// executor: its runsc container, home folder, mount, loop device, cgroups,
// agent channel, netns, veth, nft chain, address slot and a store row left
// creating; and the executor's capacity and session counts. id "" checks
// only the counts and the network names of the test's prefix.
func (f *faultEnv) leftovers(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	ctx := context.Background()
	f.e.mu.Lock()
	live, sessions := f.e.live, len(f.e.sessions)
	f.e.mu.Unlock()
	if live != 0 {
		out = append(out, "capacity slots taken: "+strconv.Itoa(live))
	}
	if sessions != 0 || f.e.CountSessions("k1") != 0 {
		out = append(out, "plan slot: the executor lists a session")
	}
	if id != "" {
		cs, err := f.e.runsc.List(ctx)
		if err != nil {
			t.Fatalf("runsc list: %v", err)
		}
		for _, c := range cs {
			if c.ID == id {
				out = append(out, "sandbox "+id+" ("+string(c.Status)+")")
			}
		}
		dir := f.e.boxes.dir(id)
		if host.Mounted(host.HomeMount(dir)) {
			out = append(out, "mount "+host.HomeMount(dir))
		}
		if _, err := os.Stat(dir); err == nil {
			out = append(out, "folder "+dir)
		}
		loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, p := range loops {
			if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), dir+"/") {
				out = append(out, "loop device "+p)
			}
		}
		for _, cg := range host.CgroupDirs() {
			if filepath.Base(cg) == id {
				out = append(out, "cgroup "+cg)
			}
		}
		if f.e.agents.Has(id) {
			out = append(out, "agent channel")
		}
		if _, ok := f.net.n.Attachment(id); ok {
			out = append(out, "network address slot")
		}
		row, err := f.st.GetSession(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			t.Fatalf("reading row: %v", err)
		case row.State == StateCreating || row.State == StateRunning:
			out = append(out, "store row "+string(row.State))
		}
	}
	if ents, err := os.ReadDir("/var/run/netns"); err == nil {
		for _, ent := range ents {
			if strings.HasPrefix(ent.Name(), f.tn.Prefix+"-") {
				out = append(out, "netns "+ent.Name())
			}
		}
	}
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, ent := range ents {
			if strings.HasPrefix(ent.Name(), f.tn.Prefix+"h") {
				out = append(out, "veth "+ent.Name())
			}
		}
	}
	if b, err := exec.Command("nft", "list", "table", "inet", f.tn.Table).CombinedOutput(); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if l := strings.TrimSpace(line); strings.HasPrefix(l, "chain s_") {
				out = append(out, "nft "+l)
			}
		}
	}
	return out
}

// fdCount is how many files this process has open.
func fdCount() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

func fdList() string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var b strings.Builder
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		b.WriteString(e.Name() + " " + l + "\n")
	}
	return b.String()
}

var errInjected = errors.New("injected fault")

// TestCreateSessionFaultAtEveryStep injects a failure (an error, then a
// panic) after each step of session creation, for a session with network
// (always made cold: home, bundle, runsc run) and one without (made from a
// warm sandbox), and checks that each gives back all it took: sandbox,
// mount, loop device, cgroups, agent channel, netns, veth, nft chain,
// address slot, capacity slot, plan slot, open files, and that no store
// row is left creating. Then a cleanup that panics (the network layer's
// Detach) still gives back the rest, and sessions can be made up to the
// ceiling afterwards.
//
// It counts this process's open files, which tests running beside it
// change: it runs in a process of its own (inOwnProcess), in parallel
// with the other tests.
func TestCreateSessionFaultAtEveryStep(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	f := startFaultExecutor(t)
	ctx := context.Background()
	netSteps := []createStep{stepCapacity, stepHome, stepStoreInsert, stepNetwork, stepNetworkRecord, stepBundle, stepRunsc, stepStoreRunning}
	warmSteps := []createStep{stepCapacity, stepHome, stepStoreInsert, stepStoreRunning}
	type tc struct {
		name    string
		step    createStep
		panics  bool
		network bool
	}
	var cases []tc
	for _, panics := range []bool{false, true} {
		mode := "error"
		if panics {
			mode = "panic"
		}
		for _, s := range netSteps {
			cases = append(cases, tc{name: "network/" + string(s) + "/" + mode, step: s, panics: panics, network: true})
		}
		for _, s := range warmSteps {
			cases = append(cases, tc{name: "warm/" + string(s) + "/" + mode, step: s, panics: panics})
		}
	}
	// waitSettled waits until the warm pool is full (its filler waits for
	// a slot): from then on the pool opens and closes no files until a
	// sandbox is taken, so the open-file counts before and after a case
	// are taken in the same state.
	waitSettled := func(t *testing.T) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !f.e.Pool().settled(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the warm pool did not refill: %d ready", f.e.Pool().Ready())
			}
		}
	}
	// fdsAtMost waits until the open-file count is at most want: the warm
	// pool's filler holds files for a moment while it makes the next
	// sandbox.
	fdsAtMost := func(t *testing.T, want int) {
		t.Helper()
		got := 0
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) { // long: background teardowns on a loaded machine
			waitSettled(t)
			if got = fdCount(); got <= want {
				return
			}
		}
		t.Errorf("open files: %d, before the create %d\n%s", got, want, fdList())
	}
	// One session made and deleted first, so that files the executor
	// opens once (store connections, runsc's netns mount) are open
	// before the counting starts.
	for _, spec := range []SessionSpec{{Language: "bash", Owner: "k1", Network: sandbox.NetworkRequest{Enabled: true}}, {Language: "bash", Owner: "k1"}} {
		s, err := f.e.CreateSession(ctx, spec)
		if err != nil {
			t.Fatalf("warm-up session: %v", err)
		}
		run(t, f.e, s.ID, "true", 0)
		if err := f.e.DeleteSession(ctx, "k1", s.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The baseline is taken with the pool full, so a refill's
			// agent pipes are not counted as a leak later.
			waitSettled(t)
			fds := fdCount()
			before := fdList()
			defer func() {
				if t.Failed() {
					t.Logf("before:\n%s", before)
				}
			}()
			var id string
			var reached []createStep
			f.e.createFault = func(step createStep, sid string) error {
				reached = append(reached, step)
				if sid != "" {
					id = sid
				}
				if step != c.step {
					return nil
				}
				if c.panics {
					panic("injected panic at " + string(step))
				}
				return errInjected
			}
			defer func() { f.e.createFault = nil }()
			spec := SessionSpec{Language: "bash", Owner: "k1"}
			if c.network {
				spec.Network = sandbox.NetworkRequest{Enabled: true}
			}
			_, err := f.e.CreateSession(ctx, spec)
			var perr *PanicError
			switch {
			case c.panics && !errors.As(err, &perr):
				t.Fatalf("create: %v, want a *PanicError", err)
			case !c.panics && !errors.Is(err, errInjected):
				t.Fatalf("create: %v, want the injected fault", err)
			}
			if reached[len(reached)-1] != c.step {
				t.Fatalf("steps reached %v, want to stop at %s", reached, c.step)
			}
			if c.step != stepCapacity && id == "" {
				t.Fatal("the fault hook never saw the sandbox id")
			}
			if left := f.leftovers(t, id); len(left) > 0 {
				t.Fatalf("left after a fault at %s:\n%s", c.step, strings.Join(left, "\n"))
			}
			if id != "" {
				row, err := f.st.GetSession(ctx, id)
				before := c.step == stepHome || c.step == stepCapacity
				switch {
				case before && !errors.Is(err, store.ErrNotFound):
					t.Fatalf("a row exists for a create that failed before its insert: %+v %v", row, err)
				case !before && (err != nil || row.State != StateFailed || row.EndedAt.IsZero()):
					t.Fatalf("row %+v (%v), want failed and ended", row, err)
				}
			}
			fdsAtMost(t, fds)
		})
	}

	t.Run("undo that panics", func(t *testing.T) {
		f.net.detachPanics = true
		defer func() { f.net.detachPanics = false }()
		var id string
		f.e.createFault = func(step createStep, sid string) error {
			if sid != "" {
				id = sid
			}
			if step == stepRunsc {
				return errInjected
			}
			return nil
		}
		defer func() { f.e.createFault = nil }()
		_, err := f.e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1", Network: sandbox.NetworkRequest{Enabled: true}})
		if !errors.Is(err, errInjected) {
			t.Fatalf("create: %v, want the injected fault", err)
		}
		if left := f.leftovers(t, id); len(left) > 0 {
			t.Fatalf("left after a panicking undo:\n%s", strings.Join(left, "\n"))
		}
	})

	// Nothing leaked: sessions up to the ceiling (3, one with network)
	// come up and work, then go without a trace.
	t.Run("afterwards", func(t *testing.T) {
		var ids []string
		for i := range f.cfg.MaxSandboxes {
			spec := SessionSpec{Language: "bash", Owner: "k1"}
			if i == 0 {
				spec.Network = sandbox.NetworkRequest{Enabled: true}
			}
			s, err := f.e.CreateSession(ctx, spec)
			if err != nil {
				t.Fatalf("session %d after the faults: %v", i+1, err)
			}
			ids = append(ids, s.ID)
			if r := run(t, f.e, s.ID, "echo ok", 0); r.Stdout != "ok\n" {
				t.Fatalf("session %d: %+v", i+1, r)
			}
		}
		if _, err := f.e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"}); !errors.Is(err, ErrCapacity) {
			t.Fatalf("over the ceiling: %v, want ErrCapacity", err)
		}
		for _, id := range ids {
			if err := f.e.DeleteSession(ctx, "k1", id); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range ids {
			if left := f.leftovers(t, id); len(left) > 0 {
				t.Fatalf("left after delete:\n%s", strings.Join(left, "\n"))
			}
		}
	})
}

// TestCreateSessionNetworkWithoutEgress is issue 13 item 1 in the
// executor: with no network layer (egress off), a session with network is
// ErrNoNetwork every time and takes nothing, and sessions without network
// and stateless calls still work up to the ceiling.
func TestCreateSessionNetworkWithoutEgress(t *testing.T) {
	t.Parallel()
	e, cfg := startExecutor(t, func(c *Config) { c.MaxSandboxes = 2 })
	ctx := context.Background()
	for i := range 16 {
		_, err := e.CreateSession(ctx, SessionSpec{Language: "python3", Owner: "k1", Network: sandbox.NetworkRequest{Enabled: true}})
		if !errors.Is(err, ErrNoNetwork) {
			t.Fatalf("create %d: %v, want ErrNoNetwork", i+1, err)
		}
	}
	e.mu.Lock()
	live := e.live
	e.mu.Unlock()
	if live != 0 {
		t.Fatalf("%d capacity slots taken", live)
	}
	rows, err := e.store.SessionsInStates(ctx, StateCreating)
	if err != nil || len(rows) != 0 {
		t.Fatalf("rows left creating: %+v %v", rows, err)
	}
	if ents, _ := os.ReadDir(e.boxes.sessionsDir()); len(ents) > cfg.WarmPool {
		t.Fatalf("%d homes under %s, the warm pool holds %d", len(ents), e.boxes.sessionsDir(), cfg.WarmPool)
	}
	res, err := e.ExecuteStateless(ctx, "k2", ExecRequest{Language: "bash", Code: "echo ok"})
	if err != nil || res.Stdout != "ok\n" {
		t.Fatalf("stateless after the refusals: %+v %v", res, err)
	}
	// The stateless sandbox gives its slot back off the reply's path.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		e.mu.Lock()
		live = e.live
		e.mu.Unlock()
		if live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d capacity slots still taken after the stateless call", live)
		}
	}
	for range cfg.MaxSandboxes {
		mustSession(t, e, "bash")
	}
}

// TestStatelessFaultGivesTheSlotBack: a stateless call that fails or
// panics after taking its capacity slot, before it has a sandbox, gives the
// slot back; more such calls than the ceiling leave later calls working.
func TestStatelessFaultGivesTheSlotBack(t *testing.T) {
	t.Parallel()
	e, cfg := startExecutor(t, func(c *Config) { c.MaxSandboxes = 2 })
	ctx := context.Background()
	for _, panics := range []bool{false, true} {
		e.createFault = func(step createStep, _ string) error {
			if step != stepStatelessSandbox {
				return nil
			}
			if panics {
				panic("injected at " + string(step))
			}
			return errors.New("injected at " + string(step))
		}
		for i := range cfg.MaxSandboxes + 2 {
			func() {
				defer func() { _ = recover() }()
				if _, err := e.ExecuteStateless(ctx, "k1", ExecRequest{Language: "bash", Code: "echo no"}); err == nil {
					t.Errorf("call %d (panics %v): no error", i, panics)
				}
			}()
		}
		e.mu.Lock()
		live := e.live
		e.mu.Unlock()
		if live != 0 {
			t.Fatalf("panics %v: %d capacity slots taken after failed stateless calls", panics, live)
		}
	}
	e.createFault = nil
	res, err := e.ExecuteStateless(ctx, "k2", ExecRequest{Language: "bash", Code: "echo ok"})
	if err != nil || res.Stdout != "ok\n" {
		t.Fatalf("stateless after the faults: %+v %v", res, err)
	}
}
