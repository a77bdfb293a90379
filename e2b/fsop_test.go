package e2b

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runFsop runs fsop.py as the sandbox does (the script on stdin, its
// arguments in SBX_E2B_FS), here on the host over a temporary folder, to
// test its own logic; TestE2BSDK runs it in real sandboxes.
func runFsop(t *testing.T, a fsArgs) fsReply {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	args, _ := json.Marshal(a)
	cmd := exec.Command(py, "-")
	cmd.Stdin = strings.NewReader(fsopScript)
	cmd.Env = []string{fsEnv + "=" + string(args)}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fsop %+v: %v", a, err)
	}
	var r fsReply
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("fsop %+v answered %q: %v", a, out, err)
	}
	return r
}

// TestFsopScript: each operation, and symlinks neither followed by a
// listing nor by a remove (a link to a folder outside goes, the folder
// stays).
func TestFsopScript(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep.txt")
	if err := os.WriteFile(keep, []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := func(p ...string) string { return filepath.Join(append([]string{home}, p...)...) }

	if r := runFsop(t, fsArgs{Op: "mkdir", Path: j("a", "b")}); r.Err != "" || r.Entry == nil || r.Entry.Type != "dir" {
		t.Fatalf("mkdir: %+v", r)
	}
	if r := runFsop(t, fsArgs{Op: "mkdir", Path: j("a", "b")}); r.Err != "exists" {
		t.Fatalf("mkdir again: %+v", r)
	}
	if err := os.WriteFile(j("a", "f.txt"), []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runFsop(t, fsArgs{Op: "mkdir", Path: j("a", "f.txt")}); r.Err != "not_dir" {
		t.Fatalf("mkdir over a file: %+v", r)
	}
	if r := runFsop(t, fsArgs{Op: "stat", Path: j("a", "f.txt")}); r.Err != "" || r.Entry.Size != 3 || r.Entry.Type != "file" || r.Entry.Perm != "-rw-r--r--" {
		t.Fatalf("stat: %+v", r.Entry)
	}
	if r := runFsop(t, fsArgs{Op: "stat", Path: j("nope")}); r.Err != "not_found" {
		t.Fatalf("stat of a missing file: %+v", r)
	}
	if err := os.Symlink(outside, j("a", "link")); err != nil {
		t.Fatal(err)
	}
	r := runFsop(t, fsArgs{Op: "list", Path: home, Depth: 5})
	var paths []string
	for _, e := range r.Entries {
		paths = append(paths, strings.TrimPrefix(e.Path, home))
		if strings.HasSuffix(e.Path, "/link") && (e.Type != "symlink" || e.Target == nil || *e.Target != outside) {
			t.Errorf("the link: %+v", e)
		}
	}
	if strings.Join(paths, " ") != "/a /a/b /a/f.txt /a/link" {
		t.Fatalf("list (a link is not followed): %v", paths)
	}
	if r := runFsop(t, fsArgs{Op: "list", Path: home, Depth: 1}); len(r.Entries) != 1 {
		t.Fatalf("depth 1: %+v", r.Entries)
	}
	if r := runFsop(t, fsArgs{Op: "list", Path: j("a", "f.txt"), Depth: 1}); r.Err != "not_dir" {
		t.Fatalf("list of a file: %+v", r)
	}
	if r := runFsop(t, fsArgs{Op: "move", Path: j("a", "f.txt"), Dest: j("new", "g.txt")}); r.Err != "" || r.Entry.Path != j("new", "g.txt") {
		t.Fatalf("move: %+v", r)
	}
	if r := runFsop(t, fsArgs{Op: "move", Path: j("gone"), Dest: j("x")}); r.Err != "not_found" {
		t.Fatalf("move of a missing file: %+v", r)
	}
	if r := runFsop(t, fsArgs{Op: "remove", Path: j("a", "link")}); r.Err != "" {
		t.Fatalf("remove the link: %+v", r)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("removing a link removed its target's content: %v", err)
	}
	if r := runFsop(t, fsArgs{Op: "remove", Path: j("a")}); r.Err != "" {
		t.Fatalf("remove a folder: %+v", r)
	}
	if _, err := os.Stat(j("a")); !os.IsNotExist(err) {
		t.Fatalf("folder still there: %v", err)
	}
	if r := runFsop(t, fsArgs{Op: "remove", Path: j("a")}); r.Err != "not_found" {
		t.Fatalf("remove again: %+v", r)
	}
	if r := runFsop(t, fsArgs{Op: "chmod", Path: home}); r.Err != "invalid" {
		t.Fatalf("unknown op: %+v", r)
	}
}
