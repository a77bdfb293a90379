package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

// clusterLease is every test node's cluster.lease: short, so that a killed
// node's sessions come back within seconds (renewed every lease/3), and
// long enough that a node on a busy CI machine renews in time. At 3 s a
// node fences itself when a renewal is 1.25 s late; with 50 creates and
// the race-detector pass beside it on 2 CPUs, one was (a create answered
// 503 session_moved). A fence is right when a node cannot renew; the
// tests' subject is what follows a kill, not how late a starved renewal
// may be.
const clusterLease = 6 * time.Second

// cluster is N sandboxapi nodes of the real binary on one PostgreSQL
// database. Each node has its own data dir (and so its own runsc root,
// <data_dir>/runsc), port, installer and session networks (pool, prefix,
// nft table); every node shares one homes folder (executor.homes_dir), one
// mirror blob folder and one mirror service (`sandboxapi mirror serve`).
// Its methods take the calling test's t, so subtests and goroutines fail
// where they run.
type cluster struct {
	t        testing.TB
	nodes    []*server
	names    []string
	storeURL string
	homes    string
	secret   string
	// admin runs CLI commands (keys, mirror curation) against the shared
	// store and mirror folder; its process is the mirror service.
	admin      *server
	mirrorAddr string
	// oldLogs holds, per node, the logs of its earlier processes.
	oldLogs []string
	// egress names, per node, its session networks.
	egress []egressEnv
	// scheme is how the harness's client reaches the nodes (http or
	// https) and client is that client (see clusterOptions.roots).
	scheme string
	client *http.Client
}

// clusterOptions shapes the nodes; the zero value is 3 nodes, no warm pool.
type clusterOptions struct {
	nodes        int
	warmPool     int
	maxSandboxes int    // executor.max_sandboxes (0: 16)
	plans        string // api.plans_file content ("": the embedded plans)
	// ownHomes leaves executor.homes_dir unset: each node keeps its
	// homes in its own data dir, out of the others' reach.
	ownHomes bool
	// roots, when set, makes the nodes advertise https:// URLs and the
	// harness's client (try, call, stream, waitReady) speak HTTPS to
	// them, trusting these roots alone; the nodes serve TLS through the
	// tls: section nodeYAML gives them.
	roots *x509.CertPool
	// nodeYAML, when set, adds to the config of node i, which listens on
	// addr: clusterYAML at the end of its cluster: section (keys indented
	// by two spaces, each line ending in a newline), extra at the end of
	// the file (sections the harness does not write, such as tls:).
	nodeYAML func(i int, addr string) (clusterYAML, extra string)
}

// nodeLetters start the nft table and veth prefix of each node's
// installer and session networks: distinct per node, so a leftover names
// its node.
var nodeLetters = [][2]byte{{'i', 'p'}, {'j', 'q'}, {'k', 'r'}}

