package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// The runtimes' fast paths (one JVM for Java, direct compile and link for
// Go) keep the toolchains' rules and outcomes, and every result splits its
// time into compile_ms and run_ms.
func TestCompiledFastPathsKeepTheRules(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0; c.HomeBytes = 256 << 20; c.MemoryBytes = 768 << 20 })
	tests := []struct {
		name, lang, code string
		status           Status
		exit             int
		stdout           string
		stderrHas        string
		stderrNot        string
	}{
		{name: "java hello splits compile and run", lang: "java", code: `public class Main { public static void main(String[] a) { System.out.println("hello"); } }`, status: StatusOK, stdout: "hello\n"},
		{name: "java public class in the wrong file", lang: "java", code: `public class Foo { public static void main(String[] a) { } }`, status: StatusCompileError, exit: 1, stderrHas: "should be declared in a file named Foo.java"},
		{name: "java syntax error", lang: "java", code: `public class Main { void f() { int x = } }`, status: StatusCompileError, exit: 1, stderrHas: "error:"},
		{name: "java without a Main class", lang: "java", code: `class Foo { public static void main(String[] a) { } }`, status: StatusError, exit: 1, stderrHas: "Could not find or load main class Main"},
		{name: "java without a main method", lang: "java", code: `public class Main { }`, status: StatusError, exit: 1, stderrHas: "Main method not found in class Main"},
		{name: "java uncaught exception", lang: "java", code: `public class Main { public static void main(String[] a) { throw new IllegalStateException("boom"); } }`, status: StatusError, exit: 1, stderrHas: "Exception in thread \"main\" java.lang.IllegalStateException: boom\n\tat Main.main(Main.java:1)\n", stderrNot: "sandboxapi.Run"},
		{name: "java helper classes and a warning-free run", lang: "java", code: "import java.util.*;\npublic class Main { static class H { int v = 3; } public static void main(String[] a) { List l = new ArrayList(); l.add(new H().v); System.out.println(l); } }", status: StatusOK, stdout: "[3]\n"},
		{name: "go standard library only", lang: "go", code: "package main\nimport (\"fmt\"; \"strings\"; \"sort\")\nfunc main() { s := []string{\"b\", \"a\"}; sort.Strings(s); fmt.Println(strings.Join(s, \"\")) }", status: StatusOK, stdout: "ab\n"},
		{name: "go compile error", lang: "go", code: "package main\nfunc main() { undefined() }", status: StatusCompileError, exit: 1, stderrHas: "undefined: undefined"},
		{name: "go internal package refused", lang: "go", code: "package main\nimport \"internal/abi\"\nfunc main() { _ = abi.FuncTabBucketSize }", status: StatusCompileError, exit: 1, stderrHas: "use of internal package internal/abi not allowed"},
		{name: "go package from GOPATH goes to go build", lang: "go", code: "package main\nimport (\"fmt\"; \"greet\")\nfunc main() { fmt.Println(greet.Hi()) }", status: StatusOK, stdout: "hi\n"},
		{name: "cpp bits/stdc++.h", lang: "cpp", code: "#include <bits/stdc++.h>\nint main(){std::vector<int> v{3,1,2}; std::sort(v.begin(), v.end()); std::cout<<v[0]<<v[2]<<std::endl;}", status: StatusOK, stdout: "13\n"},
		{name: "cpp with a macro before the header", lang: "cpp", code: "#define N 4\n#include <iostream>\nint main(){std::cout<<N<<std::endl;}", status: StatusOK, stdout: "4\n"},
	}
	sessions := map[string]string{}
	for _, lang := range []string{"java", "go", "cpp"} {
		s := mustSession(t, e, lang)
		defer e.DeleteSession(context.Background(), "k1", s.ID)
		sessions[lang] = s.ID
	}
	// A package in the home's GOPATH, for the go build fallback.
	if r := run(t, e, sessions["go"], "package main\nimport \"os\"\nfunc main() { os.MkdirAll(\"/home/sandbox/go/src/greet\", 0o755); os.WriteFile(\"/home/sandbox/go/src/greet/greet.go\", []byte(\"package greet\\nfunc Hi() string { return \\\"hi\\\" }\\n\"), 0o644) }", time.Minute); r.Status != StatusOK {
		t.Fatalf("writing the GOPATH package: %+v", r)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, e, sessions[tc.lang], tc.code, time.Minute)
			if r.Status != tc.status || r.ExitCode != tc.exit || r.Stdout != tc.stdout ||
				!strings.Contains(r.Stderr, tc.stderrHas) || (tc.stderrNot != "" && strings.Contains(r.Stderr, tc.stderrNot)) {
				t.Fatalf("got %+v", r)
			}
			if r.DurationMS != r.CompileMS+r.RunMS || r.CompileMS <= 0 {
				t.Fatalf("duration %d, compile %d, run %d", r.DurationMS, r.CompileMS, r.RunMS)
			}
			if tc.status == StatusCompileError && r.RunMS != 0 {
				t.Fatalf("a compile error with run time %d ms", r.RunMS)
			}
			if tc.status == StatusOK && r.RunMS <= 0 {
				t.Fatalf("run time %d ms", r.RunMS)
			}
		})
	}
	// Stateless calls split the time too.
	r, err := e.ExecuteStateless(context.Background(), "k1", sandbox.ExecRequest{Language: "java", Code: tests[0].code, Timeout: time.Minute})
	if err != nil || r.Status != StatusOK || r.CompileMS <= 0 || r.RunMS <= 0 || r.DurationMS != r.CompileMS+r.RunMS {
		t.Fatalf("stateless java: %+v %v", r, err)
	}
}

// Java compiles inside its run step and says so; Go's object file is a
// name the work folder reserves.
func TestRuntimeTableFastPaths(t *testing.T) {
	t.Parallel()
	rt, err := LoadRuntimes(configs.Runtimes, "")
	if err != nil {
		t.Fatal(err)
	}
	java, _ := rt.Lookup("java")
	if !java.InlineCompile || !java.Compiled || len(java.Compile) != 0 {
		t.Fatalf("java: %+v", java)
	}
	golang, _ := rt.Lookup("go")
	if names := reservedNames(golang); !names["main.a"] || !names["main"] || !names["main.go"] {
		t.Fatalf("go reserves %v", names)
	}
	for _, r := range rt.List() {
		if r.Name != "java" && r.InlineCompile {
			t.Errorf("%s compiles inline", r.Name)
		}
	}
}
