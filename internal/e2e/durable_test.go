package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// sessionState reads a session's state through the API.
func (s *server) sessionState(t *testing.T, key, id string) (string, map[string]any) {
	t.Helper()
	r := s.do("GET", "/v1/sessions/"+id, key, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET session: %d %s", r.status, r.body)
	}
	m := r.json(t)
	return m["state"].(string), m
}

// sessionHeld lists the runsc processes and mounts of one session (other
// sandboxes, such as the readiness probe's installer jobs, may run).
func (s *server) sessionHeld(id string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		cmd, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(cmd), "runsc") && strings.Contains(string(cmd), id) {
			out = append(out, "process "+ent.Name())
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, id) {
			out = append(out, "mount "+l)
		}
	}
	return out
}

// killFromOutside removes every runsc process and mount of the server's
// data dir, as an operator's cleanup script or a host reboot would.
func (s *server) killFromOutside(t *testing.T) (procs, mounts int) {
	t.Helper()
	// Again until none is left: a runsc command killed half-way may have
	// started a child a moment before.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		n := 0
		ents, _ := os.ReadDir("/proc")
		for _, ent := range ents {
			cmd, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
			if err == nil && strings.Contains(string(cmd), s.dataDir) && strings.HasPrefix(string(cmd), "runsc") {
				if pid, err := strconv.Atoi(ent.Name()); err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
					n++
				}
			}
		}
		procs += n
		if n == 0 && countProcs(s.dataDir) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runsc processes of %s did not die", s.dataDir)
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.HasPrefix(f[4], s.dataDir) {
			if unix.Unmount(f[4], unix.MNT_DETACH) == nil {
				mounts++
			}
		}
	}
	return procs, mounts
}

// A session with a file and an installed wheel survives a SIGTERM and a
// restart (it comes back hibernated), a SIGKILL and a restart (its sandbox
// is adopted), and every runsc process and mount of the server removed
// from outside and a restart (it comes back hibernated). Each time the file
// and the package are there and the next execute works; a resume says so
// in X-Sandbox-Resumed and resumed_ms. Last, an upgrade: SIGTERM and a
// start of a freshly built binary.
func TestSessionSurvivesRestarts(t *testing.T) {
	s, _, _ := installServer(t, "")
	dir := t.TempDir()
	s.importOSV()
	s.cliArgs([]string{"mirror", "add"}, writeWheel(t, dir, "durable-pkg", "1.0.0"))
	s.cliArgs([]string{"mirror", "add"}, writeWheel(t, dir, "durable-two", "2.0.0"))
	key := s.key("PRO")
	id := s.session(key, "python3")
	s.waitReadyz(200, 90*time.Second)
	if r := s.install(key, id, "pip", "durable-pkg==1.0.0"); r.status != 200 {
		t.Fatalf("install: %d %s", r.status, r.body)
	}
	s.exec(key, id, "open('/home/sandbox/notes.txt','w').write('kept')")
	const probe = "import durable_pkg; print(open('/home/sandbox/notes.txt').read(), durable_pkg.VERSION)"
	check := func(t *testing.T, wantState string, wantResume bool) {
		t.Helper()
		if st, _ := s.sessionState(t, key, id); st != wantState {
			t.Fatalf("state after restart: %s, want %s", st, wantState)
		}
		r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": probe})
		if r.status != 200 {
			t.Fatalf("execute after restart: %d %s", r.status, r.body)
		}
		res := r.json(t)
		if res["stdout"] != "kept 1.0.0\n" {
			t.Fatalf("after restart: %s", r.body)
		}
		hdr := r.header.Get("X-Sandbox-Resumed")
		if wantResume && (hdr == "" || res["resumed_ms"] == nil) {
			t.Fatalf("resume not reported: header %q, body %s", hdr, r.body)
		}
		if !wantResume && (hdr != "" || res["resumed_ms"] != nil) {
			t.Fatalf("resume reported without one: header %q, body %s", hdr, r.body)
		}
		t.Logf("resumed: header %q", hdr)
	}

	t.Run("SIGTERM", func(t *testing.T) {
		if held := s.sessionHeld(id); len(held) == 0 {
			t.Fatal("the running session shows no process or mount: the check below would see nothing")
		}
		s.stop()
		if held := s.sessionHeld(id); len(held) != 0 {
			t.Fatalf("after SIGTERM the session holds %v", held)
		}
		s.start()
		check(t, "hibernated", true)
	})
	t.Run("SIGKILL", func(t *testing.T) {
		s.kill()
		s.start()
		check(t, "running", false) // its sandbox outlived the server and is adopted
	})
	t.Run("removed from outside", func(t *testing.T) {
		s.kill()
		procs, mounts := s.killFromOutside(t)
		if procs == 0 || mounts == 0 {
			t.Fatalf("nothing removed: %d processes, %d mounts", procs, mounts)
		}
		s.start()
		check(t, "hibernated", true)
	})
	t.Run("upgrade to a freshly built binary", func(t *testing.T) {
		// A new build (another version stamp) beside the same guest.
		dir := t.TempDir()
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X github.com/sandboxapi/sandboxapi/internal/buildinfo.Version=v9.9.9-upgrade",
			"-o", filepath.Join(dir, "sandboxapi"), "./cmd/sandboxapi")
		cmd.Dir = testenv.ModuleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building: %v\n%s", err, out)
		}
		guest, err := os.ReadFile(filepath.Join(filepath.Dir(s.bin), "sandboxapi-guest"))
		if err != nil || os.WriteFile(filepath.Join(dir, "sandboxapi-guest"), guest, 0o755) != nil {
			t.Fatalf("copying the guest: %v", err)
		}
		old := s.bin
		defer func() { s.bin = old }()
		s.stop()
		s.bin = filepath.Join(dir, "sandboxapi")
		s.start()
		if h := s.do("GET", "/healthz", "", nil); !strings.Contains(string(h.body), "v9.9.9-upgrade") {
			t.Fatalf("not the new build: %s", h.body)
		}
		check(t, "hibernated", true)
	})
	t.Run("install into a hibernated session", func(t *testing.T) {
		if r := s.do("POST", "/v1/sessions/"+id+"/hibernate", key, nil); r.status != 200 {
			t.Fatalf("hibernate: %d %s", r.status, r.body)
		}
		s.waitReadyz(200, 90*time.Second)
		r := s.install(key, id, "pip", "durable-two==2.0.0")
		if r.status != 200 || r.header.Get("X-Sandbox-Resumed") == "" {
			t.Fatalf("install: %d resumed=%q %s", r.status, r.header.Get("X-Sandbox-Resumed"), r.body)
		}
		if out := s.exec(key, id, "import durable_two, durable_pkg; print(durable_two.VERSION)"); out["stdout"] != "2.0.0\n" {
			t.Fatalf("after install: %v", out)
		}
	})
	if r := s.do("DELETE", "/v1/sessions/"+id, key, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
}