// startCluster starts the mirror service and o.nodes nodes, and stops them
// (SIGTERM, then whatever a node left is removed) when the test ends.
func startCluster(t testing.TB, o clusterOptions) *cluster {
	t.Helper()
	if o.nodes == 0 {
		o.nodes = 3
	}
	if o.maxSandboxes == 0 {
		o.maxSandboxes = 16
	}
	if o.nodes > len(nodeLetters) {
		t.Fatalf("at most %d nodes", len(nodeLetters))
	}
	dir := binaries(t) // fails under SANDBOXAPI_REQUIRE_RUNSC=1 without runsc
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	c := &cluster{t: t, storeURL: testenv.PostgresURL(t), homes: t.TempDir(), secret: hex.EncodeToString(secret),
		scheme: "http", client: http.DefaultClient}
	if o.roots != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: o.roots, MinVersion: tls.VersionTLS12}
		c.scheme, c.client = "https", &http.Client{Transport: tr}
		t.Cleanup(tr.CloseIdleConnections)
	}
	blobs := t.TempDir()
	plansFile := ""
	if o.plans != "" {
		plansFile = filepath.Join(t.TempDir(), "plans.yaml")
		if err := os.WriteFile(plansFile, []byte(o.plans), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The mirror service: one for every node, its blobs in a folder they
	// all read (the catalogue is in the shared store).
	c.admin = &server{t: t, bin: filepath.Join(dir, "sandboxapi"), dataDir: t.TempDir(), storeURL: c.storeURL}
	c.admin.config = filepath.Join(c.admin.dataDir, "config.yaml")
	adminCfg := fmt.Sprintf("version: v1\nlog_level: debug\nstore:\n  url: %s\nmirror:\n  store_dir: %s\n", c.storeURL, blobs)
	if err := os.WriteFile(c.admin.config, []byte(adminCfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c.mirrorAddr = freePort(t)
	c.startMirror()

	// Registered before the nodes: these run after their stops.
	t.Cleanup(func() { c.checkNoFence(t) })
	t.Cleanup(func() { c.dumpLogs(t) })
	for i := 0; i < o.nodes; i++ {
		name := fmt.Sprintf("node%d", i+1)
		// The networks first: their cleanups (table, netns, veths) run
		// after the node's stop, registered below.
		inst, eg := testenv.NewNet(t, nodeLetters[i][0]), testenv.NewNet(t, nodeLetters[i][1])
		addr := freePort(t)
		homes := "  homes_dir: " + c.homes + "\n"
		if o.ownHomes {
			homes = ""
		}
		var clusterYAML, extra string
		if o.nodeYAML != nil {
			clusterYAML, extra = o.nodeYAML(i, addr)
		}
		cfg := fmt.Sprintf(`server:
  drain_delay: 1s
  shutdown_grace: 30s
store:
  url: %s
cluster:
  node: %s
  advertise_url: %s://%s
  secret: %s
  lease: %s
%sexecutor:
  warm_pool: %d
  home_size: 64M
  max_sandboxes: %d
%smirror:
  store_dir: %s
  serve_url: http://%s
installer:
  pool: %s
  table: %s
  prefix: %s
egress:
  enabled: true
  resolvers: ["127.0.0.1:9"]
  idle_timeout: 60s
  network:
    pool: %s
    table: %s
    prefix: %s
readiness:
  interval: 1s
  timeout: 30s
  stale_after: 10s
  min_refresh: 0s
  topology_interval: 1h
`, c.storeURL, name, c.scheme, addr, c.secret, clusterLease, clusterYAML, o.warmPool, o.maxSandboxes, homes, blobs, c.mirrorAddr,
			inst.Pool, inst.Table, inst.Prefix, eg.Pool, eg.Table, eg.Prefix)
		if plansFile != "" {
			cfg += "api:\n  plans_file: " + plansFile + "\n"
		}
		cfg += extra
		s := startServerAt(t, addr, cfg)
		s.storeURL = c.storeURL
		sweepAfter(t, s) // stops it, then removes what it left
		c.nodes = append(c.nodes, s)
		c.names = append(c.names, name)
		c.oldLogs = append(c.oldLogs, "")
		c.egress = append(c.egress, egressEnv{pool: eg.Pool, table: eg.Table, prefix: eg.Prefix})
	}
	return c
}

// keepLogs keeps node i's logs so far; call it between its exit and its
// restart (which starts a new log).
func (c *cluster) keepLogs(i int) {
	c.oldLogs[i] += c.nodes[i].logs.String() + "---- restart ----\n"
}

// dumpLogs writes every node's whole log (earlier processes included) to
// $SANDBOXAPI_E2E_LOG_DIR, when set; a failed test shows only their tails.
func (c *cluster) dumpLogs(t testing.TB) {
	dir := os.Getenv("SANDBOXAPI_E2E_LOG_DIR")
	if dir == "" {
		return
	}
	for i, s := range c.nodes {
		p := filepath.Join(dir, fmt.Sprintf("%s-%s.log", strings.ReplaceAll(t.Name(), "/", "_"), c.names[i]))
		if err := os.WriteFile(p, []byte(c.oldLogs[i]+s.logs.String()), 0o644); err != nil {
			t.Logf("writing %s: %v", p, err)
			continue
		}
		t.Logf("%s's log: %s", c.names[i], p)
	}
}

// startMirror starts `sandboxapi mirror serve` on c.mirrorAddr and kills
// it (by its pid) when the test ends.
func (c *cluster) startMirror() {
	t := c.t
	var logs bytes.Buffer
	cmd := exec.Command(c.admin.bin, "mirror", "serve", "--listen", c.mirrorAddr, "--config", c.admin.config, "--data-dir", c.admin.dataDir)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r, err := http.Get("http://" + c.mirrorAddr + "/healthz"); err == nil {
			r.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("mirror service did not start:\n%s", logs.String())
		}
	}
}

// checkNoFence fails if a node's dead man's switch (`sandboxapi fence`,
// a process of the test's binary) outlived the nodes.
func (c *cluster) checkNoFence(t testing.TB) {
	dataDirs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		dataDirs[i] = s.dataDir
	}
	var left []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if left = fenceProcs(c.admin.bin, dataDirs); len(left) == 0 {
			return
		}
	}
	t.Errorf("fence processes outlived their nodes: %v", left)
}

