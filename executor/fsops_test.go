package executor

import (
	"context"
	"errors"
	"io"
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
	t.Parallel()
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
		e.agents.Drop(s.ID)
	}
	execsBefore := e.execFileOps.Load()

	if fi, err := e.files.Stat(ctx, "k1", s.ID, "pw"); err != nil || fi.Type != "symlink" || fi.Target != "/etc/passwd" || fi.Path != "/home/sandbox/pw" {
		t.Fatalf("stat pw: %+v %v", fi, err)
	}
	if fi, err := e.files.Stat(ctx, "k1", s.ID, "/home/sandbox"); err != nil || fi.Type != "dir" {
		t.Fatalf("stat home: %+v %v", fi, err)
	}
	if fi, err := e.files.MakeDir(ctx, "k1", s.ID, "n/m", true); err != nil || fi.Type != "dir" || fi.Path != "/home/sandbox/n/m" {
		t.Fatalf("mkdir: %+v %v", fi, err)
	}
	if fi, err := e.files.Move(ctx, "k1", s.ID, "f.txt", "n/m/g.txt", false); err != nil || fi.Name != "g.txt" || fi.Size != 2 {
		t.Fatalf("move: %+v %v", fi, err)
	}
	l, err := e.files.ListDepth(ctx, "k1", s.ID, "/home/sandbox", 3)
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
	if err := e.files.Remove(ctx, "k1", s.ID, "a"); err != nil {
		t.Fatal(err)
	}
	if err := e.files.Remove(ctx, "k1", s.ID, "out"); err != nil { // the link goes, not its target
		t.Fatal(err)
	}

	hostile := []struct {
		name string
		do   func() error
		want error
	}{
		{"stat dotdot", func() error { _, err := e.files.Stat(ctx, "k1", s.ID, "../x"); return err }, sandbox.ErrInvalid},
		{"stat outside", func() error { _, err := e.files.Stat(ctx, "k1", s.ID, "/etc/passwd"); return err }, sandbox.ErrInvalid},
		{"stat NUL", func() error { _, err := e.files.Stat(ctx, "k1", s.ID, "a\x00"); return err }, sandbox.ErrInvalid},
		{"stat long", func() error { _, err := e.files.Stat(ctx, "k1", s.ID, strings.Repeat("x", 300)); return err }, sandbox.ErrInvalid},
		{"stat through link", func() error { _, err := e.files.Stat(ctx, "k1", s.ID, "etcdir/passwd"); return err }, sandbox.ErrSymlink},
		{"stat through loop", func() error { _, err := e.files.Stat(ctx, "k1", s.ID, "loop/x"); return err }, sandbox.ErrSymlink},
		{"stat missing", func() error { _, err := e.files.Stat(ctx, "k1", s.ID, "nope"); return err }, sandbox.ErrFileNotFound},
		{"mkdir exists", func() error { _, err := e.files.MakeDir(ctx, "k1", s.ID, "n", false); return err }, sandbox.ErrFileExists},
		{"mkdir through link", func() error { _, err := e.files.MakeDir(ctx, "k1", s.ID, "etcdir/x", true); return err }, sandbox.ErrSymlink},
		{"move onto link", func() error { _, err := e.files.Move(ctx, "k1", s.ID, "n/m/g.txt", "pw", true); return err }, sandbox.ErrSymlink},
		{"move into link", func() error { _, err := e.files.Move(ctx, "k1", s.ID, "n/m/g.txt", "etcdir/g", true); return err }, sandbox.ErrSymlink},
		{"move outside", func() error { _, err := e.files.Move(ctx, "k1", s.ID, "n/m/g.txt", "/tmp/g", true); return err }, sandbox.ErrInvalid},
		{"move home", func() error { _, err := e.files.Move(ctx, "k1", s.ID, "/home/sandbox", "x", true); return err }, sandbox.ErrInvalid},
		{"move over existing", func() error { _, err := e.files.Move(ctx, "k1", s.ID, "pw", "n/m/g.txt", false); return err }, sandbox.ErrFileExists},
		{"remove home", func() error { return e.files.Remove(ctx, "k1", s.ID, "/home/sandbox/") }, sandbox.ErrInvalid},
		{"remove through link", func() error { return e.files.Remove(ctx, "k1", s.ID, "etcdir/passwd") }, sandbox.ErrSymlink},
		{"list through link", func() error { _, err := e.files.ListDepth(ctx, "k1", s.ID, "etcdir", 2); return err }, sandbox.ErrSymlink},
		{"list depth 0", func() error { _, err := e.files.ListDepth(ctx, "k1", s.ID, "n", 0); return err }, sandbox.ErrInvalid},
		{"another owner", func() error { _, err := e.files.Stat(ctx, "k2", s.ID, "n"); return err }, ErrNotFound},
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

// TestWatch: a watch in a real sandbox reports what code and the files
// API change (inotify works in gVisor for changes made inside), follows
// new folders when recursive, never reports the outside through a link,
// is bounded per session, and ends when the folder goes and when the
// session ends.
func TestWatch(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r := run(t, e, s.ID, "mkdir -p /home/sandbox/w /tmp/outside && ln -s /tmp/outside /home/sandbox/w/out", 30*time.Second); r.Status != StatusOK {
		t.Fatalf("setup: %+v", r)
	}
	if _, err := e.files.Watch(ctx, "k1", s.ID, "w/out", true); !errors.Is(err, sandbox.ErrSymlink) {
		t.Fatalf("watch through a link: %v", err)
	}
	if _, err := e.files.Watch(ctx, "k1", s.ID, "../etc", true); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("watch outside: %v", err)
	}
	w, err := e.files.Watch(ctx, "k1", s.ID, "w", true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	want := map[string]bool{
		"create /home/sandbox/w/a.txt": false, "create /home/sandbox/w/sub": false,
		"create /home/sandbox/w/sub/deep.txt": false, "create /home/sandbox/w/put.txt": false,
		"remove /home/sandbox/w/a.txt": false,
	}
	if r := run(t, e, s.ID, "cd /home/sandbox/w && echo a > a.txt && mkdir sub && sleep 0.5 && echo d > sub/deep.txt && echo x > /tmp/outside/x && rm a.txt", 30*time.Second); r.Status != StatusOK {
		t.Fatalf("changes: %+v", r)
	}
	putFile(t, e, s.ID, "w/put.txt", []byte("p"))
	var seen []string
	for missing := len(want); missing > 0; {
		evs, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("next: %v (seen %v)", err, seen)
		}
		for _, ev := range evs {
			k := ev.Op + " " + ev.Path
			seen = append(seen, k)
			if strings.Contains(ev.Path, "outside") || strings.Contains(ev.Path, ".sbx-") {
				t.Fatalf("event %q", k)
			}
			if done, ok := want[k]; ok && !done {
				want[k] = true
				missing--
			}
		}
	}
	// Bounded: the watch above and three more; a fifth is refused.
	var extra []sandbox.FileWatch
	for i := 0; i < 3; i++ {
		x, err := e.files.Watch(ctx, "k1", s.ID, "w", false)
		if err != nil {
			t.Fatalf("watch %d: %v", i+2, err)
		}
		extra = append(extra, x)
	}
	if _, err := e.files.Watch(ctx, "k1", s.ID, "w", false); !errors.Is(err, sandbox.ErrCapacity) {
		t.Fatalf("a fifth watch: %v", err)
	}
	for _, x := range extra {
		x.Close()
	}
	// Transfers still move while watches run.
	putFile(t, e, s.ID, "w/after.txt", []byte("q"))
	// The folder goes: the watch ends with io.EOF.
	if err := e.files.Remove(ctx, "k1", s.ID, "w"); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after the folder went: %v", err)
		}
	}
	// The session ends: a watch of it ends too.
	run(t, e, s.ID, "mkdir -p /home/sandbox/v", 30*time.Second)
	v, err := e.files.Watch(ctx, "k1", s.ID, "v", false)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := e.DeleteSession(ctx, "k1", s.ID); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := v.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatal("the watch outlived its session")
			}
			break
		}
	}
}
