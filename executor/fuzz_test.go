package executor

import (
	"testing"

	"github.com/sandboxapi/sandboxapi/configs"
)

// FuzzLoadRuntimes feeds arbitrary YAML to the runtimes parser: a table
// that loads resolves every language it lists, or an error comes back;
// never a panic.
func FuzzLoadRuntimes(f *testing.F) {
	f.Add(string(configs.Runtimes))
	f.Add("version: v1\nruntimes: {}\n")
	f.Add("version: v1\nruntimes:\n  x:\n    file: ../../etc/passwd\n    run: [\"{file}\"]\n")
	f.Add("version: v1\nruntimes:\n  x:\n    aliases: [x, x]\n")
	f.Add("version: v2\n")
	f.Add("runtimes: [1]\n")
	f.Fuzz(func(t *testing.T, data string) {
		rt, err := LoadRuntimes([]byte(data), "")
		if err != nil {
			return
		}
		if rt == nil {
			t.Fatal("nil runtimes without an error")
		}
	})
}
