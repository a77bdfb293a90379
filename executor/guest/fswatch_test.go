package guest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentWatch: a watch stream over the agent's serve loop reports
// creates, writes and removes (in a new subfolder too, recursive), never
// what happens behind a symlink, refuses a symlinked folder, stops on
// cancel, and ends with an empty frame when the folder goes.
func TestAgentWatch(t *testing.T) {
	r, w, home := agentPair(t)
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(home, "w", "out")); err != nil {
		t.Fatal(err)
	}
	user := func(op FileOpen) FileOpen { op.UID, op.GID = 1000, 1000; return op }
	openStream(t, w, user(FileOpen{Stream: 7, Op: "watch", Path: "w/out"}))
	if res := resultOf(t, r, 7); res.Code != CodeSymlink {
		t.Fatalf("watch of a link: %+v", res)
	}
	openStream(t, w, user(FileOpen{Stream: 8, Op: "watch", Path: "w", FSArgs: FSArgs{Recursive: true}}))
	if res := resultOf(t, r, 8); res.Code != "" {
		t.Fatalf("watch: %+v", res)
	}
	_ = os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o644)
	_ = os.WriteFile(filepath.Join(home, "w", "a"), []byte("x"), 0o644)
	_ = os.Mkdir(filepath.Join(home, "w", "sub"), 0o755)
	want := map[string]bool{"create a": false, "write a": false, "create sub": false, "create sub/b": false, "remove a": false}
	var seen []string
	var buf string
	for step := 0; step < 200; step++ {
		missing := 0
		for _, ok := range want {
			if !ok {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		typ, data := nextFrame(t, r, 8, false)
		if typ != FrameFileChunk || len(data) == 0 {
			t.Fatalf("frame %c %q in a watch (seen %v)", typ, data, seen)
		}
		buf += string(data)
		for {
			i := strings.IndexByte(buf, '\n')
			if i < 0 {
				break
			}
			var ev WatchEvent
			if err := json.Unmarshal([]byte(buf[:i]), &ev); err != nil {
				t.Fatal(err)
			}
			buf = buf[i+1:]
			k := ev.Op + " " + ev.Name
			seen = append(seen, k)
			if strings.Contains(ev.Name, "secret") {
				t.Fatalf("an event behind a link: %q", k)
			}
			if _, ok := want[k]; ok {
				want[k] = true
			}
			switch k {
			case "create sub":
				_ = os.WriteFile(filepath.Join(home, "w", "sub", "b"), nil, 0o644)
			case "create sub/b":
				_ = os.Remove(filepath.Join(home, "w", "a"))
			}
		}
	}
	for k, ok := range want {
		if !ok {
			t.Errorf("no %q (seen %v)", k, seen)
		}
	}
	// The folder goes: the stream ends with an empty frame.
	if err := os.RemoveAll(filepath.Join(home, "w")); err != nil {
		t.Fatal(err)
	}
	for {
		typ, data := nextFrame(t, r, 8, false)
		if typ != FrameFileChunk {
			t.Fatalf("frame %c at the end of a watch", typ)
		}
		if len(data) == 0 {
			break
		}
	}
}