// fenceProcs lists the processes of binary bin whose first argument is
// "fence" and whose lock (--lock, in its node's data dir) is in one of
// dataDirs: the fences of these nodes, not those of another test's
// cluster running beside them.
func fenceProcs(bin string, dataDirs []string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err != nil || exe != bin {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(b), "\x00")
		if err != nil || len(args) < 2 || args[1] != "fence" {
			continue
		}
		for i, a := range args {
			if a == "--lock" && i+1 < len(args) && slices.Contains(dataDirs, filepath.Dir(args[i+1])) {
				out = append(out, e.Name()+" "+strings.Join(args, " "))
				break
			}
		}
	}
	return out
}

// url is path on node i as the harness's client reaches it.
func (c *cluster) url(i int, path string) string { return c.scheme + "://" + c.nodes[i].addr + path }

// index returns the index of node name, or -1.
func (c *cluster) index(name string) int { return slices.Index(c.names, name) }

// other returns a node index other than every one of not, starting the
// search at from.
func (c *cluster) other(from int, not ...int) int {
	for k := 0; k < len(c.nodes); k++ {
		i := (from + k) % len(c.nodes)
		if !slices.Contains(not, i) {
			return i
		}
	}
	c.t.Fatalf("no node other than %v", not)
	return -1
}

// key creates an API key on plan in the shared store.
func (c *cluster) key(t testing.TB, plan string) string {
	t.Helper()
	a := *c.admin
	a.t = t
	return a.key(plan)
}

