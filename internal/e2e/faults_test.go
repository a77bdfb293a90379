package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

// leftovers lists what a server's data dir still holds on the host: runsc
// processes, mounts under it and sandboxapi cgroups of the given sessions.
func (s *server) leftovers(ids ...string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		cmd, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), s.dataDir) && strings.HasPrefix(string(cmd), "runsc") {
			out = append(out, "process "+ent.Name()+" "+strings.ReplaceAll(string(cmd), "\x00", " ")[:40])
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		// runsc's shared nsfs mount for --network=none lives until the
		// root is removed; it is not per session.
		if strings.Contains(l, s.dataDir) && !strings.Contains(l, "null-netns") {
			out = append(out, "mount "+l)
		}
	}
	for _, id := range ids {
		for _, pat := range []string{"/sys/fs/cgroup/*/sandboxapi/" + id, "/sys/fs/cgroup/sandboxapi/" + id} {
			m, _ := filepath.Glob(pat)
			for _, p := range m {
				out = append(out, "cgroup "+p)
			}
		}
	}
	return out
}

// waitNoLeftovers waits a little for teardown to finish, then fails on
// whatever is left.
func (s *server) waitNoLeftovers(t *testing.T, ids ...string) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if left = s.leftovers(ids...); len(left) == 0 {
			return
		}
	}
	t.Errorf("left on the host:\n%s", strings.Join(left, "\n"))
}

// executions reads every execution of a session from the store, opened
// beside the server (SQLite WAL allows a second reader; PostgreSQL many).
func (s *server) executions(t *testing.T, sessionID string) map[string][2]string {
	t.Helper()
	ctx := context.Background()
	st, err := store.OpenURL(ctx, s.storeURL, filepath.Join(s.dataDir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.DB().QueryContext(ctx, `SELECT id FROM executions WHERE session_id=?`, sessionID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	out := map[string][2]string{}
	for _, id := range ids {
		state, status, err := st.ExecutionState(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = [2]string{state, status}
	}
	return out
}

// TestFaultKillDuringExecution: the server dies with SIGKILL while an
// execution runs. After a restart the execution is recorded failed, never
// succeeded, the session still works, and a graceful stop leaves nothing.
func TestFaultKillDuringExecution(t *testing.T) {
	s := startServer(t, "executor:\n  warm_pool: 0\n  home_size: 64M\n")
	key := s.key("ULTRA")
	id := s.session(key, "bash")
	if r := s.exec(key, id, "echo ok"); r["stdout"] != "ok\n" {
		t.Fatalf("first execution: %v", r)
	}

	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", s.url("/v1/sessions/"+id+"/execute"), strings.NewReader(`{"code":"sleep 20; echo finished","timeout":30}`))
		req.Header.Set("X-API-Key", key)
		resp, err := s.client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	// Wait until the store holds the running execution, then crash.
	var running string
	for deadline := time.Now().Add(15 * time.Second); running == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for eid, st := range s.executions(t, id) {
			if st[0] == "running" {
				running = eid
			}
		}
	}
	if running == "" {
		t.Fatal("the execution never showed as running")
	}
	s.kill()
	if err := <-done; err == nil {
		t.Fatal("the interrupted request got a reply from a killed server")
	}

	s.start()
	ex := s.executions(t, id)
	if st := ex[running]; st[0] != "failed" {
		t.Errorf("interrupted execution %s recorded as %v, want failed", running, st)
	}
	ok := 0
	for _, st := range ex {
		if st[0] == "running" {
			t.Errorf("an execution is still running after restart: %v", ex)
		}
		if st[1] == "ok" {
			ok++
		}
	}
	if ok != 1 {
		t.Errorf("%d executions recorded ok, want exactly the first: %v", ok, ex)
	}
	// The adopted session works and no earlier process survives in it.
	r := s.exec(key, id, `for p in /proc/[0-9]*; do tr '\0' ' ' <$p/cmdline; echo; done | grep -c '[s]leep 20'`)
	if r["status"] != "ok" && r["status"] != "error" {
		t.Fatalf("after restart: %v", r)
	}
	if strings.TrimSpace(r["stdout"].(string)) != "0" {
		t.Errorf("the interrupted program still runs in the adopted session: %q", r["stdout"])
	}
	if rr := s.do("DELETE", "/v1/sessions/"+id, key, nil); rr.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", rr.status, rr.body)
	}
	s.stop()
	s.waitNoLeftovers(t, id)
}

// TestFaultKillDuringCreation: the server dies while sessions are being
// created. After a restart each session is either listed and usable or
// gone, and a graceful stop leaves no sandbox, mount or cgroup behind.
func TestFaultKillDuringCreation(t *testing.T) {
	s := startServer(t, "executor:\n  warm_pool: 0\n  home_size: 64M\n")
	key := s.key("MEGA")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created []string // sessions whose 201 reached the client
		broken  int      // calls cut off by the crash
	)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", s.url("/v1/sessions"), strings.NewReader(`{"language":"python3"}`))
			req.Header.Set("X-API-Key", key)
			resp, err := s.client().Do(req)
			if err != nil {
				mu.Lock()
				broken++
				mu.Unlock()
				return
			}
			defer resp.Body.Close()
			var body struct{ ID string }
			if resp.StatusCode == http.StatusCreated && json.NewDecoder(resp.Body).Decode(&body) == nil {
				mu.Lock()
				created = append(created, body.ID)
				mu.Unlock()
			}
		}()
	}
	// Kill as soon as the first session's folder exists: that creation (and
	// likely the others) is then under way, runsc not yet done with it.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(s.dataDir, "sessions", "sess_*")); len(m) > 0 {
			break
		}
	}
	s.kill()
	wg.Wait()
	if broken == 0 {
		t.Fatalf("no creation was cut off by the kill (%d answered 201): the test did not kill mid-creation", len(created))
	}
	// Whatever runsc left, remember its session ids for the cgroup check.
	var ids []string
	m, _ := filepath.Glob(filepath.Join(s.dataDir, "sessions", "*"))
	for _, p := range m {
		ids = append(ids, filepath.Base(p))
	}

	s.start()
	r := s.do("GET", "/v1/sessions", key, nil)
	if r.status != http.StatusOK {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var listed []string
	for _, it := range listSessions(t, r) {
		listed = append(listed, it)
		res := s.exec(key, it, "print('alive')")
		if res["stdout"] != "alive\n" {
			t.Errorf("listed session %s does not work: %v", it, res)
		}
		if rr := s.do("DELETE", "/v1/sessions/"+it, key, nil); rr.status != http.StatusNoContent {
			t.Errorf("delete %s: %d %s", it, rr.status, rr.body)
		}
	}
	t.Logf("%d sessions answered 201 before the crash, %d on disk at the crash, %d listed after restart", len(created), len(ids), len(listed))
	// A session the client was told exists must survive the crash.
	for _, id := range created {
		found := false
		for _, l := range listed {
			found = found || l == id
		}
		if !found {
			t.Errorf("session %s was created (201) before the crash but is gone after restart", id)
		}
	}
	// A new session works: the plan's slots were not leaked by the crash.
	for i := 0; i < 3; i++ {
		id := s.session(key, "python3")
		ids = append(ids, id)
		if res := s.exec(key, id, "print('new')"); res["stdout"] != "new\n" {
			t.Errorf("new session after the crash: %v", res)
		}
		if rr := s.do("DELETE", "/v1/sessions/"+id, key, nil); rr.status != http.StatusNoContent {
			t.Errorf("delete %s: %d %s", id, rr.status, rr.body)
		}
	}
	s.stop()
	s.waitNoLeftovers(t, ids...)
}

