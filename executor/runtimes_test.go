package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// langCase is one language's hello world, stdin echo, non-zero exit and
// (for compiled languages) a compile error.
type langCase struct {
	lang      string
	hello     string
	echo      string // reads one line of stdin and prints it upper-cased
	exit3     string
	badSyntax string
}

var langCases = []langCase{
	{lang: "python3", hello: `print("hello")`, echo: `import sys; print(sys.stdin.readline().strip().upper())`, exit3: `import sys; sys.exit(3)`},
	{lang: "javascript", hello: `console.log("hello")`, echo: `const l=require("fs").readFileSync(0,"utf8").split("\n")[0]; console.log(l.toUpperCase())`, exit3: `process.exit(3)`},
	{lang: "typescript", hello: `const m: string = "hello"; console.log(m)`, echo: `import * as fs from "fs"; const l: string = fs.readFileSync(0, "utf8").split("\n")[0]; console.log(l.toUpperCase())`, exit3: `process.exit(3)`, badSyntax: `const x: number = ;`},
	{lang: "go", hello: "package main\nimport \"fmt\"\nfunc main() { fmt.Println(\"hello\") }", echo: "package main\nimport (\"bufio\"; \"fmt\"; \"os\"; \"strings\")\nfunc main() { s, _ := bufio.NewReader(os.Stdin).ReadString('\\n'); fmt.Println(strings.ToUpper(strings.TrimSpace(s))) }", exit3: "package main\nimport \"os\"\nfunc main() { os.Exit(3) }", badSyntax: "package main\nfunc main() { undefined() }"},
	{lang: "java", hello: `public class Main { public static void main(String[] a) { System.out.println("hello"); } }`, echo: `import java.util.Scanner; public class Main { public static void main(String[] a) { System.out.println(new Scanner(System.in).nextLine().toUpperCase()); } }`, exit3: `public class Main { public static void main(String[] a) { System.exit(3); } }`, badSyntax: `public class Main { void f() { int x = } }`},
	{lang: "c", hello: "#include <stdio.h>\nint main(){puts(\"hello\");return 0;}", echo: "#include <stdio.h>\n#include <ctype.h>\nint main(){char b[256]; if(!fgets(b,256,stdin)) return 1; for(char*p=b;*p&&*p!='\\n';p++) putchar(toupper(*p)); putchar('\\n'); return 0;}", exit3: "int main(){return 3;}", badSyntax: "int main(){ return x; }"},
	{lang: "cpp", hello: "#include <iostream>\nint main(){std::cout<<\"hello\"<<std::endl;}", echo: "#include <iostream>\n#include <string>\n#include <algorithm>\nint main(){std::string s; std::getline(std::cin,s); std::transform(s.begin(),s.end(),s.begin(),::toupper); std::cout<<s<<std::endl;}", exit3: "int main(){return 3;}", badSyntax: "int main(){ std::vector<int> v; }"},
	{lang: "bash", hello: `echo hello`, echo: `read l; echo "${l^^}"`, exit3: `exit 3`},
}

func TestEveryLanguageInASession(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0; c.HomeBytes = 256 << 20; c.MemoryBytes = 768 << 20 })
	for _, tc := range langCases {
		t.Run(tc.lang, func(t *testing.T) {
			s := mustSession(t, e, tc.lang)
			defer e.DeleteSession(context.Background(), "k1", s.ID)
			r := run(t, e, s.ID, tc.hello, 60*time.Second)
			if r.Status != StatusOK || r.Stdout != "hello\n" {
				t.Fatalf("hello: %+v", r)
			}
			res, err := e.Execute(context.Background(), "k1", s.ID, ExecRequest{Code: tc.echo, Stdin: []byte("shout\n"), Timeout: 60 * time.Second})
			if err != nil || res.Status != StatusOK || res.Stdout != "SHOUT\n" {
				t.Fatalf("stdin: %+v %v", res, err)
			}
			r = run(t, e, s.ID, tc.exit3, 60*time.Second)
			if r.Status != StatusError || r.ExitCode != 3 {
				t.Fatalf("exit 3: %+v", r)
			}
			if tc.badSyntax != "" {
				r = run(t, e, s.ID, tc.badSyntax, 60*time.Second)
				if r.Status != StatusCompileError || r.Stderr == "" || r.Stdout != "" {
					t.Fatalf("compile error: %+v", r)
				}
			}
		})
	}
}

func TestLanguageAliases(t *testing.T) {
	t.Parallel()
	rt, err := LoadRuntimes(configs.Runtimes, "")
	if err != nil {
		t.Fatal(err)
	}
	for alias, want := range map[string]string{"python": "python3", "node": "javascript", "js": "javascript", "ts": "typescript", "PYTHON3": "python3", "c++": "cpp"} {
		r, err := rt.Lookup(alias)
		if err != nil || r.Name != want {
			t.Errorf("%s -> %v %v, want %s", alias, r, err, want)
		}
	}
	if _, err := rt.Lookup("cobol"); err == nil {
		t.Error("cobol accepted")
	}
}

