package app

import (
	"testing"

	"github.com/sandboxapi/sandboxapi/configs"
)

// FuzzParse feeds arbitrary YAML to the server config parser
// (ParseConfig): it returns a config that validates, or an error; never a
// panic.
func FuzzParse(f *testing.F) {
	f.Add(string(configs.Server))
	f.Add("version: v1\n")
	f.Add("version: v1\nexecutor:\n  runsc: /nonexistent\n")
	f.Add("version: v1\nlisten: \":-1\"\n")
	f.Add("version: v1\nunknown_field: 1\n")
	f.Add("version: v2\n")
	f.Add("version: v1\nexecutor: {memory: 1Zb, home_size: -5MiB}\n")
	f.Add("a: &a [*a]\n")
	f.Add("version: v1\n---\nversion: v1\n")
	f.Fuzz(func(t *testing.T, data string) {
		c, err := ParseConfig([]byte(data), "fuzz.yaml")
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that does not validate: %v", err)
		}
	})
}
