package executor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

func TestStatelessFilesHostile(t *testing.T) {
	t.Parallel()
	rts, err := LoadRuntimes(configs.Runtimes, "")
	if err != nil {
		t.Fatal(err)
	}
	files := func(paths ...string) []sandbox.File {
		out := make([]sandbox.File, 0, len(paths))
		for _, p := range paths {
			out = append(out, sandbox.File{Path: p, Content: []byte("x")})
		}
		return out
	}
	many := make([]string, maxStatelessFiles+1)
	for i := range many {
		many[i] = "f" + strings.Repeat("x", i)
	}
	tests := []struct {
		name  string
		lang  string
		files []sandbox.File
		want  error    // nil: accepted
		paths []string // the paths sent to the guest after the code, when accepted
	}{
		{name: "plain files", lang: "python3", files: files("data.csv", "lib/util.py", "lib/sub/x.py"), paths: []string{"data.csv", "lib/util.py", "lib/sub/x.py"}},
		{name: "dot slash is cleaned", lang: "python3", files: files("./data.csv", "lib//util.py", "lib/./x.py"), paths: []string{"data.csv", "lib/util.py", "lib/x.py"}},
		{name: "code file", lang: "python3", files: files("main.py"), want: ErrInvalid},
		{name: "code file with dot slash", lang: "python3", files: files("./main.py"), want: ErrInvalid},
		{name: "code file with double slash", lang: "python3", files: files(".//main.py"), want: ErrInvalid},
		{name: "code file with trailing slash", lang: "python3", files: files("main.py/"), want: ErrInvalid},
		{name: "below the code file", lang: "python3", files: files("main.py/x"), want: ErrInvalid},
		{name: "same path twice", lang: "python3", files: files("a.txt", "a.txt"), want: ErrInvalid},
		{name: "same path two spellings", lang: "python3", files: files("a.txt", "./a.txt"), want: ErrInvalid},
		{name: "file and a file below it", lang: "python3", files: files("a", "a/b"), want: ErrInvalid},
		{name: "file below and then its folder", lang: "python3", files: files("a/b/c", "a/b"), want: ErrInvalid},
		{name: "deep clash", lang: "python3", files: files("a/b", "a/b/c/d"), want: ErrInvalid},
		{name: "sibling prefix is fine", lang: "python3", files: files("a", "ab/c"), paths: []string{"a", "ab/c"}},
		{name: "node_modules for javascript", lang: "javascript", files: files("node_modules"), want: ErrInvalid},
		{name: "below node_modules for javascript", lang: "javascript", files: files("node_modules/x/index.js"), want: ErrInvalid},
		{name: "dotted node_modules for typescript", lang: "typescript", files: files("./node_modules/x.js"), want: ErrInvalid},
		{name: "typescript output", lang: "typescript", files: files("main.js"), want: ErrInvalid},
		{name: "go binary", lang: "go", files: files("main"), want: ErrInvalid},
		{name: "go binary as a folder", lang: "go", files: files("main/x.go"), want: ErrInvalid},
		{name: "node_modules is fine for python", lang: "python3", files: files("node_modules/x"), paths: []string{"node_modules/x"}},
		{name: "dot", lang: "python3", files: files("."), want: ErrInvalid},
		{name: "dot slash only", lang: "python3", files: files("./"), want: ErrInvalid},
		{name: "empty", lang: "python3", files: files(""), want: ErrInvalid},
		{name: "dot dot", lang: "python3", files: files("../x"), want: ErrInvalid},
		{name: "inner dot dot", lang: "python3", files: files("a/../../x"), want: ErrInvalid},
		{name: "absolute", lang: "python3", files: files("/etc/passwd"), want: ErrInvalid},
		{name: "absolute home", lang: "python3", files: files("/home/sandbox/x"), want: ErrInvalid},
		{name: "backslash", lang: "python3", files: files(`a\b`), want: ErrInvalid},
		{name: "NUL", lang: "python3", files: files("a\x00b"), want: ErrInvalid},
		{name: "too long", lang: "python3", files: files(strings.Repeat("a", 256)), want: ErrInvalid},
		{name: "too many", lang: "python3", files: files(many...), want: ErrInvalid},
		{name: "too big in all", lang: "python3", files: []sandbox.File{
			{Path: "a", Content: make([]byte, maxStatelessFileBytes/2+1)},
			{Path: "b", Content: make([]byte, maxStatelessFileBytes/2+1)},
		}, want: ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := rts.Lookup(tc.lang)
			if err != nil {
				t.Fatal(err)
			}
			got, err := statelessFiles(rt, "print(1)", tc.files)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if len(got) != len(tc.paths)+1 || got[0].Path != rt.File || string(got[0].Content) != "print(1)" {
				t.Fatalf("guest files %+v", got)
			}
			for i, p := range tc.paths {
				if got[i+1].Path != p {
					t.Fatalf("file %d sent as %q, want %q", i, got[i+1].Path, p)
				}
			}
		})
	}
}

