package host

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestSandboxIDsReadsOwnRoot checks that SandboxIDs lists the sandboxes
// of its own runsc root from runsc's state file names, and
// nothing else in the folder.
func TestSandboxIDsReadsOwnRoot(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{
		"aaaa_sandbox:aaaa.state", // a sandbox
		"aaaa_sandbox:aaaa.lock",
		"bbbb_sandbox:bbbb.state",               // another
		"cccc_sandbox:bbbb.state",               // a second container in bbbb: not a sandbox
		"dddd.state", "null-netns", "runsc.log", // not state files of runsc's form
	} {
		if err := os.WriteFile(filepath.Join(root, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := (&Runsc{Root: root}).SandboxIDs()
	slices.Sort(got)
	if want := []string{"aaaa", "bbbb"}; !slices.Equal(got, want) {
		t.Errorf("sandboxIDs = %v, want %v", got, want)
	}
	if ids := (&Runsc{Root: filepath.Join(root, "missing")}).SandboxIDs(); len(ids) != 0 {
		t.Errorf("a missing root lists %v", ids)
	}
}
