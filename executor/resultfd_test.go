package executor

import (
	"testing"
	"time"
)

// A run through `runsc exec` (a sandbox without an agent, e.g. adopted
// after a restart) reads the guest's result from fd 3. The user's program
// must not inherit that descriptor: whatever it wrote there was read as
// part of the result, which broke it (the call failed with "no result from
// the sandbox", a server error).
func TestExecPathResultFDNotInherited(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	s := mustSession(t, e, "bash")
	e.agents.Drop(s.ID) // the exec path
	r := run(t, e, s.ID, `ls /proc/self/fd; echo '{"status":"ok","exit_code":0,"duration_ms":1,"x":' >&3 2>/dev/null; exit 7`, 30*time.Second)
	if r.Status != StatusError || r.ExitCode != 7 {
		t.Fatalf("the program reached the result pipe: %+v", r)
	}
}