// The durable-session routes over HTTP: hibernate, resume on a files call,
// 20 parallel calls resuming once, fork, and 507 past max_disk.
func TestHibernateForkAndDiskBudgetOverHTTP(t *testing.T) {
	s := startServer(t, "executor:\n  warm_pool: 0\n  home_size: 64M\n  max_disk: 192M\n")
	key := s.key("ULTRA")
	id := s.session(key, "bash")
	s.exec(key, id, "echo parent > /home/sandbox/f")

	r := s.do("POST", "/v1/sessions/"+id+"/hibernate", key, nil)
	if r.status != 200 || r.json(t)["state"] != "hibernated" || r.json(t)["hibernated_at"] == nil {
		t.Fatalf("hibernate: %d %s", r.status, r.body)
	}
	if held := s.sessionHeld(id); len(held) != 0 {
		t.Fatalf("a hibernated session holds %v", held)
	}
	// A files call resumes it.
	f := s.do("GET", "/v1/sessions/"+id+"/files?path=/home/sandbox/f", key, nil)
	if f.status != 200 || string(f.body) != "parent\n" || f.header.Get("X-Sandbox-Resumed") == "" {
		t.Fatalf("files call on a hibernated session: %d %q resumed=%q", f.status, f.body, f.header.Get("X-Sandbox-Resumed"))
	}

	// 20 parallel calls to a hibernated session resume it once: every call
	// that waited for that resume says so with its time, and no call
	// names another (a second resume would carry its own time).
	if r := s.do("POST", "/v1/sessions/"+id+"/hibernate", key, nil); r.status != 200 {
		t.Fatalf("hibernate: %d %s", r.status, r.body)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	resumes, ok := map[string]int{}, 0
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": "cat /home/sandbox/f"})
			mu.Lock()
			defer mu.Unlock()
			if r.status == 200 && strings.Contains(string(r.body), `"stdout":"parent\n"`) {
				ok++
			}
			if v := r.header.Get("X-Sandbox-Resumed"); v != "" {
				resumes[v]++
			}
		}()
	}
	wg.Wait()
	if ok != 20 || len(resumes) != 1 {
		t.Fatalf("20 parallel calls: %d succeeded, X-Sandbox-Resumed values %v (want 20, and one resume)", ok, resumes)
	}

	fr := s.do("POST", "/v1/sessions/"+id+"/fork", key, nil)
	if fr.status != http.StatusCreated || fr.json(t)["forked_from"] != id || fr.json(t)["state"] != "hibernated" {
		t.Fatalf("fork: %d %s", fr.status, fr.body)
	}
	child := fr.json(t)["id"].(string)
	if out := s.exec(key, child, "cat /home/sandbox/f; echo child > /home/sandbox/f"); out["stdout"] != "parent\n" {
		t.Fatalf("child: %v", out)
	}
	if out := s.exec(key, id, "cat /home/sandbox/f"); out["stdout"] != "parent\n" {
		t.Fatalf("parent after the child's write: %v", out)
	}
	// Three 64M homes fill max_disk: create and fork answer 507.
	third := s.session(key, "bash")
	for _, req := range [][2]string{{"/v1/sessions", `{"language":"bash"}`}, {"/v1/sessions/" + id + "/fork", `{}`}} {
		r := s.do("POST", req[0], key, []byte(req[1]))
		if r.status != http.StatusInsufficientStorage || r.errCode(t) != "insufficient_storage" {
			t.Fatalf("POST %s past max_disk: %d %s", req[0], r.status, r.body)
		}
	}
	list := s.do("GET", "/v1/sessions", key, nil)
	if n := strings.Count(string(list.body), `"id":`); n != 3 {
		t.Fatalf("%d sessions listed after the refusals, want 3: %s", n, list.body)
	}
	m := string(s.do("GET", "/metrics", "", nil).body)
	for _, want := range []string{`sandboxapi_sessions_by_state{state="hibernated"}`, `sandboxapi_homes_disk_bytes{kind="committed"} 2.01326592e+08`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, sid := range []string{third, child} {
		if r := s.do("DELETE", "/v1/sessions/"+sid, key, nil); r.status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
	}
	if out := s.exec(key, id, "cat /home/sandbox/f"); out["stdout"] != "parent\n" {
		t.Fatalf("parent after the child's delete: %v", out)
	}
}