// openStore opens the cluster's store beside the nodes (to read nodes and
// owners as the nodes see them).
func (c *cluster) openStore(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.OpenURL(context.Background(), c.storeURL, "")
	if err != nil {
		t.Fatalf("opening the cluster's store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// request is one API call.
type request struct {
	method, path, key string
	body              any    // JSON-encoded unless []byte or io.Reader (sent chunked)
	accept            string // Accept header ("" for none)
	header            http.Header
}

// try sends r to node i as a client would and checks that the reply
// matches api/openapi.json and names a node of the cluster in
// X-Sandbox-Node. Safe for use from any goroutine: it never fails t.
func (c *cluster) try(i int, r request) (reply, error) {
	var rd io.Reader
	switch b := r.body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = io.NopCloser(b) // no length: chunked
	default:
		enc, _ := json.Marshal(b)
		rd = bytes.NewReader(enc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, r.method, c.url(i, r.path), rd)
	if r.key != "" {
		req.Header.Set("X-RapidAPI-Key", r.key)
	}
	switch r.body.(type) {
	case []byte, io.Reader: // file bodies
	default:
		req.Header.Set("Content-Type", "application/json")
	}
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s through %s: %w", r.method, r.path, c.names[i], err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	out := reply{status: resp.StatusCode, header: resp.Header, body: b}
	if err != nil {
		return out, fmt.Errorf("%s %s through %s: reading the reply: %w", r.method, r.path, c.names[i], err)
	}
	if err := checkOpenAPI(r.method, req.URL.Path, resp, b); err != nil {
		return out, fmt.Errorf("%s %s through %s: the reply does not match api/openapi.json: %w\n%s", r.method, r.path, c.names[i], err, b)
	}
	if n := resp.Header.Get("X-Sandbox-Node"); c.index(n) < 0 {
		return out, fmt.Errorf("%s %s through %s: X-Sandbox-Node %q is no node of the cluster (%d %s)", r.method, r.path, c.names[i], n, resp.StatusCode, b)
	}
	return out, nil
}

// call is try that fails t on a transport or contract error.
func (c *cluster) call(t testing.TB, i int, r request) reply {
	t.Helper()
	out, err := c.try(i, r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// servedBy is the node that served a reply.
func servedBy(r reply) string { return r.header.Get("X-Sandbox-Node") }

// create creates a session through node i and returns its id and the node
// that holds it.
func (c *cluster) create(t testing.TB, i int, key string, body map[string]any) (id, owner string) {
	t.Helper()
	r := c.call(t, i, request{method: "POST", path: "/v1/sessions", key: key, body: body})
	if r.status != http.StatusCreated {
		t.Fatalf("create through %s: %d %s", c.names[i], r.status, r.body)
	}
	return r.json(t)["id"].(string), servedBy(r)
}

// exec runs code in session id through node i; it wants 200 and returns
// the reply.
func (c *cluster) exec(t testing.TB, i int, key, id, code string) reply {
	t.Helper()
	r := c.call(t, i, request{method: "POST", path: "/v1/sessions/" + id + "/execute", key: key, body: map[string]any{"code": code}})
	if r.status != http.StatusOK {
		t.Fatalf("execute in %s through %s: %d %s", id, c.names[i], r.status, r.body)
	}
	return r
}

// waitReady waits until every node's /readyz answers 200.
func (c *cluster) waitReady(t testing.TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for i := range c.nodes {
		for {
			r, err := c.try(i, request{method: "GET", path: "/readyz"})
			if err == nil && r.status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready within %v: %v %d %s", c.names[i], within, err, r.status, r.body)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// mountWatch polls, every 50 ms, the loop devices and the mount table of
// the host for the cluster's home images: an image attached to two loop
// devices, or one session's home mounted at two places (two nodes), at
// any moment is a violation.
type mountWatch struct {
	homes string
	dirs  []string // the nodes' data dirs

	stop, done chan struct{}
	mu         sync.Mutex
	violations []string
	polls      int
	// seen holds, per session id, the data dirs its home was seen
	// mounted under (at different times).
	seen map[string]map[string]bool
}

// homeMountPoint is a node's mount point of a session's home.
var homeMountPoint = regexp.MustCompile(`^(.+)/sessions/([^/]+)/home$`)

func (c *cluster) watchMounts(t testing.TB) *mountWatch {
	w := &mountWatch{homes: c.homes, stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]map[string]bool{}}
	for _, s := range c.nodes {
		w.dirs = append(w.dirs, s.dataDir)
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			w.poll()
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *mountWatch) poll() {
	now := time.Now().Format("15:04:05.000")
	var bad []string
	attached := map[string][]string{} // image → loop devices
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		img := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if strings.HasPrefix(img, w.homes+"/") {
			dev := filepath.Base(filepath.Dir(filepath.Dir(f)))
			attached[img] = append(attached[img], dev)
		}
	}
	for img, devs := range attached {
		if len(devs) > 1 {
			bad = append(bad, fmt.Sprintf("%s: %s attached to %v", now, img, devs))
		}
	}
	mounts := map[string][]string{} // session id → mount points
	mi, _ := readMountinfo()
	for _, l := range mi {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		m := homeMountPoint.FindStringSubmatch(f[4])
		if m == nil {
			continue
		}
		for _, d := range append([]string{w.homes}, w.dirs...) {
			if m[1] == d || strings.HasPrefix(m[1], d+"/") {
				mounts[m[2]] = append(mounts[m[2]], f[4])
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	for id, pts := range mounts {
		if len(pts) > 1 {
			bad = append(bad, fmt.Sprintf("%s: home of %s mounted %d times: %v", now, id, len(pts), pts))
		}
		if w.seen[id] == nil {
			w.seen[id] = map[string]bool{}
		}
		for _, p := range pts {
			w.seen[id][strings.TrimSuffix(p, "/sessions/"+id+"/home")] = true
		}
	}
	w.violations = append(w.violations, bad...)
}

// halt stops the watcher (idempotent).
func (w *mountWatch) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// check stops the watcher and fails t on every violation it saw.
func (w *mountWatch) check(t testing.TB) {
	t.Helper()
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.polls < 10 {
		t.Errorf("the mount watcher polled only %d times", w.polls)
	}
	for i, v := range w.violations {
		if i == 20 {
			t.Errorf("... and %d more", len(w.violations)-20)
			break
		}
		t.Errorf("home image used twice: %s", v)
	}
	t.Logf("mount watcher: %d polls, %d violations", w.polls, len(w.violations))
}

// mountedUnder reports the data dirs session id's home was seen mounted
// under.
func (w *mountWatch) mountedUnder(id string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for d := range w.seen[id] {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// readMountinfo returns the lines of the host's mount table (the test
// runs in the nodes' mount namespace).
func readMountinfo() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	return strings.Split(string(b), "\n"), err
}
