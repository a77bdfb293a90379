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
// reports, stateless (warm pool) and in a session, beside the floor: the
// runtime's own compile and run commands timed inside the same session
// sandbox (one `runsc exec` of a bash loop that reads $EPOCHREALTIME
// around each step, so neither runsc nor HTTP is in it). Compiled
// languages also show the plain toolchain (javac then java, go build,
// g++ without a precompiled header) in the same sandbox.
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
	s := startServerB(b, "executor:\n  warm_pool: 2\n  home_size: 128M\n  max_sandboxes: 64\n  memory_mb: 1024\n"+extra)
	key := s.key("MEGA")
	only := os.Getenv("SANDBOXAPI_BENCH_LANGS")
	fmt.Printf("hello world per language, %d samples each; ms; floor = the same commands timed inside the sandbox\n", n)
	fmt.Printf("%-15s %-9s %8s %8s %9s %8s | %8s %9s %8s | %s\n",
		"language", "mode", "wall p50", "p99", "compile", "run", "floor", "compile", "run", "api - floor (p50)")
	for _, hw := range helloWorlds {
		if only != "" && !strings.Contains(","+only+",", ","+hw.lang+",") {
			continue
		}
		for _, rt := range rts.Versions() {
			if rt.Name != hw.lang {
				continue
			}
			benchLanguage(b, s, key, hw.lang, hw.code, rt, rts.Env(), n)
		}
	}
}

// benchLanguage measures one language at one version (rt).
func benchLanguage(b *testing.B, s *server, key, lang, code string, rt executor.Runtime, common []string, n int) {
	label := lang + " " + rt.Series
	env := append(append([]string{}, common...), rt.Env...)
	// One round is a stateless call, a session call, the floor and the
	// plain toolchain, one after the other: on a shared machine, load
	// changes over time, and interleaving shares it out evenly.
	id := s.sessionWith(key, map[string]any{"language": lang, "version": rt.Series})
	plainCmd, hasPlain := plainToolchain[lang]
	var stateless, session, floor, plain timings
	for r := 0; r < n+1; r++ {
		waitWarm(s)
		t0 := time.Now()
		out := s.do("POST", "/v1/execute", key, map[string]any{"language": lang, "version": rt.Series, "code": code, "timeout": 60})
		st := resultTiming(b, lang, out, time.Since(t0))
		t0 = time.Now()
		out = s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": code, "timeout": 60})
		se := resultTiming(b, lang, out, time.Since(t0))
		fl := floorTimings(b, s, id, rt.Compile, rt.Run, env, rt.File, code, 1)
		if hasPlain {
			plain = append(plain, floorTimings(b, s, id, plainCmd.compile, plainCmd.run, env, rt.File, code, 1)...)
		}
		if r == 0 {
			plain = plain[:0] // the first round warms caches
			continue
		}
		stateless, session, floor = append(stateless, st), append(session, se), append(floor, fl...)
	}
	for _, row := range []struct {
		mode string
		ts   timings
	}{{"stateless", stateless}, {"session", session}} {
		fmt.Printf("%-15s %-9s %8.1f %8.1f %9.1f %8.1f | %8.1f %9.1f %8.1f | %+8.1f\n", label, row.mode,
			ms(pct(row.ts.wall(), .5)), ms(pct(row.ts.wall(), .99)), ms(pct(row.ts.compile(), .5)), ms(pct(row.ts.run(), .5)),
			ms(pct(floor.wall(), .5)), ms(pct(floor.compile(), .5)), ms(pct(floor.run(), .5)),
			ms(pct(row.ts.wall(), .5))-ms(pct(floor.wall(), .5)))
		b.ReportMetric(ms(pct(row.ts.wall(), .5)), lang+"-"+rt.Series+"-"+row.mode+"-p50-ms")
	}
	if hasPlain {
		fmt.Printf("%-15s %-9s %8s %8s %9s %8s | %8.1f %9.1f %8.1f | plain toolchain: %s && %s\n", label, "plain", "", "", "", "",
			ms(pct(plain.wall(), .5)), ms(pct(plain.compile(), .5)), ms(pct(plain.run(), .5)),
			strings.Join(plainCmd.compile, " "), strings.Join(plainCmd.run, " "))
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

// floorTimings times n runs of the given compile and run commands inside
// the session's sandbox, as its user, each in a fresh folder under /tmp
// holding the code, with the runtime's environment; one `runsc exec` runs
// the whole loop (after one untimed warm-up run), and bash reads the clock
// around each step.
func floorTimings(b *testing.B, s *server, id string, compile, run, env []string, file, code string, n int) timings {
	b.Helper()
	var sc strings.Builder
	sc.WriteString("set -e\nexport PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/sandbox LANG=C.UTF-8 TMPDIR=/tmp\n")
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
	runsc := []string{"--root", filepath.Join(s.dataDir, "runsc"), "exec", "--user", "1000:1000", "--cwd", "/tmp", id,
		"bash", "-c", sc.String(), "floor", base64.StdEncoding.EncodeToString([]byte(code))}
	out, err := exec.Command("runsc", runsc...).CombinedOutput()
	if err != nil {
		b.Fatalf("floor loop: %v: %s", err, out)
	}
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
