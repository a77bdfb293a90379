package executor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// TestFSOps: stat, mkdir, move, remove and deep list in a real sandbox,
// over the agent channel and over runsc exec, against links that code
// made to the outside, with the outside checked afterwards; on the
// channel no execute's worth of work happens (no runsc exec) and a
// process the user left running survives every operation.
func TestFSOps(t *testing.T) {
	for _, transport := range []string{"channel", "exec"} {
		t.Run(transport, func(t *testing.T) { testFSOps(t, transport) })
	}
}

func testFSOps(t *testing.T, transport string) {
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	ctx := context.Background()
	setup := strings.Join([]string{
		"cd /home/sandbox",
		"mkdir -p a/c && echo b > a/b.txt && echo d > a/c/d.txt && echo f > f.txt",
		"ln -s /etc etcdir && ln -s /etc/passwd pw && ln -s loop loop",
		"mkdir -p /tmp/outside && echo s > /tmp/outside/secret && ln -s /tmp/outside out",
	}, "\n")
	if r := run(t, e, s.ID, setup, 30*time.Second); r.Status != StatusOK {
		t.Fatalf("setup: %+v", r)
	}
	if transport == "exec" {
		e.dropAgent(s.ID)
	}
	execsBefore := e.execFileOps.Load()

	if fi, err := e.Stat(ctx, "k1", s.ID, "pw"); err != nil || fi.Type != "symlink" || fi.Target != "/etc/passwd" || fi.Path != "/home/sandbox/pw" {
		t.Fatalf("stat pw: %+v %v", fi, err)
	}
	if fi, err := e.Stat(ctx, "k1", s.ID, "/home/sandbox"); err != nil || fi.Type != "dir" {
		t.Fatalf("stat home: %+v %v", fi, err)
	}
	if fi, err := e.MakeDir(ctx, "k1", s.ID, "n/m", true); err != nil || fi.Type != "dir" || fi.Path != "/home/sandbox/n/m" {
		t.Fatalf("mkdir: %+v %v", fi, err)
	}
	if fi, err := e.Move(ctx, "k1", s.ID, "f.txt", "n/m/g.txt", false); err != nil || fi.Name != "g.txt" || fi.Size != 2 {
		t.Fatalf("move: %+v %v", fi, err)
	}
	l, err := e.ListDepth(ctx, "k1", s.ID, "/home/sandbox", 3)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, fi := range l.Entries {
		paths = append(paths, strings.TrimPrefix(fi.Path, "/home/sandbox/"))
	}
	if got, want := strings.Join(paths, " "), "a a/b.txt a/c a/c/d.txt etcdir loop n n/m n/m/g.txt out pw"; got != want {
		t.Fatalf("deep list: %q, want %q", got, want)
	}
	if err := e.Remove(ctx, "k1", s.ID, "a"); err != nil {
		t.Fatal(err)
	}
	if err := e.Remove(ctx, "k1", s.ID, "out"); err != nil { // the link goes, not its target
		t.Fatal(err)
	}

	hostile := []struct {
		name string
		do   func() error
		want error
	}{
		{"stat dotdot", func() error { _, err := e.Stat(ctx, "k1", s.ID, "../x"); return err }, sandbox.ErrInvalid},
		{"stat outside", func() error { _, err := e.Stat(ctx, "k1", s.ID, "/etc/passwd"); return err }, sandbox.ErrInvalid},
		{"stat NUL", func() error { _, err := e.Stat(ctx, "k1", s.ID, "a\x00"); return err }, sandbox.ErrInvalid},
		{"stat long", func() error { _, err := e.Stat(ctx, "k1", s.ID, strings.Repeat("x", 300)); return err }, sandbox.ErrInvalid},
		{"stat through link", func() error { _, err := e.Stat(ctx, "k1", s.ID, "etcdir/passwd"); return err }, sandbox.ErrSymlink},
		{"stat through loop", func() error { _, err := e.Stat(ctx, "k1", s.ID, "loop/x"); return err }, sandbox.ErrSymlink},
		{"stat missing", func() error { _, err := e.Stat(ctx, "k1", s.ID, "nope"); return err }, sandbox.ErrFileNotFound},
		{"mkdir exists", func() error { _, err := e.MakeDir(ctx, "k1", s.ID, "n", false); return err }, sandbox.ErrFileExists},
		{"mkdir through link", func() error { _, err := e.MakeDir(ctx, "k1", s.ID, "etcdir/x", true); return err }, sandbox.ErrSymlink},
		{"move onto link", func() error { _, err := e.Move(ctx, "k1", s.ID, "n/m/g.txt", "pw", true); return err }, sandbox.ErrSymlink},
		{"move into link", func() error { _, err := e.Move(ctx, "k1", s.ID, "n/m/g.txt", "etcdir/g", true); return err }, sandbox.ErrSymlink},
		{"move outside", func() error { _, err := e.Move(ctx, "k1", s.ID, "n/m/g.txt", "/tmp/g", true); return err }, sandbox.ErrInvalid},
		{"move home", func() error { _, err := e.Move(ctx, "k1", s.ID, "/home/sandbox", "x", true); return err }, sandbox.ErrInvalid},
		{"move over existing", func() error { _, err := e.Move(ctx, "k1", s.ID, "pw", "n/m/g.txt", false); return err }, sandbox.ErrFileExists},
		{"remove home", func() error { return e.Remove(ctx, "k1", s.ID, "/home/sandbox/") }, sandbox.ErrInvalid},
		{"remove through link", func() error { return e.Remove(ctx, "k1", s.ID, "etcdir/passwd") }, sandbox.ErrSymlink},
		{"list through link", func() error { _, err := e.ListDepth(ctx, "k1", s.ID, "etcdir", 2); return err }, sandbox.ErrSymlink},
		{"list depth 0", func() error { _, err := e.ListDepth(ctx, "k1", s.ID, "n", 0); return err }, sandbox.ErrInvalid},
		{"another owner", func() error { _, err := e.Stat(ctx, "k2", s.ID, "n"); return err }, ErrNotFound},
	}
	for _, tc := range hostile {
		if err := tc.do(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if transport == "channel" {
		if n := e.execFileOps.Load() - execsBefore; n != 0 {
			t.Fatalf("%d runsc execs on the channel path", n)
		}
	} else if e.execFileOps.Load() == execsBefore {
		t.Fatal("the exec path was not taken")
	}
	r := run(t, e, s.ID, "cat /tmp/outside/secret; ls /home/sandbox; head -1 /etc/passwd | cut -d: -f1", 30*time.Second)
	if r.Stdout != "s\netcdir\nloop\nn\npw\nroot\n" {
		t.Fatalf("after the operations: %q", r.Stdout)
	}
}