func TestRuntimeVersionsComeFromTheRootfs(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	for _, r := range e.RuntimeList() {
		if r.Version == "" {
			t.Errorf("%s has no version", r.Language)
		}
	}
	s := mustSession(t, e, "python3")
	got := run(t, e, s.ID, "import platform; print(platform.python_version())", 0)
	var want string
	for _, r := range e.RuntimeList() {
		if r.Language == "python3" {
			want = r.Version
		}
	}
	if strings.TrimSpace(got.Stdout) != want {
		t.Fatalf("python reports %q, runtime list says %q", got.Stdout, want)
	}
}

func TestStatelessRunsInAFreshSandboxEachTime(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 2 })
	ctx := context.Background()
	req := sandbox.ExecRequest{Language: "python", Code: "import os\nprint(open('data.txt').read(), os.path.exists('/home/sandbox/mark'))\nopen('/home/sandbox/mark','w').write('x')",
		Files: []sandbox.File{{Path: "data.txt", Content: []byte("from file")}}}
	for i := 0; i < 2; i++ {
		r, err := e.ExecuteStateless(ctx, "k1", req)
		if err != nil || r.Status != StatusOK || r.Stdout != "from file False\n" {
			t.Fatalf("call %d: %+v %v", i, r, err)
		}
	}
	for _, bad := range []string{"../x", "/etc/passwd", "a/../../b", ""} {
		if _, err := e.ExecuteStateless(ctx, "k1", sandbox.ExecRequest{Language: "bash", Code: "true", Files: []sandbox.File{{Path: bad}}}); err == nil {
			t.Errorf("file path %q accepted", bad)
		}
	}
	// The warm pool refills, and every stateless sandbox is gone afterwards.
	deadline := time.Now().Add(30 * time.Second)
	for e.Pool().Ready() < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if e.Pool().Ready() != 2 {
		t.Fatalf("warm pool holds %d, want 2", e.Pool().Ready())
	}
	cs, err := e.runsc.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) > 3 { // two warm, at most one being prepared
		t.Fatalf("%d sandboxes alive after stateless calls", len(cs))
	}
}

// Packages in the home's node_modules load with require() and with ES
// module import, from JavaScript and TypeScript alike.
func TestNodePackagesFromTheHome(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	js := mustSession(t, e, "javascript")
	run(t, e, js.ID, `const fs=require("fs"); fs.mkdirSync("/home/sandbox/node_modules/greet",{recursive:true}); fs.writeFileSync("/home/sandbox/node_modules/greet/index.js", 'module.exports = (n) => "hi " + n;'); fs.writeFileSync("/home/sandbox/node_modules/greet/package.json", '{"name":"greet","version":"1.0.0","main":"index.js"}')`, 0)
	for _, code := range []string{`console.log(require("greet")("cjs"))`, `import greet from "greet"; console.log(greet("esm"))`} {
		r := run(t, e, js.ID, code, 30*time.Second)
		if r.Status != StatusOK || !strings.HasPrefix(r.Stdout, "hi ") {
			t.Fatalf("%s: %+v", code, r)
		}
	}
}

// Compiled languages: a session's later calls are not slower than its
// first (no cache that grows per call, no cold cache copied in), and no
// compile cache lands in the home, where it would eat the disk limit.
func TestCompileCachesDoNotSlowLaterCalls(t *testing.T) {
	// Serial (no t.Parallel): compares the durations of a session's calls; other tests' load would break that.
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0; c.HomeBytes = 256 << 20; c.MemoryBytes = 768 << 20 })
	for _, tc := range langCases {
		if tc.badSyntax == "" || tc.lang == "typescript" {
			continue // interpreted (esbuild bundles in milliseconds)
		}
		t.Run(tc.lang, func(t *testing.T) {
			s := mustSession(t, e, tc.lang)
			defer e.DeleteSession(context.Background(), "k1", s.ID)
			var took []time.Duration
			for i := 0; i < 3; i++ {
				start := time.Now()
				if r := run(t, e, s.ID, tc.hello, 60*time.Second); r.Status != StatusOK || r.Stdout != "hello\n" {
					t.Fatalf("call %d: %+v", i+1, r)
				}
				took = append(took, time.Since(start))
			}
			t.Logf("%s: calls took %v", tc.lang, took)
			// Generous against scheduling noise; a per-call cache copy or a
			// cache that never hits would cost far more.
			for i, d := range took[1:] {
				if d > 2*took[0]+time.Second {
					t.Errorf("call %d took %v, the first %v", i+2, d, took[0])
				}
			}
			l, err := e.files.List(context.Background(), "k1", s.ID, "/home/sandbox")
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range l.Entries {
				if strings.Contains(f.Name, "cache") || f.Name == ".gradle" || f.Name == ".m2" {
					t.Errorf("a compile cache in the home: %+v", f)
				}
			}
		})
	}
}
