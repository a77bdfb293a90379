package guest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fsHome makes a home with an outside folder beside it: outside/secret,
// home/a/b.txt, home/a/c/d.txt, home/f.txt, and links home/out (to
// outside), home/abs (to /etc), home/loop (to itself), home/a/up (to ..).
func fsHome(t *testing.T) (*host, string, string) {
	t.Helper()
	root := t.TempDir()
	home, outside := filepath.Join(root, "home"), filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(home, "a", "c"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, c := range map[string]string{
		filepath.Join(outside, "secret"):    "s",
		filepath.Join(home, "a", "b.txt"):   "b",
		filepath.Join(home, "a/c", "d.txt"): "d",
		filepath.Join(home, "f.txt"):        "f",
	} {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		filepath.Join(home, "out"):     outside,
		filepath.Join(home, "abs"):     "/etc",
		filepath.Join(home, "loop"):    filepath.Join(home, "loop"),
		filepath.Join(home, "a", "up"): "..",
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	h := newHost()
	h.homeRoot = home
	return h, home, outside
}

func fsCodeOf(err error) string {
	var ff *fileFail
	if errors.As(err, &ff) {
		return ff.code
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return ""
}

// fsCall runs op as the guest does: CleanPath first, then fsOp.
func fsCall(h *host, op, path string, args FSArgs, max int64) (FileResult, error) {
	comps, err := CleanPath(path)
	if err != nil {
		return FileResult{}, failf(CodeInvalid, "%v", err)
	}
	return h.fsOp(op, comps, args, max, asIs)
}

// TestFSOpsHostile: every operation against paths that climb out, name
// the outside absolutely, go through or onto symlinks (to outside, to
// /etc, loops), carry NUL or over-long names, or name the home itself,
// and afterwards the outside folder is untouched.
func TestFSOpsHostile(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 256)
	deep := strings.Repeat("d/", 2100)
	cases := []struct {
		name string
		op   string
		path string
		args FSArgs
		code string
	}{
		{"stat dotdot", "stat", "../outside/secret", FSArgs{}, CodeInvalid},
		{"stat dotdot inside", "stat", "a/../f.txt", FSArgs{}, CodeInvalid},
		{"stat absolute outside", "stat", "/etc/passwd", FSArgs{}, CodeInvalid},
		{"stat lookalike", "stat", "/home/sandboxes/x", FSArgs{}, CodeInvalid},
		{"stat NUL", "stat", "f.txt\x00x", FSArgs{}, CodeInvalid},
		{"stat long name", "stat", long, FSArgs{}, CodeInvalid},
		{"stat long path", "stat", deep, FSArgs{}, CodeInvalid},
		{"stat through link", "stat", "out/secret", FSArgs{}, CodeSymlink},
		{"stat through abs link", "stat", "abs/passwd", FSArgs{}, CodeSymlink},
		{"stat through loop", "stat", "loop/x", FSArgs{}, CodeSymlink},
		{"stat through up", "stat", "a/up/f.txt", FSArgs{}, CodeSymlink},
		{"stat missing", "stat", "nope", FSArgs{}, CodeNotFound},
		{"mkdir through link", "mkdir", "out/new", FSArgs{}, CodeSymlink},
		{"mkdir parents through link", "mkdir", "out/x/y", FSArgs{Parents: true}, CodeSymlink},
		{"mkdir on link", "mkdir", "out", FSArgs{}, CodeExists},
		{"mkdir home", "mkdir", "/home/sandbox", FSArgs{}, CodeExists},
		{"mkdir missing parent", "mkdir", "x/y", FSArgs{}, CodeNotFound},
		{"mkdir dotdot", "mkdir", "a/../../outside/n", FSArgs{}, CodeInvalid},
		{"move home", "move", "/home/sandbox", FSArgs{To: "x"}, CodeInvalid},
		{"move onto home", "move", "f.txt", FSArgs{To: "/home/sandbox", Overwrite: true}, CodeInvalid},
		{"move to outside", "move", "f.txt", FSArgs{To: "../outside/f"}, CodeInvalid},
		{"move to absolute outside", "move", "f.txt", FSArgs{To: "/tmp/f"}, CodeInvalid},
		{"move into link", "move", "f.txt", FSArgs{To: "out/f"}, CodeSymlink},
		{"move onto link", "move", "f.txt", FSArgs{To: "out", Overwrite: true}, CodeSymlink},
		{"move onto loop", "move", "f.txt", FSArgs{To: "loop", Overwrite: true}, CodeSymlink},
		{"move from through link", "move", "out/secret", FSArgs{To: "s"}, CodeSymlink},
		{"move dir into itself", "move", "a", FSArgs{To: "a/c/a"}, CodeInvalid},
		{"move over existing", "move", "f.txt", FSArgs{To: "a/b.txt"}, CodeExists},
		{"move missing", "move", "nope", FSArgs{To: "x"}, CodeNotFound},
		{"move NUL dest", "move", "f.txt", FSArgs{To: "x\x00"}, CodeInvalid},
		{"move long dest", "move", "f.txt", FSArgs{To: long}, CodeInvalid},
		{"remove home", "remove", "/home/sandbox", FSArgs{}, CodeInvalid},
		{"remove home dot", "remove", "/home/sandbox/.", FSArgs{}, CodeInvalid},
		{"remove through link", "remove", "out/secret", FSArgs{}, CodeSymlink},
		{"remove through abs link", "remove", "abs/passwd", FSArgs{}, CodeSymlink},
		{"remove dotdot", "remove", "../outside", FSArgs{}, CodeInvalid},
		{"remove missing", "remove", "nope", FSArgs{}, CodeNotFound},
		{"list through link", "list", "out", FSArgs{Depth: 3}, CodeSymlink},
		{"list loop", "list", "loop", FSArgs{Depth: 2}, CodeSymlink},
		{"list too deep", "list", "a", FSArgs{Depth: MaxListDepth + 1}, CodeInvalid},
		{"list negative", "list", "a", FSArgs{Depth: -1}, CodeInvalid},
		{"list a file", "list", "f.txt", FSArgs{Depth: 2}, CodeNotDir},
		{"unknown op", "chmod", "f.txt", FSArgs{}, CodeInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, _, outside := fsHome(t)
			_, err := fsCall(h, tc.op, tc.path, tc.args, 100)
			if got := fsCodeOf(err); got != tc.code {
				t.Fatalf("%s %q %+v: code %q (%v), want %q", tc.op, tc.path, tc.args, got, err, tc.code)
			}
			if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "s" {
				t.Fatalf("outside changed: %q %v", b, err)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 1 {
				t.Fatalf("outside holds %d entries", len(ents))
			}
		})
	}
}

// TestFSOpsWork: each operation's effect and answer.
func TestFSOpsWork(t *testing.T) {
	t.Parallel()
	h, home, outside := fsHome(t)
	must := func(op, path string, args FSArgs) FileResult {
		t.Helper()
		res, err := fsCall(h, op, path, args, 1000)
		if err != nil {
			t.Fatalf("%s %s: %v", op, path, err)
		}
		return res
	}
	if r := must("stat", "out", FSArgs{}); r.Info.Type != "symlink" || r.Info.Target != outside {
		t.Fatalf("stat of a link: %+v", r.Info)
	}
	if r := must("stat", "/home/sandbox", FSArgs{}); r.Info.Type != "dir" || r.Info.Name != "sandbox" {
		t.Fatalf("stat of home: %+v", r.Info)
	}
	if r := must("mkdir", "n/m/o", FSArgs{Parents: true}); r.Info.Type != "dir" || r.Info.Name != "o" {
		t.Fatalf("mkdir: %+v", r.Info)
	}
	if _, err := fsCall(h, "mkdir", "n/m/o", FSArgs{Parents: true}, 0); fsCodeOf(err) != CodeExists {
		t.Fatalf("second mkdir: %v", err)
	}
	if r := must("move", "f.txt", FSArgs{To: "new/dir/g.txt"}); r.Info.Name != "g.txt" || r.Info.Size != 1 {
		t.Fatalf("move: %+v", r.Info)
	}
	if _, err := os.Stat(filepath.Join(home, "new/dir/g.txt")); err != nil {
		t.Fatal(err)
	}
	must("move", "a/b.txt", FSArgs{To: "new/dir/g.txt", Overwrite: true})
	if b, _ := os.ReadFile(filepath.Join(home, "new/dir/g.txt")); string(b) != "b" {
		t.Fatalf("overwrite left %q", b)
	}
	// A moved link stays a link to the same text; its target is untouched.
	must("move", "out", FSArgs{To: "out2"})
	if tgt, err := os.Readlink(filepath.Join(home, "out2")); err != nil || tgt != outside {
		t.Fatalf("moved link: %q %v", tgt, err)
	}
	r := must("list", "/home/sandbox", FSArgs{Depth: 3})
	var names []string
	for _, e := range r.Entries {
		names = append(names, e.Name)
	}
	want := "a a/c a/c/d.txt a/up abs loop n n/m n/m/o new new/dir new/dir/g.txt out2"
	if got := strings.Join(names, " "); got != want || r.Truncated {
		t.Fatalf("deep list: %q truncated %v, want %q", got, r.Truncated, want)
	}
	if r, _ := fsCall(h, "list", "/home/sandbox", FSArgs{Depth: 3}, 4); len(r.Entries) != 4 || !r.Truncated {
		t.Fatalf("bounded list: %d entries, truncated %v", len(r.Entries), r.Truncated)
	}
	// Removing a tree removes links in it, never what they point to.
	if err := os.Symlink(outside, filepath.Join(home, "a/c/link")); err != nil {
		t.Fatal(err)
	}
	must("remove", "a", FSArgs{})
	must("remove", "abs", FSArgs{})
	if _, err := os.Lstat(filepath.Join(home, "a")); !os.IsNotExist(err) {
		t.Fatalf("a still there: %v", err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "s" {
		t.Fatalf("outside changed: %q %v", b, err)
	}
}

// TestRemoveBounded: a tree deeper than maxRemoveDepth is refused, not
// walked without end.
func TestRemoveBounded(t *testing.T) {
	t.Parallel()
	h, home, _ := fsHome(t)
	fd, err := h.walk(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	// Deeper than PATH_MAX allows by name: made relative, level by level.
	comps := make([]string, maxRemoveDepth+2)
	for i := range comps {
		comps[i] = "dd"
	}
	nfd, err := h.walk(comps, true)
	if err != nil {
		t.Fatal(err)
	}
	closeFD(nfd)
	closeFD(fd)
	if _, err := fsCall(h, "remove", "dd", FSArgs{}, 0); fsCodeOf(err) != CodeTooLarge {
		t.Fatalf("deep remove: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(home, "dd")); err != nil {
		t.Fatalf("the top of a refused tree should stay: %v", err)
	}
}

// FuzzFSOps: arbitrary paths and destinations for every operation on a
// home with links to the outside never change anything outside it.
func FuzzFSOps(f *testing.F) {
	for _, s := range []struct{ op, p, to string }{
		{"move", "f.txt", "out/x"}, {"remove", "out/secret", ""}, {"mkdir", "../x", ""},
		{"list", "a", ""}, {"stat", "a/up/f.txt", ""}, {"move", "a", "a/c/a"}, {"remove", "/home/sandbox", ""},
	} {
		f.Add(s.op, s.p, s.to, true, uint8(3))
	}
	f.Fuzz(func(t *testing.T, op, p, to string, flag bool, depth uint8) {
		h, _, outside := fsHome(t)
		_, _ = fsCall(h, op, p, FSArgs{To: to, Overwrite: flag, Parents: flag, Depth: int(depth % 70)}, 100)
		if b, err := os.ReadFile(filepath.Join(outside, "secret")); err != nil || string(b) != "s" {
			t.Fatalf("%s %q %q: outside changed: %q %v", op, p, to, b, err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Fatalf("%s %q %q: outside holds %d entries", op, p, to, len(ents))
		}
		if _, err := os.Lstat(h.homeRoot); err != nil {
			t.Fatalf("%s %q %q: home gone: %v", op, p, to, err)
		}
	})
}

func closeFD(fd int) { _ = unix.Close(fd) }
