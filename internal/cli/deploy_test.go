package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// commandLines returns the sandboxapi command lines of the systemd units in
// configs/ and of the shell blocks in docs/operations.md, each with where
// it came from.
func commandLines(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	units, _ := filepath.Glob("../../configs/sandboxapi*.service")
	if len(units) < 2 {
		t.Fatalf("want the all-in-one unit and at least one more in configs/, found %v", units)
	}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if _, cmd, ok := strings.Cut(line, "/usr/local/bin/sandboxapi "); ok && strings.HasPrefix(line, "Exec") {
				out[cmd] = filepath.Base(u) + ":" + itoa(i+1)
			}
		}
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(doc))
	inBlock, n := false, 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			if cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "sandboxapi "); ok {
				cmd, _, _ = strings.Cut(cmd, "#")
				out[strings.TrimSpace(cmd)] = "operations.md:" + itoa(n)
			}
		}
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

var commandWord = regexp.MustCompile(`^[a-z]+$`)

// TestDeploymentCommandsExist checks that every sandboxapi command the
// systemd units and the operations guide run is a real command, with
// flags it takes, so the documents cannot drift from the CLI.
func TestDeploymentCommandsExist(t *testing.T) {
	for line, where := range commandLines(t) {
		if err := checkCommandLine(t, line); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
}

// TestCheckCommandLine shows the check above refuses what does not exist.
func TestCheckCommandLine(t *testing.T) {
	tests := []struct {
		line string
		ok   bool
	}{
		{"serve --config /etc/sandboxapi/sandboxapi.yaml", true},
		{"mirror add pip requests==2.32.3", true},
		{"mirror osv import /var/lib/osv", true},
		{"keys revoke key_abc", true},
		{"mirror frobnicate", false},
		{"keys rotate key_abc", false},
		{"serve --no-such-flag", false},
		{"frobnicate", false},
	}
	for _, tt := range tests {
		if err := checkCommandLine(t, tt.line); (err == nil) != tt.ok {
			t.Errorf("checkCommandLine(%q) = %v, want ok=%v", tt.line, err, tt.ok)
		}
	}
}

// checkCommandLine checks that line (the words after "sandboxapi") names a
// real command, down to a leaf, and only flags that command takes.
func checkCommandLine(t *testing.T, line string) error {
	words := strings.Fields(line)
	var path []string
	for _, w := range words {
		if !commandWord.MatchString(w) {
			break
		}
		path = append(path, w)
	}
	words0 := len(path)
	help := ""
	for len(path) > 0 {
		var out, errw bytes.Buffer
		args := append(append([]string{"sandboxapi"}, path...), "--help")
		if Run(t.Context(), args, &out, &errw) == 0 && strings.Contains(out.String(), "sandboxapi "+strings.Join(path, " ")+" - ") {
			help = out.String()
			break
		}
		path = path[:len(path)-1]
	}
	if help == "" {
		return fmt.Errorf("%q is not a sandboxapi command", line)
	}
	// Words past the matched command are its arguments only when it is a
	// leaf: "mirror frobnicate" must not pass as "mirror".
	if len(path) < words0 && strings.Contains(help, "COMMANDS:") {
		return fmt.Errorf("%q: sandboxapi %s has no subcommand %q", line, strings.Join(path, " "), words[len(path)])
	}
	for _, w := range words {
		if strings.HasPrefix(w, "--") {
			flag, _, _ := strings.Cut(w, "=")
			if !strings.Contains(help, flag+" ") && !strings.Contains(help, flag+"\t") {
				return fmt.Errorf("sandboxapi %s takes no %s", strings.Join(path, " "), flag)
			}
		}
	}
	return nil
}

// TestReadmeLinksOperations checks the README points at the guide and the
// config reference.
func TestReadmeLinksOperations(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Operations", "docs/operations.md", "docs/config.md"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}
