package e2e

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkResume measures resume as a client sees it: from the request
// going out to the execute reply coming back, on a hibernated session,
// against the same execute on the running session, round by round in one
// run. It does so for one caller and for five callers at once (every one
// of whose replies must say, in resumed_ms, that it waited for the
// resume), for a plain session (the resume starts a sandbox on the home)
// and a kernel session (the resume restores the sandbox's memory: the
// kernel's variable must still be there).
//
// SANDBOXAPI_BENCH_BURN=N keeps N busy loops running on the host for the
// whole run, to measure under a known extra load; the load average is
// printed at start and end.
//
//	SANDBOXAPI_REQUIRE_RUNSC=1 go test ./internal/e2e -run '^$' -bench Resume -benchtime 1x
//	SANDBOXAPI_BENCH_BURN=3 SANDBOXAPI_REQUIRE_RUNSC=1 go test ./internal/e2e -run '^$' -bench Resume -benchtime 1x
func BenchmarkResume(b *testing.B) {
	burn, _ := strconv.Atoi(os.Getenv("SANDBOXAPI_BENCH_BURN"))
	stop := burnCPU(burn)
	defer stop()
	defer benchMachine(fmt.Sprintf("resume (%d busy loops beside)", burn))()
	rounds := 8
	if v, err := strconv.Atoi(os.Getenv("SANDBOXAPI_BENCH_N")); err == nil && v > 0 {
		rounds = v
	}
	s := startServerB(b, "executor:\n  warm_pool: 1\n  home_size: 64M\n  hibernate_after: 0s\n")
	key := s.key("MEGA")
	fmt.Printf("%-8s %-8s %10s %10s %10s %12s\n", "session", "callers", "running", "resuming", "added", "resumed_ms")
	for _, kind := range []string{"plain", "kernel"} {
		for _, callers := range []int{1, 5} {
			var running, resuming, resumedMs []time.Duration
			for r := 0; r < rounds; r++ {
				body := map[string]any{"language": "python3"}
				if kind == "kernel" {
					body["kernel"] = true
				}
				id := s.sessionWith(key, body)
				if kind == "kernel" {
					s.exec(key, id, "x = 41")
				}
				code := "print(1)"
				want := "1\n"
				if kind == "kernel" {
					code, want = "print(x + 1)", "42\n"
				}
				run := func(expectResume bool) []time.Duration {
					walls := make([]time.Duration, callers)
					var wg sync.WaitGroup
					var failed atomic.Value
					for c := 0; c < callers; c++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							t0 := time.Now()
							out := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": code})
							walls[c] = time.Since(t0)
							if out.status != 200 {
								failed.Store(fmt.Sprintf("execute: %d %s", out.status, out.body))
								return
							}
							m := out.json(b)
							if m["stdout"] != want {
								failed.Store(fmt.Sprintf("stdout %q, want %q", m["stdout"], want))
							}
							rm, _ := m["resumed_ms"].(float64)
							if expectResume && rm <= 0 {
								failed.Store(fmt.Sprintf("a caller's reply does not say it waited for the resume: %s", out.body))
							}
							if expectResume && c == 0 {
								resumedMs = append(resumedMs, time.Duration(rm*float64(time.Millisecond)))
							}
						}()
					}
					wg.Wait()
					if f := failed.Load(); f != nil {
						b.Fatalf("%s session, %d callers: %s", kind, callers, f)
					}
					return walls
				}
				if r > 0 {
					running = append(running, run(false)...)
				} else {
					run(false) // the first round warms caches
				}
				if h := s.do("POST", "/v1/sessions/"+id+"/hibernate", key, nil); h.status != 200 {
					b.Fatalf("hibernate: %d %s", h.status, h.body)
				}
				if w := run(true); r > 0 {
					resuming = append(resuming, w...)
				}
				s.do("DELETE", "/v1/sessions/"+id, key, nil)
			}
			added := pct(resuming, .5) - pct(running, .5)
			fmt.Printf("%-8s %-8d %10.1f %10.1f %10.1f %12.1f\n", kind, callers, ms(pct(running, .5)), ms(pct(resuming, .5)), ms(added), ms(pct(resumedMs, .5)))
			b.ReportMetric(ms(added), fmt.Sprintf("%s-%d-callers-resume-added-p50-ms", kind, callers))
		}
	}
	fmt.Println("ms, p50 over the callers of every round after the first; added = resuming - running")
}

// burnCPU keeps n busy loops, each on its own OS thread, until the
// returned func is called.
func burnCPU(n int) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			for x := 0; !done.Load(); x++ {
				_ = x
			}
		}()
	}
	return func() { done.Store(true); wg.Wait() }
}