func listSessions(t *testing.T, r reply) []string {
	t.Helper()
	m := r.json(t)
	var items []any
	switch v := m["sessions"].(type) {
	case []any:
		items = v
	default:
		if d, ok := m["data"].([]any); ok {
			items = d
		}
	}
	var out []string
	for _, it := range items {
		if o, ok := it.(map[string]any); ok {
			if st, _ := o["state"].(string); st == "" || st == "running" {
				out = append(out, o["id"].(string))
			}
		}
	}
	return out
}

// sandboxPID finds the runsc-sandbox process of a session.
func sandboxPID(t *testing.T, dataDir, id string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		cmd, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil {
			continue
		}
		c := string(cmd)
		if strings.HasPrefix(c, "runsc-sandbox\x00") && strings.Contains(c, dataDir) && strings.Contains(c, id) {
			var pid int
			for _, ch := range ent.Name() {
				pid = pid*10 + int(ch-'0')
			}
			return pid
		}
	}
	t.Fatalf("no runsc-sandbox process for %s", id)
	return 0
}

// TestFaultSandboxKilledFromOutside: one session's runsc-sandbox dies
// (SIGKILL from outside). That session answers 410 sandbox_lost and is
// marked gone; the other session is unaffected.
func TestFaultSandboxKilledFromOutside(t *testing.T) {
	s := startServer(t, "executor:\n  warm_pool: 0\n  home_size: 64M\n")
	key := s.key("ULTRA")
	victim := s.session(key, "bash")
	other := s.session(key, "bash")
	s.exec(key, victim, "echo x > /home/sandbox/f")
	s.exec(key, other, "echo keep > /home/sandbox/f")

	pid := sandboxPID(t, s.dataDir, victim)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// SIGKILL of a many-threaded process takes a moment; the very next
	// call must still get a clear answer, so the test does not wait.
	r := s.do("POST", "/v1/sessions/"+victim+"/execute", key, map[string]any{"code": "cat /home/sandbox/f"})
	if r.status != http.StatusGone || r.errCode(t) != "sandbox_lost" {
		t.Errorf("execute in the killed sandbox: %d %s", r.status, r.body)
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			t.Logf("killed sandbox process: %s", st)
		}
		t.Logf("server log:\n%s", s.logs)
	}
	// The session is marked gone: later calls do not pretend it lives.
	var last reply
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		last = s.do("GET", "/v1/sessions/"+victim, key, nil)
		if last.status == http.StatusNotFound || last.status == http.StatusGone {
			break
		}
		if st, _ := last.json(t)["state"].(string); st == "failed" || st == "ended" {
			break
		}
	}
	if last.status == http.StatusOK {
		if st, _ := last.json(t)["state"].(string); st != "failed" && st != "ended" {
			t.Errorf("killed session still shows as %q", st)
		}
	}
	r = s.do("POST", "/v1/sessions/"+victim+"/execute", key, map[string]any{"code": "echo again"})
	if r.status == http.StatusOK {
		t.Errorf("the dead session executed code: %s", r.body)
	}
	if res := s.exec(key, other, "cat /home/sandbox/f"); res["stdout"] != "keep\n" {
		t.Errorf("the other session was affected: %v", res)
	}
	// Its slot is free again: a new session can be made and used.
	n := s.session(key, "bash")
	if res := s.exec(key, n, "echo new"); res["stdout"] != "new\n" {
		t.Errorf("new session after the loss: %v", res)
	}
	s.do("DELETE", "/v1/sessions/"+other, key, nil)
	s.do("DELETE", "/v1/sessions/"+n, key, nil)
	s.stop()
	s.waitNoLeftovers(t, victim, other, n)
}

