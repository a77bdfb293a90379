package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/executor"
)

// Benchmarks run side by side in one process: each API operation is
// compared with its floor on the same machine state (a bare runsc create
// for session creates; for executes the interpreter's own start timed
// inside the same sandbox), and the ratio is reported. Percentiles come
// from at least 100 samples. Run with:
//
//	go test ./internal/e2e -run '^$' -bench Core -benchtime 1x
func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p)
	return s[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func BenchmarkCore(b *testing.B) {
	for i := 0; i < b.N; i++ {
		benchCore(b)
	}
}

func benchCore(b *testing.B) {
	defer benchMachine("core")()
	s := startServerB(b, "executor:\n  warm_pool: 0\n  home_size: 64M\n  max_sandboxes: 64\n")
	key := s.key("MEGA")
	runsc := []string{"--root", filepath.Join(s.dataDir, "runsc"), "--platform", "systrap", "--overlay2", "none"}
	rounds := max(100, benchSamples(100)) // percentiles of at least 100 samples

	// Session create: API (cold: home image, bundle, runsc run -d) against a
	// bare `runsc run -d` of a copy of the same bundle. Each side runs alone:
	// the other's sandbox is deleted before it is timed, and the order
	// alternates, so neither pays for the other's boot or teardown.
	var apiCreate, bareCreate []time.Duration
	var spec []byte
	apiRound := func() {
		t0 := time.Now()
		id := s.session(key, "python3")
		apiCreate = append(apiCreate, time.Since(t0))
		spec, _ = os.ReadFile(filepath.Join(s.dataDir, "sessions", id, "bundle", "config.json"))
		s.do("DELETE", "/v1/sessions/"+id, key, nil)
	}
	bareRound := func(i int) {
		bareID := fmt.Sprintf("bare-%026d", i)
		bdir := b.TempDir()
		home := filepath.Join(bdir, "home")
		_ = os.Mkdir(home, 0o700)
		_ = os.Chown(home, 1000, 1000)
		var m map[string]any
		_ = json.Unmarshal(spec, &m)
		m["linux"].(map[string]any)["cgroupsPath"] = "/sandboxapi/" + bareID
		// The session's home went with it: the copy binds a folder of its own.
		for _, mt := range m["mounts"].([]any) {
			if mm := mt.(map[string]any); mm["destination"] == "/home/sandbox" {
				mm["source"] = home
			}
		}
		bspec, _ := json.Marshal(m)
		_ = os.WriteFile(filepath.Join(bdir, "config.json"), bspec, 0o600)
		// The detached sandbox keeps its stdio: give it none to wait on.
		logf := filepath.Join(bdir, "runsc.log")
		t1 := time.Now()
		cmd := exec.Command("runsc", append(runsc, "--log", logf, "--network", "none", "run", "--detach", "--bundle", bdir, bareID)...)
		err := cmd.Run()
		bareCreate = append(bareCreate, time.Since(t1))
		if err != nil {
			msg, _ := os.ReadFile(logf)
			b.Fatalf("bare run: %v: %s", err, msg)
		}
		_ = exec.Command("runsc", append(runsc, "delete", "--force", bareID)...).Run()
	}
	apiRound() // warm-up, and the bundle the bare side copies
	apiCreate = apiCreate[:0]
	for i := 0; i < rounds; i++ {
		if i%2 == 0 {
			apiRound()
			bareRound(i)
		} else {
			bareRound(i)
			apiRound()
		}
	}

	// Execute a hello world: the API (HTTP, store, agent, guest) against
	// the floor, the interpreter's own start with the same command timed
	// inside the same sandbox (bash reads the clock around it: no runsc
	// exec, no HTTP in the floor).
	// The two alternate, one sample each, so both see the same load.
	rts, err := executor.LoadRuntimes(configs.Runtimes, "")
	if err != nil {
		b.Fatal(err)
	}
	py, _ := rts.Lookup("python3")
	id := s.session(key, "python3")
	var apiExec, floorExec []time.Duration
	for i := 0; i < rounds+3; i++ {
		t0 := time.Now()
		out := s.exec(key, id, `print("hello")`)
		d := time.Since(t0)
		if out["stdout"] != "hello\n" {
			b.Fatalf("api exec: %v", out)
		}
		fl := floorTimings(b, s, id, nil, py.Run, py.Env, py.File, `print("hello")`, 1)
		if i >= 3 { // warm-up
			apiExec = append(apiExec, d)
			floorExec = append(floorExec, fl[0].wall)
		}
	}
	s.stop()

	// Warm pool: create from the pool against the same cold path.
	w := startServerB(b, "executor:\n  warm_pool: 2\n  home_size: 64M\n  max_sandboxes: 64\n")
	wkey := w.key("MEGA")
	var warmCreate []time.Duration
	for i := 0; i < rounds; i++ {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) { // let the pool refill between creates
			r := w.do("GET", "/v1/sessions", wkey, nil)
			_ = r
			if warmReady(w) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		t0 := time.Now()
		id := w.session(wkey, "python3")
		warmCreate = append(warmCreate, time.Since(t0))
		w.do("DELETE", "/v1/sessions/"+id, wkey, nil)
	}
	w.stop()

	report := func(name string, api, bare []time.Duration) {
		fmt.Printf("%-28s api p50 %7.1f ms p99 %7.1f ms | floor p50 %7.1f ms p99 %7.1f ms | ratio p50 %.2fx p99 %.2fx\n",
			name, ms(pct(api, .5)), ms(pct(api, .99)), ms(pct(bare, .5)), ms(pct(bare, .99)),
			ms(pct(api, .5))/ms(pct(bare, .5)), ms(pct(api, .99))/ms(pct(bare, .99)))
		b.ReportMetric(ms(pct(api, .5))/ms(pct(bare, .5)), strings.ReplaceAll(name, " ", "_")+"-ratio-p50")
	}
	report("session create (cold)", apiCreate, bareCreate)
	report("session create (warm pool)", warmCreate, bareCreate)
	report("execute hello (vs floor)", apiExec, floorExec)
}

// warmReady waits on the number of running sandboxes (the pool is
// internal to the server): two warm ones and no session.
func warmReady(s *server) bool {
	m, _ := filepath.Glob(filepath.Join(s.dataDir, "runsc", "*.state"))
	return len(m) >= 2
}

// BenchmarkStateless compares a stateless print(1) end to end with a bare
// `runsc run` of the same program on the same bundle, and prints the hello
// world latency of every language (stateless, warm pool).
//
//	go test ./internal/e2e -run '^$' -bench Stateless -benchtime 1x
func BenchmarkStateless(b *testing.B) {
	for i := 0; i < b.N; i++ {
		s := startServerB(b, "executor:\n  warm_pool: 2\n  home_size: 64M\n  max_sandboxes: 64\n")
		key := s.key("MEGA")
		runsc := []string{"--root", filepath.Join(s.dataDir, "runsc"), "--platform", "systrap", "--overlay2", "none"}
		// A bundle like the server's, whose init is python itself.
		id := s.session(key, "python3")
		spec, _ := os.ReadFile(filepath.Join(s.dataDir, "sessions", id, "bundle", "config.json"))
		var api, bare []time.Duration
		for r := 0; r < 15; r++ {
			waitWarm(s)
			t0 := time.Now()
			out := s.do("POST", "/v1/execute", key, map[string]any{"language": "python3", "code": "print(1)"})
			api = append(api, time.Since(t0))
			if out.status != 200 || out.json(b)["stdout"] != "1\n" {
				b.Fatalf("stateless: %d %s", out.status, out.body)
			}
			var m map[string]any
			_ = json.Unmarshal(spec, &m)
			bareID := fmt.Sprintf("bare-%026d", r)
			m["process"].(map[string]any)["args"] = []string{"python3", "-c", "print(1)"}
			m["process"].(map[string]any)["user"] = map[string]any{"uid": 1000, "gid": 1000}
			m["linux"].(map[string]any)["cgroupsPath"] = "/sandboxapi/" + bareID
			bs, _ := json.Marshal(m)
			bdir := b.TempDir()
			_ = os.WriteFile(filepath.Join(bdir, "config.json"), bs, 0o600)
			t1 := time.Now()
			cmd := exec.Command("runsc", append(runsc, "--network", "none", "run", "--bundle", bdir, bareID)...)
			outb, err := cmd.Output()
			bare = append(bare, time.Since(t1))
			if err != nil || string(outb) != "1\n" {
				b.Fatalf("bare runsc run: %v %q", err, outb)
			}
			_ = exec.Command("runsc", append(runsc, "delete", "--force", bareID)...).Run()
		}
		fmt.Printf("%-28s api p50 %7.1f ms p99 %7.1f ms | bare runsc run p50 %7.1f ms p99 %7.1f ms | ratio p50 %.2fx\n",
			"stateless print(1)", ms(pct(api, .5)), ms(pct(api, .99)), ms(pct(bare, .5)), ms(pct(bare, .99)), ms(pct(api, .5))/ms(pct(bare, .5)))

		fmt.Println("hello world, stateless (warm pool), 5 runs each:")
		for _, tc := range []struct{ lang, code string }{
			{"python3", `print("hello")`},
			{"javascript", `console.log("hello")`},
			{"typescript", `const m: string = "hello"; console.log(m)`},
			{"go", "package main\nimport \"fmt\"\nfunc main() { fmt.Println(\"hello\") }"},
			{"java", `public class Main { public static void main(String[] a) { System.out.println("hello"); } }`},
			{"c", "#include <stdio.h>\nint main(){puts(\"hello\");return 0;}"},
			{"cpp", "#include <iostream>\nint main(){std::cout<<\"hello\"<<std::endl;}"},
			{"bash", `echo hello`},
		} {
			var d []time.Duration
			for r := 0; r < 5; r++ {
				waitWarm(s)
				t0 := time.Now()
				out := s.do("POST", "/v1/execute", key, map[string]any{"language": tc.lang, "code": tc.code, "timeout": 60})
				d = append(d, time.Since(t0))
				if out.status != 200 || out.json(b)["stdout"] != "hello\n" {
					b.Fatalf("%s: %d %s", tc.lang, out.status, out.body)
				}
			}
			fmt.Printf("  %-12s p50 %8.1f ms  max %8.1f ms\n", tc.lang, ms(pct(d, .5)), ms(pct(d, 1)))
		}
		s.stop()
	}
}

// sessSandboxes counts the server's sess_ sandboxes (sessions, the warm
// pool, stateless calls, the readiness checker's sandbox canaries).
func sessSandboxes(s *server) int {
	out, err := exec.Command("runsc", "--root", filepath.Join(s.dataDir, "runsc"), "list", "-quiet").Output()
	if err != nil {
		s.t.Fatalf("runsc list: %v", err)
	}
	n := 0
	for _, id := range strings.Fields(string(out)) {
		if strings.HasPrefix(id, "sess_") {
			n++
		}
	}
	return n
}

// waitSettled waits, after a stateless call made when the server had
// before sess_ sandboxes, until what the call set off in the background
// is over: the pool refilled (waitWarm) and the call's own sandbox torn
// down (no more sandboxes than before). A row timed while a teardown or
// a refill ran (the session call used to follow the stateless one at
// once) measured them too.
func waitSettled(s *server, before int) {
	waitWarm(s)
	deadline := time.Now().Add(120 * time.Second)
	n := 0
	for time.Now().Before(deadline) {
		if n = sessSandboxes(s); n <= before {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("the server did not settle in 120 s: %d sandboxes, %d before the call", n, before)
}

// waitWarm waits until the server's pool is full: two idle sandboxes
// that have run their warm-up (the pool counts a sandbox as ready only
// then; a runsc state file appears when it starts, before its warm-up).
func waitWarm(s *server) {
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(string(s.do("GET", "/metrics", "", nil).body), "sandboxapi_warm_pool_ready 2\n") {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatal("the warm pool did not fill in 120 s")
}