// A network session hibernates with nothing of its network left (netns,
// veth, nft chain), and comes back with its allow-list enforced: after a
// resume, and after a SIGTERM and a restart.
func TestNetworkSessionHibernatesWithItsAllowList(t *testing.T) {
	f := startFakeInternet(t)
	ee := newEgressEnv(t)
	s := startServer(t, ee.yaml(f))
	sweepAfter(t, s)
	ultra := s.key("ULTRA")
	id := s.networkSession(ultra, map[string]any{"enabled": true, "allowed_domains": []string{"www.allowed.test"}})
	s.installCA(ultra, id, f)
	curl := `curl -sS --max-time 30 https://www.allowed.test/; curl -sS --max-time 30 https://api.allowed.test/; echo "rc=$?"`
	enforced := func(when string) {
		t.Helper()
		r := s.do("POST", "/v1/sessions/"+id+"/execute", ultra, map[string]any{"code": curl, "env": caEnv, "timeout": 90})
		if r.status != http.StatusOK {
			t.Fatalf("%s: execute %d %s", when, r.status, r.body)
		}
		res := r.json(t)
		if o := res["stdout"].(string); strings.Count(o, "hello www.allowed.test") != 1 || strings.Contains(o, "rc=0") || strings.Contains(o, "hello api.allowed.test") {
			t.Fatalf("%s: allow-list not enforced: %s", when, out(res))
		}
		if when != "before" && r.header.Get("X-Sandbox-Resumed") == "" {
			t.Fatalf("%s: no resume reported", when)
		}
	}
	enforced("before")
	s.readinessCheck("topology", 90*time.Second) // its canary network is gone
	if r := s.do("POST", "/v1/sessions/"+id+"/hibernate", ultra, nil); r.status != 200 {
		t.Fatalf("hibernate: %d %s", r.status, r.body)
	}
	if left := ee.leftovers(t); len(left) != 0 {
		t.Fatalf("a hibernated network session holds %q", left)
	}
	if held := s.sessionHeld(id); len(held) != 0 {
		t.Fatalf("a hibernated network session holds %v", held)
	}
	enforced("after resume")
	s.stop()
	if left := ee.leftovers(t); len(left) != 0 {
		t.Fatalf("after SIGTERM: %q", left)
	}
	s.start()
	if st, _ := s.sessionState(t, ultra, id); st != "hibernated" {
		t.Fatalf("after restart: %s", st)
	}
	enforced("after restart")
}