// TestFaultRunscMissing: serve refuses to start without runsc and says why.
func TestFaultRunscMissing(t *testing.T) {
	bin := filepath.Join(binaries(t), "sandboxapi")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	// Its own installer names: with the defaults, a server already on
	// the host (a deployment, or one an operator is trying out) is named
	// as in the way before runsc is looked for.
	n := testenv.NewNet(t, 'r')
	conf := fmt.Sprintf("version: v1\nexecutor:\n  runsc: /nonexistent/runsc\ninstaller:\n  pool: %s\n  table: %s\n  prefix: %s\n", n.Pool, n.Table, n.Prefix)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", cfg, "--data-dir", dir, "--listen", freePort(t))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("serve started without runsc:\n%s", out)
	}
	if ctx.Err() != nil {
		t.Fatalf("serve hung without runsc:\n%s", out)
	}
	if !strings.Contains(string(out), "runsc not found") || !strings.Contains(string(out), "/nonexistent/runsc") {
		t.Errorf("unclear message:\n%s", out)
	}
}

// TestFaultKillDuringInstall: the server dies with SIGKILL while an
// install runs. After a restart the package is either wholly there or not
// at all, a new install works, and after a graceful stop no sandbox,
// mount, cgroup or installer network is left.
func TestFaultKillDuringInstall(t *testing.T) {
	s, _, prefix := installServer(t, "executor:\n  warm_pool: 0\n  home_size: 64M\n")
	dir := t.TempDir()
	s.importOSV()
	s.cliArgs([]string{"mirror", "add"}, writeWheel(t, dir, "alpha-pkg", "1.2.0"))
	key := s.key("PRO")
	id := s.session(key, "python3")
	s.waitReadyz(200, 90*time.Second)

	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequest("POST", s.url("/v1/sessions/"+id+"/install"), strings.NewReader(`{"manager":"pip","packages":["alpha-pkg==1.2.0"]}`))
		req.Header.Set("X-API-Key", key)
		if resp, err := s.client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	// Kill once the installer sandbox exists (a second runsc-sandbox).
	seen := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n := 0
		for _, l := range s.leftovers() {
			if strings.Contains(l, "runsc-sandbox") {
				n++
			}
		}
		if n >= 2 {
			seen = true
			break
		}
	}
	s.kill()
	<-done
	var crashedJobs []string
	if ents, err := os.ReadDir(filepath.Join(s.dataDir, "jobs")); err == nil {
		for _, e := range ents {
			crashedJobs = append(crashedJobs, e.Name())
		}
	}
	if len(crashedJobs) == 0 {
		t.Errorf("no install job folder at the crash")
	}
	if !seen {
		t.Errorf("the installer sandbox never appeared: the kill did not hit an install")
	}

	s.start()
	res := s.exec(key, id, "try:\n    import alpha_pkg; print('present', alpha_pkg.VERSION)\nexcept ModuleNotFoundError:\n    print('absent')")
	out, _ := res["stdout"].(string)
	if out != "absent\n" && out != "present 1.2.0\n" {
		t.Errorf("half-installed package after the crash: %v", res)
	}
	t.Logf("after the crash the package is %s", strings.TrimSpace(out))
	// The crashed jobs' bundles went with their sandboxes at the restart.
	for _, name := range crashedJobs {
		if _, err := os.Stat(filepath.Join(s.dataDir, "jobs", name)); err == nil {
			t.Errorf("install job folder %s left after the restart", name)
		}
	}
	// Right after a start the install gate is closed until readiness
	// has run (fail closed): wait for it.
	s.waitReadyz(200, 90*time.Second)
	if r := s.install(key, id, "pip", "alpha-pkg==1.2.0"); r.status != http.StatusOK {
		t.Fatalf("install after restart: %d %s", r.status, r.body)
	}
	if res := s.exec(key, id, "import alpha_pkg; print(alpha_pkg.VERSION)"); res["stdout"] != "1.2.0\n" {
		t.Errorf("import after the second install: %v", res)
	}
	if rr := s.do("DELETE", "/v1/sessions/"+id, key, nil); rr.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", rr.status, rr.body)
	}
	s.stop()
	s.waitNoLeftovers(t, id)
	if ents, err := os.ReadDir("/var/run/netns"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix+"-") {
				t.Errorf("installer netns %s left after stop", e.Name())
			}
		}
	}
}

