package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkSizing measures what one running session costs a node, for the
// sizing table in docs/scaling.md: n python3 sessions are created one after
// another on a server without a warm pool, each runs one execute (so its
// interpreter has run once, as after a client's first call) and then idles;
// then it reads
//
//   - the memory of every runsc process of this server (those whose command
//     line names its runsc root, so other servers on the machine do not
//     count): the sum of Pss (shared pages split among their users) and of
//     Rss, per session;
//   - the memory cgroups those processes are in: usage (anonymous and page
//     cache) and the anonymous part alone, per session;
//   - the host's MemAvailable before and after, per session (noisy on a
//     shared machine: a cross-check only);
//   - the server process's own RSS, and each home image's blocks on disk;
//   - the cold create latency of the n creates.
//
// Run with:
//
//	SANDBOXAPI_REQUIRE_RUNSC=1 go test ./internal/e2e -run '^$' -bench Sizing -benchtime 1x -v
//
// SANDBOXAPI_BENCH_N sets n (default 12; at most 16, the server's ceiling).
func BenchmarkSizing(b *testing.B) {
	n := 12
	if v, err := strconv.Atoi(os.Getenv("SANDBOXAPI_BENCH_N")); err == nil && v > 0 && v <= 16 {
		n = v
	}
	for i := 0; i < b.N; i++ {
		benchSizing(b, n)
	}
}

func benchSizing(b *testing.B, n int) {
	s := startServerB(b, "executor:\n  warm_pool: 0\n  max_sandboxes: 16\n  hibernate_after: 0s\n")
	// A MEGA key holds 8 sessions: enough keys for n.
	var keys []string
	for len(keys)*8 < n {
		keys = append(keys, s.key("MEGA"))
	}
	settle := func() { time.Sleep(3 * time.Second) }
	settle()
	if p := len(serverProcs(s.dataDir)); p != 0 {
		b.Fatalf("%d runsc processes before any session (warm pool is off)", p)
	}
	availBefore := memAvailableKiB(b)
	serverBefore := rssKiB(b, s.cmd.Process.Pid)
	var creates []time.Duration
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		key := keys[i%len(keys)]
		t0 := time.Now()
		id := s.session(key, "python3")
		creates = append(creates, time.Since(t0))
		if out := s.exec(key, id, "print(6*7)"); strings.TrimSpace(out["stdout"].(string)) != "42" {
			b.Fatalf("execute: %v", out)
		}
		ids = append(ids, id)
	}
	settle()
	procs := serverProcs(s.dataDir)
	var pss, rss int64
	cgroups := map[string]bool{}
	for _, pid := range procs {
		p, r := procMemKiB(pid)
		pss += p
		rss += r
		if cg := memoryCgroup(pid); cg != "" {
			cgroups[cg] = true
		}
	}
	var cgUsage, cgAnon int64
	for cg := range cgroups {
		u, a := cgroupMemBytes(cg)
		cgUsage += u
		cgAnon += a
	}
	availAfter := memAvailableKiB(b)
	serverAfter := rssKiB(b, s.cmd.Process.Pid)
	var imgBlocks int64
	for _, id := range ids {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(s.dataDir, "sessions", id, "home.img"), &st); err != nil {
			b.Fatalf("home image of %s: %v", id, err)
		}
		imgBlocks += st.Blocks * 512
	}
	perPss := float64(pss) / 1024 / float64(n)
	perCg := float64(cgUsage) / (1 << 20) / float64(n)
	b.ReportMetric(perPss, "runsc_pss_MiB_per_running_session")
	b.ReportMetric(float64(rss)/1024/float64(n), "runsc_rss_MiB_per_running_session")
	b.ReportMetric(perCg, "cgroup_usage_MiB_per_running_session")
	b.ReportMetric(float64(cgAnon)/(1<<20)/float64(n), "cgroup_anon_MiB_per_running_session")
	b.ReportMetric(float64(availBefore-availAfter)/1024/float64(n), "host_memavailable_drop_MiB_per_running_session")
	b.ReportMetric(float64(serverAfter-serverBefore)/float64(n), "server_rss_KiB_per_running_session")
	b.ReportMetric(float64(imgBlocks)/(1<<20)/float64(n), "home_image_MiB_on_disk_per_session")
	b.ReportMetric(1024/perCg, "running_sessions_per_GiB")
	b.ReportMetric(ms(pct(creates, .5)), "cold_create_p50_ms")
	b.ReportMetric(ms(pct(creates, .99)), "cold_create_p99_ms")
	b.Logf("%d running python3 sessions, %d runsc processes in %d memory cgroups: Pss %.1f MiB, Rss %.1f MiB, cgroup usage %.1f MiB (anon %.1f MiB) per session; host MemAvailable dropped %.1f MiB per session; server RSS %d -> %d KiB; home images %.1f MiB on disk each; cold create p50 %.0f ms p99 %.0f ms",
		n, len(procs), len(cgroups), perPss, float64(rss)/1024/float64(n), perCg, float64(cgAnon)/(1<<20)/float64(n),
		float64(availBefore-availAfter)/1024/float64(n), serverBefore, serverAfter, float64(imgBlocks)/(1<<20)/float64(n),
		ms(pct(creates, .5)), ms(pct(creates, .99)))
	for i, id := range ids {
		s.do("DELETE", "/v1/sessions/"+id, keys[i%len(keys)], nil)
	}
	s.stop()
}

// serverProcs lists the pids whose command line names dataDir's runsc root
// (the sandboxes, gofers and runsc commands of that server only).
func serverProcs(dataDir string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), filepath.Join(dataDir, "runsc")) {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out
}

// procMemKiB reads Pss and Rss of pid from smaps_rollup (0, 0 when it is
// gone).
func procMemKiB(pid int) (pss, rss int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "Pss:":
			pss = v
		case "Rss:":
			rss = v
		}
	}
	return pss, rss
}

// memoryCgroup is the folder of pid's memory cgroup under /sys/fs/cgroup
// (cgroup v1's memory controller, or the v2 unified group); "" when none
// is found.
func memoryCgroup(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				return filepath.Join("/sys/fs/cgroup/memory", parts[2])
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
				return filepath.Join("/sys/fs/cgroup", parts[2])
			}
		}
	}
	return ""
}

// cgroupMemBytes reads a memory cgroup's usage and its anonymous part
// (v1: memory.usage_in_bytes and total_rss; v2: memory.current and anon).
func cgroupMemBytes(dir string) (usage, anon int64) {
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}
	stat := func(key string) int64 {
		for _, l := range strings.Split(read("memory.stat"), "\n") {
			if v, ok := strings.CutPrefix(l, key+" "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
		return 0
	}
	if u := strings.TrimSpace(read("memory.usage_in_bytes")); u != "" {
		usage, _ = strconv.ParseInt(u, 10, 64)
		return usage, stat("total_rss")
	}
	usage, _ = strconv.ParseInt(strings.TrimSpace(read("memory.current")), 10, 64)
	return usage, stat("anon")
}

// memAvailableKiB reads MemAvailable from /proc/meminfo.
func memAvailableKiB(b *testing.B) int64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	b.Fatal("no MemAvailable")
	return 0
}
