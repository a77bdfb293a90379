package installer

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
	"os/exec"
	"sync"
	"testing"
)

// stripServer runs install.py's strip_manifest on each line of its input
// (a base64 package.json) in one long-lived host python, answering one
// JSON line each: ok, what was removed, and the file after.
const stripServer = `import sys, os, json, base64, tempfile
sys.path.insert(0, sys.argv[1])
import install
d = tempfile.mkdtemp()
p = os.path.join(d, "package.json")
for line in sys.stdin:
    with open(p, "wb") as f:
        f.write(base64.b64decode(line))
    try:
        removed = install.strip_manifest(p)
        out = open(p, "rb").read()
        print(json.dumps({"ok": True, "removed": removed, "out": base64.b64encode(out).decode()}), flush=True)
    except SystemExit:
        print(json.dumps({"ok": False}), flush=True)
`

// FuzzStripManifest: whatever package.json the mirror admits (valid JSON),
// extraction either refuses it or leaves one without lifecycle scripts and
// dependency fields; one with nothing to strip stays byte for byte.
func FuzzStripManifest(f *testing.F) {
	py, dir := hostPython(f)
	cmd := exec.Command(py, "-I", "-B", "-c", stripServer, dir)
	in, _ := cmd.StdinPipe()
	outPipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	out := bufio.NewReader(outPipe)
	var mu sync.Mutex
	for _, s := range []string{`{"name":"a","scripts":{"postinstall":"x","test":"y"},"dependencies":{"b":"1"}}`, `{"name":"a"}`,
		`[1]`, `{"scripts":"install"}`, `{"dependencies":{},"dependencies":null}`, `{"a":"\u2028","hasInstallScript":true}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, manifest []byte) {
		if !json.Valid(manifest) || len(manifest) > 1<<16 {
			return // the mirror refuses it at admission
		}
		mu.Lock()
		defer mu.Unlock()
		if _, err := io.WriteString(in, base64.StdEncoding.EncodeToString(manifest)+"\n"); err != nil {
			t.Fatal(err)
		}
		line, err := out.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			OK      bool
			Removed []string
			Out     []byte
		}
		if err := json.Unmarshal(line, &res); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if !res.OK {
			var m map[string]json.RawMessage
			if json.Unmarshal(manifest, &m) == nil && m != nil {
				// Go reads an object; Python refused it: only nesting too
				// deep for Python is a reason.
				t.Logf("refused an object: %q", manifest)
			}
			return
		}
		if len(res.Removed) == 0 {
			if string(res.Out) != string(manifest) {
				t.Fatalf("nothing removed but the file changed: %q -> %q", manifest, res.Out)
			}
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(res.Out, &m); err != nil {
			if len(res.Removed) > 0 {
				t.Fatalf("rewritten manifest is not a JSON object: %q: %v", res.Out, err)
			}
			return
		}
		for _, f := range []string{"dependencies", "optionalDependencies", "peerDependencies", "peerDependenciesMeta", "bundleDependencies", "bundledDependencies", "gypfile", "_hasShrinkwrap", "hasInstallScript"} {
			if _, ok := m[f]; ok {
				t.Fatalf("%s survived: %q -> %q", f, manifest, res.Out)
			}
		}
		if raw, ok := m["scripts"]; ok {
			var scripts map[string]json.RawMessage
			if err := json.Unmarshal(raw, &scripts); err != nil {
				t.Fatalf("scripts not an object survived: %q", res.Out)
			}
			for _, s := range []string{"preinstall", "install", "postinstall", "preuninstall", "uninstall", "postuninstall"} {
				if _, ok := scripts[s]; ok {
					t.Fatalf("scripts.%s survived: %q -> %q", s, manifest, res.Out)
				}
			}
		}
	})
}