// TestFaultMirrorServiceStopped runs the mirror as a service of its own
// (`sandboxapi mirror serve`, serve pointed at it by mirror.serve_url) and
// kills it with SIGKILL during use: the mirror's routes answer 502
// mirror_unavailable, readiness turns red on the mirror check within
// seconds and the install gate closes (503 not_ready, nothing installed);
// with the service back, readiness recovers and installs work again.
func TestFaultMirrorServiceStopped(t *testing.T) {
	mport := freePort(t)
	s, _, _ := installServer(t, "mirror:\n  serve_url: http://"+mport+"\n")
	var logs bytes.Buffer
	startMirror := func() *exec.Cmd {
		cmd := exec.Command(s.bin, "mirror", "serve", "--listen", mport, "--config", s.config, "--data-dir", s.dataDir)
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		deadline := time.Now().Add(30 * time.Second)
		for {
			if r, err := http.Get("http://" + mport + "/healthz"); err == nil {
				r.Body.Close()
				return cmd
			}
			if time.Now().After(deadline) {
				t.Fatalf("mirror service did not start:\n%s", logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	mirrorProc := startMirror()
	dir := t.TempDir()
	s.importOSV()
	s.cliArgs([]string{"mirror", "add"}, writeWheel(t, dir, "alpha-pkg", "1.0.0"))
	s.cliArgs([]string{"mirror", "add"}, writeWheel(t, dir, "beta", "0.1"))
	key := s.key("PRO")
	id := s.session(key, "python3")
	s.waitReadyz(200, 90*time.Second)
	if r := s.install(key, id, "pip", "alpha-pkg"); r.status != http.StatusOK {
		t.Fatalf("install through the mirror service: %d %s", r.status, r.body)
	}
	// Through serve's own /mirror/ route too.
	if r := s.do("GET", "/mirror/pypi/simple/beta/", "", nil); r.status != http.StatusOK || !strings.Contains(string(r.body), "beta-0.1") {
		t.Fatalf("simple page through serve: %d %s", r.status, r.body)
	}

	_ = mirrorProc.Process.Kill()
	_ = mirrorProc.Wait()
	if r := s.do("GET", "/mirror/pypi/simple/beta/", "", nil); r.status != http.StatusBadGateway || r.errCode(t) != "mirror_unavailable" {
		t.Fatalf("mirror route with the service down: %d %s", r.status, r.body)
	}
	r := s.waitReadyz(503, 20*time.Second)
	if got := failingChecks(t, r); strings.Join(got, ",") != "mirror" {
		t.Fatalf("failing checks %v, want [mirror]: %s", got, r.body)
	}
	if ir := s.install(key, id, "pip", "beta"); ir.status != http.StatusServiceUnavailable || ir.errCode(t) != "not_ready" {
		t.Fatalf("install with the mirror down: %d %s", ir.status, ir.body)
	}
	if res := s.exec(key, id, "import importlib.util as u; print(u.find_spec('beta') is None)"); res["stdout"] != "True\n" {
		t.Fatalf("something was installed while the mirror was down: %v", res)
	}

	startMirror()
	s.waitReadyz(200, 30*time.Second)
	if r := s.install(key, id, "pip", "beta"); r.status != http.StatusOK {
		t.Fatalf("install with the mirror back: %d %s", r.status, r.body)
	}
	if res := s.exec(key, id, "import alpha_pkg, beta; print(alpha_pkg.VERSION, beta.VERSION)"); res["stdout"] != "1.0.0 0.1\n" {
		t.Fatalf("imports after recovery: %v", res)
	}
}