func TestTimeoutMSNeverZero(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		d    time.Duration
		want int64
	}{
		{name: "0.0004 s", d: 400 * time.Microsecond, want: 1},
		{name: "one nanosecond", d: 1, want: 1},
		{name: "one millisecond", d: time.Millisecond, want: 1},
		{name: "1.5 ms rounds up", d: 1500 * time.Microsecond, want: 2},
		{name: "ten seconds", d: 10 * time.Second, want: 10_000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := timeoutMS(tc.d); got != tc.want {
				t.Fatalf("timeoutMS(%v) = %d, want %d", tc.d, got, tc.want)
			}
		})
	}
}

// The guest requests of both execute paths carry a positive timeout, a
// compile cap no larger than it, and the call's capped memory limit.
func TestGuestRequestLimits(t *testing.T) {
	t.Parallel()
	rts, err := LoadRuntimes(configs.Runtimes, "")
	if err != nil {
		t.Fatal(err)
	}
	goRT, _ := rts.Lookup("go")
	e := &Executor{rt: rts, cfg: Config{MemoryBytes: 256 << 20, CompileTimeout: 60 * time.Second, DefaultTimeout: 10 * time.Second, MaxTimeout: 2 * time.Minute, Pids: 64}}
	tests := []struct {
		name      string
		timeout   time.Duration
		memory    int64
		timeoutMS int64
		compileMS int64
		memoryOut int64
		wantErr   error
	}{
		{name: "sub-millisecond timeout", timeout: 400 * time.Microsecond, timeoutMS: 1, compileMS: 1, memoryOut: 256 << 20},
		{name: "default timeout", timeout: 0, timeoutMS: 10_000, compileMS: 10_000, memoryOut: 256 << 20},
		{name: "compile capped by its own limit", timeout: 90 * time.Second, timeoutMS: 90_000, compileMS: 60_000, memoryOut: 256 << 20},
		{name: "smaller memory", timeout: time.Second, memory: 64 << 20, timeoutMS: 1000, compileMS: 1000, memoryOut: 64 << 20},
		{name: "memory above the server's is capped", timeout: time.Second, memory: 1 << 40, timeoutMS: 1000, compileMS: 1000, memoryOut: 256 << 20},
		{name: "negative memory", timeout: time.Second, memory: -1, wantErr: ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			timeout, err := e.ClampTimeout(tc.timeout)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.memoryLimit(tc.memory); tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("memory %d: err %v, want %v", tc.memory, err, tc.wantErr)
				}
				return
			}
			g := e.sessionRequest(goRT, nil, ExecRequest{Code: "package main", MemoryBytes: tc.memory}, timeout)
			if g.TimeoutMS != tc.timeoutMS || g.CompileTimeoutMS != tc.compileMS || g.MemoryBytes != tc.memoryOut {
				t.Fatalf("guest request timeout %d compile %d memory %d, want %d %d %d",
					g.TimeoutMS, g.CompileTimeoutMS, g.MemoryBytes, tc.timeoutMS, tc.compileMS, tc.memoryOut)
			}
			// The host's backstop is the call's timeout plus slack, the
			// compile included.
			if got, want := agent.RunBudget(g), time.Duration(tc.timeoutMS)*time.Millisecond+agent.RunSlack; got != want {
				t.Fatalf("host backstop %v, want %v", got, want)
			}
		})
	}
	if got := agent.RunBudget(&guest.Request{}); got != guest.DefaultTimeoutMS*time.Millisecond+agent.RunSlack {
		t.Fatalf("backstop of a request without a timeout: %v", got)
	}
}

// Stateless calls refuse bad memory limits before taking a sandbox.
func TestStatelessRefusesNegativeMemory(t *testing.T) {
	t.Parallel()
	rts, err := LoadRuntimes(configs.Runtimes, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &Executor{rt: rts, cfg: Config{MemoryBytes: 256 << 20, DefaultTimeout: time.Second, MaxTimeout: time.Minute}}
	_, err = e.ExecuteStateless(context.Background(), "k1", ExecRequest{Language: "python3", Code: "print(1)", MemoryBytes: -5})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err %v, want ErrInvalid", err)
	}
}
