package e2e

import (
	"strings"
	"testing"
)

// Over HTTP, an execute splits its time: compile_ms for the compile step
// (all of it for a compile error), run_ms for the program, duration_ms
// their sum; interpreted languages have no compile time.
func TestExecuteReportsCompileAndRunTime(t *testing.T) {
	s := startServer(t, "executor:\n  warm_pool: 1\n  home_size: 64M\n  memory_mb: 768\n")
	key := s.key("MEGA")
	tests := []struct {
		name, lang, code, status string
		compiled                 bool
	}{
		{name: "go hello", lang: "go", code: "package main\nimport \"fmt\"\nfunc main() { fmt.Println(\"hello\") }", status: "ok", compiled: true},
		{name: "java compile error", lang: "java", code: `public class Main { void f() { int x = } }`, status: "compile_error", compiled: true},
		{name: "java hello", lang: "java", code: `public class Main { public static void main(String[] a) { System.out.println("hello"); } }`, status: "ok", compiled: true},
		{name: "python hello", lang: "python3", code: `print("hello")`, status: "ok"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do("POST", "/v1/execute", key, map[string]any{"language": tc.lang, "code": tc.code, "timeout": 60})
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			m := r.json(t)
			c, okc := m["compile_ms"].(float64)
			run, okr := m["run_ms"].(float64)
			d, _ := m["duration_ms"].(float64)
			if m["status"] != tc.status || !okc || !okr || d != c+run {
				t.Fatalf("reply %s", r.body)
			}
			if tc.status == "ok" && (!strings.HasPrefix(m["stdout"].(string), "hello") || run <= 0) {
				t.Fatalf("reply %s", r.body)
			}
			if tc.compiled != (c > 0) || (tc.status == "compile_error" && run != 0) {
				t.Fatalf("compile_ms %v, run_ms %v for %s: %s", c, run, tc.name, r.body)
			}
		})
	}
}
