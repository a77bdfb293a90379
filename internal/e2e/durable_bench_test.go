package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxapi/sandboxapi/store"
)

// letterID renders i as 26 letters (the shape of a session id).
func letterID(i int) string {
	out := []byte(strings.Repeat("a", 26))
	for p := 25; i > 0; p-- {
		out[p] = byte('a' + i%26)
		i /= 26
	}
	return string(out)
}

// BenchmarkDurable measures durable sessions on the real binary, side by
// side in one run:
//
//   - resume against a warm-pool create and a cold create (a second server
//     without a warm pool), alternated round by round: the warm create is
//     POST /v1/sessions with a warm sandbox ready; the resume is the
//     resumed_ms of the first execute after POST .../hibernate (and the
//     whole of that execute against an execute on the running session);
//   - fork of a home holding 100 MiB of files (POST .../fork);
//   - server memory per hibernated session: the server's RSS with 2,000
//     hibernated sessions in its store and homes against the same server
//     with none (no process per session).
//
// Run with:
//
//	SANDBOXAPI_REQUIRE_RUNSC=1 go test ./internal/e2e -run '^$' -bench Durable -benchtime 1x -v
func BenchmarkDurable(b *testing.B) {
	defer benchMachine("durable")()
	for i := 0; i < b.N; i++ {
		benchResume(b)
		benchFork(b)
		benchHibernatedMemory(b)
	}
}

func resumedMS(b *testing.B, r reply) time.Duration {
	b.Helper()
	v, ok := r.json(b)["resumed_ms"].(float64)
	if !ok {
		b.Fatalf("no resumed_ms in %s", r.body)
	}
	return time.Duration(v * float64(time.Millisecond))
}

func benchResume(b *testing.B) {
	s := startServerB(b, "executor:\n  warm_pool: 1\n  home_size: 64M\n  hibernate_after: 0s\n")
	// A second server without a warm pool, beside it, for cold creates
	// (the same work as a resume, plus mkfs of a new home).
	c := startServerB(b, "executor:\n  warm_pool: 0\n  home_size: 64M\n  hibernate_after: 0s\n")
	key, ckey := s.key("MEGA"), c.key("MEGA")
	warmReady := func() {
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if strings.Contains(string(s.do("GET", "/metrics", "", nil).body), "sandboxapi_warm_pool_ready 1") {
				return
			}
		}
		b.Fatal("the warm pool did not refill")
	}
	const rounds = 20
	var create, cold, resume, execResumed, execRunning []time.Duration
	for i := 0; i < rounds; i++ {
		warmReady()
		t0 := time.Now()
		id := s.session(key, "python3")
		create = append(create, time.Since(t0))
		t0 = time.Now()
		coldID := c.session(ckey, "python3")
		cold = append(cold, time.Since(t0))
		c.do("DELETE", "/v1/sessions/"+coldID, ckey, nil)
		s.exec(key, id, "open('/home/sandbox/f','w').write('x')")
		t0 = time.Now()
		s.exec(key, id, "print(1)")
		execRunning = append(execRunning, time.Since(t0))
		if r := s.do("POST", "/v1/sessions/"+id+"/hibernate", key, nil); r.status != 200 {
			b.Fatalf("hibernate: %d %s", r.status, r.body)
		}
		t0 = time.Now()
		r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": "print(1)"})
		execResumed = append(execResumed, time.Since(t0))
		if r.status != 200 {
			b.Fatalf("execute: %d %s", r.status, r.body)
		}
		resume = append(resume, resumedMS(b, r))
		s.do("DELETE", "/v1/sessions/"+id, key, nil)
	}
	b.ReportMetric(ms(pct(create, .5)), "warm_create_p50_ms")
	b.ReportMetric(ms(pct(create, .99)), "warm_create_p99_ms")
	b.ReportMetric(ms(pct(cold, .5)), "cold_create_p50_ms")
	b.ReportMetric(ms(pct(cold, .99)), "cold_create_p99_ms")
	b.ReportMetric(ms(pct(resume, .5)), "resume_p50_ms")
	b.ReportMetric(ms(pct(resume, .99)), "resume_p99_ms")
	b.ReportMetric(ms(pct(execRunning, .5)), "exec_running_p50_ms")
	b.ReportMetric(ms(pct(execResumed, .5)), "exec_resuming_p50_ms")
	b.ReportMetric(ms(pct(resume, .5)-pct(create, .5)), "resume_minus_warm_create_p50_ms")
	b.ReportMetric(ms(pct(resume, .5))/ms(pct(cold, .5)), "resume_over_cold_create_p50")
	b.Logf("%d rounds: warm create p50 %.0f ms p99 %.0f ms; cold create p50 %.0f ms p99 %.0f ms; resume p50 %.0f ms p99 %.0f ms (resume/cold %.2f); execute running p50 %.0f ms, resuming p50 %.0f ms",
		rounds, ms(pct(create, .5)), ms(pct(create, .99)), ms(pct(cold, .5)), ms(pct(cold, .99)), ms(pct(resume, .5)), ms(pct(resume, .99)),
		ms(pct(resume, .5))/ms(pct(cold, .5)), ms(pct(execRunning, .5)), ms(pct(execResumed, .5)))
	s.stop()
	c.stop()
}

