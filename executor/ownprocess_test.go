package executor

import (
	"flag"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// ownProcessEnv names the test that a process started by inOwnProcess
// runs.
const ownProcessEnv = "SANDBOXAPI_TEST_OWN_PROCESS"

// inOwnProcess is for a test that counts what this whole process holds
// (its open files), which the tests running beside it change. In the
// process inOwnProcess started for t it reports true: the test runs its
// body there, alone. Elsewhere t runs in parallel with the other tests:
// it runs this test binary again for t alone (-test.run naming it, and
// the subtests the -run and -skip flags ask for), passes or fails with
// that run, and reports false.
func inOwnProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(ownProcessEnv) == t.Name() {
		return true
	}
	t.Parallel()
	run := "^" + regexp.QuoteMeta(t.Name()) + "$"
	if sub := subtestPattern(flag.Lookup("test.run").Value.String()); sub != "" {
		run += "/" + sub
	}
	args := []string{"-test.run=" + run, "-test.count=1", "-test.v"}
	if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
		args = append(args, "-test.skip="+f.Value.String())
	}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	if d, ok := t.Deadline(); ok {
		// The run times out (and says where it was) before this one does.
		left := time.Until(d)
		args = append(args, "-test.timeout="+(left-min(left/10, time.Minute)).String())
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), ownProcessEnv+"="+t.Name())
	start := time.Now()
	out, err := cmd.CombinedOutput()
	// Its lines marked, so that nothing reads them as this process's.
	t.Logf("run in a process of its own (%v, %s):\n%s", time.Since(start).Round(time.Millisecond), cmd, prefixLines(string(out), "| "))
	if err != nil {
		var failed []string
		for _, l := range strings.Split(string(out), "\n") {
			if s := strings.TrimSpace(l); strings.HasPrefix(s, "--- FAIL") || strings.Contains(s, "_test.go:") || strings.HasPrefix(s, "panic:") {
				failed = append(failed, l)
			}
		}
		t.Fatalf("in a process of its own: %v\n%s", err, strings.Join(failed, "\n"))
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		t.Fatalf("the run in a process of its own did not pass %s", t.Name())
	}
	return false
}

// subtestPattern is what a -run pattern asks of subtests: the part after
// its first slash outside brackets and parentheses, as the testing
// package splits it ("" for none).
func subtestPattern(pat string) string {
	depth := 0
	for i := 0; i < len(pat); i++ {
		switch pat[i] {
		case '\\':
			i++
		case '[', '(':
			depth++
		case ']', ')':
			depth--
		case '/':
			if depth <= 0 {
				return pat[i+1:]
			}
		}
	}
	return ""
}

func prefixLines(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
