package cli

import (
	"strings"
	"testing"
)

// TestMirrorUnknownEcosystem: an ecosystem the mirror does not hold is
// named as such, with the ones it does, not called a bad package spec;
// the known names and their aliases still list.
func TestMirrorUnknownEcosystem(t *testing.T) {
	dd := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{name: "list cargo", args: []string{"mirror", "list", "--ecosystem", "cargo"}},
		{name: "list manager alias", args: []string{"mirror", "list", "--manager", "Maven"}},
		{name: "list empty-ish", args: []string{"mirror", "list", "--ecosystem", " "}},
		{name: "list hostile", args: []string{"mirror", "list", "--ecosystem", "x\x1b[2J\n" + strings.Repeat("a", 500)}},
		{name: "remove cargo", args: []string{"mirror", "remove", "cargo", "serde"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append(tc.args, "--data-dir", dd)...)
			if code != 1 || out != "" {
				t.Fatalf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			if !strings.Contains(errOut, "unknown ecosystem") || !strings.Contains(errOut, "pip") || !strings.Contains(errOut, "npm") ||
				strings.Contains(errOut, "bad package spec") {
				t.Fatalf("stderr %q: want it to name an unknown ecosystem and list pip and npm", errOut)
			}
			if strings.ContainsAny(errOut[:len(errOut)-1], "\x1b\n") || len(errOut) > 300 {
				t.Fatalf("stderr echoes the raw name: %q", errOut)
			}
		})
	}
	for _, eco := range []string{"pip", "pypi", "PyPI", "python", "npm", "node"} {
		if code, _, errOut := runCLI(t, "mirror", "list", "--ecosystem", eco, "--data-dir", dd); code != 0 {
			t.Errorf("mirror list --ecosystem %s: exit %d %s", eco, code, errOut)
		}
	}
}