func benchFork(b *testing.B) {
	s := startServerB(b, "executor:\n  warm_pool: 0\n  home_size: 256M\n")
	key := s.key("MEGA")
	id := s.session(key, "bash")
	// 100 MiB in 10 files of random bytes (nothing compresses or dedups).
	s.exec(key, id, "for i in 0 1 2 3 4 5 6 7 8 9; do head -c 10485760 /dev/urandom > /home/sandbox/blob$i; done; du -sm /home/sandbox")
	const rounds = 10
	var fork, copyCheck []time.Duration
	for i := 0; i < rounds; i++ {
		t0 := time.Now()
		r := s.do("POST", "/v1/sessions/"+id+"/fork", key, nil)
		fork = append(fork, time.Since(t0))
		if r.status != http.StatusCreated {
			b.Fatalf("fork: %d %s", r.status, r.body)
		}
		child := r.json(b)["id"].(string)
		if i == 0 {
			t0 = time.Now()
			out := s.exec(key, child, "du -sm /home/sandbox | cut -f1")
			copyCheck = append(copyCheck, time.Since(t0))
			if n, _ := strconv.Atoi(strings.TrimSpace(out["stdout"].(string))); n < 100 {
				b.Fatalf("child home holds %v MiB", out["stdout"])
			}
			// The copy is sparse: the child's image takes about what
			// its files do, not its 256M size.
			var st unix.Stat_t
			if unix.Stat(filepath.Join(s.dataDir, "sessions", child, "home.img"), &st) == nil {
				b.ReportMetric(float64(st.Blocks*512)/(1<<20), "child_image_MiB_on_disk")
			}
		}
		s.do("DELETE", "/v1/sessions/"+child, key, nil)
	}
	b.ReportMetric(ms(pct(fork, .5)), "fork_100MiB_p50_ms")
	b.ReportMetric(ms(pct(fork, .99)), "fork_100MiB_p99_ms")
	b.Logf("fork of a home holding 100 MiB (source running, frozen during the copy): p50 %.0f ms, p99 %.0f ms over %d", ms(pct(fork, .5)), ms(pct(fork, .99)), rounds)
	s.stop()
}

func benchHibernatedMemory(b *testing.B) {
	const n = 2000
	s := startServerB(b, "executor:\n  warm_pool: 0\n  home_size: 64M\n")
	settle := func() int64 {
		// Settle: a few requests, then a pause for the runtime.
		for i := 0; i < 3; i++ {
			s.do("GET", "/healthz", "", nil)
			s.do("GET", "/metrics", "", nil)
		}
		time.Sleep(3 * time.Second)
		return rssKiB(b, s.cmd.Process.Pid)
	}
	empty := settle()
	s.stop()
	// 2,000 hibernated sessions: rows in the store and home images on
	// disk, as hibernation leaves them (sparse images: they are never
	// resumed here).
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(s.dataDir, "sandboxapi.db"))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for i := 0; i < n; i++ {
		id := "sess_" + letterID(i)
		if err := st.InsertSession(ctx, store.SessionRow{ID: id, KeyID: "key_bench", Language: "bash", State: "hibernated",
			Network: `{"enabled":false}`, IdleTTL: time.Hour, CreatedAt: now, LastUsedAt: now, DiskBytes: 64 << 20}); err != nil {
			b.Fatal(err)
		}
		if err := st.SetSessionHibernated(ctx, id, now, now); err != nil {
			b.Fatal(err)
		}
		dir := filepath.Join(s.dataDir, "sessions", id)
		if err := os.MkdirAll(filepath.Join(dir, "home"), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "home.img"), nil, 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.Truncate(filepath.Join(dir, "home.img"), 64<<20); err != nil {
			b.Fatal(err)
		}
	}
	st.Close()
	t0 := time.Now()
	s.start()
	startup := time.Since(t0)
	full := settle()
	m := string(s.do("GET", "/metrics", "", nil).body)
	if !strings.Contains(m, fmt.Sprintf(`sandboxapi_sessions_by_state{state="hibernated"} %d`, n)) {
		b.Fatalf("the server does not serve %d hibernated sessions", n)
	}
	if p := countProcs(s.dataDir); p != 0 {
		b.Fatalf("%d runsc processes for hibernated sessions", p)
	}
	per := float64(full-empty) * 1024 / n
	b.ReportMetric(per, "rss_bytes_per_hibernated_session")
	b.Logf("server RSS: %d KiB with no session, %d KiB with %d hibernated sessions: %.0f bytes each; no process; start with them took %v",
		empty, full, n, per, startup)
	s.stop()
}

// rssKiB reads VmRSS of pid.
func rssKiB(b *testing.B, pid int) int64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
