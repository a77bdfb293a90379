package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

func putFile(t *testing.T, e *Executor, id, path string, content []byte) FileInfo {
	t.Helper()
	fi, err := e.files.PutFile(context.Background(), "k1", id, path, bytes.NewReader(content), int64(len(content)))
	if err != nil {
		t.Fatalf("put %s: %v", path, err)
	}
	return fi
}

func getFile(e *Executor, id, path string) (FileInfo, []byte, error) {
	fi, rc, err := e.files.GetFile(context.Background(), "k1", id, path)
	if err != nil {
		return fi, nil, err
	}
	b, rerr := io.ReadAll(rc)
	cerr := rc.Close()
	if rerr != nil {
		return fi, b, rerr
	}
	return fi, b, cerr
}

func TestFileRoundTrip(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	content := make([]byte, 3<<20+17) // several frames, not a multiple of one
	_, _ = rand.Read(content)
	sum := sha256.Sum256(content)

	fi := putFile(t, e, s.ID, "/home/sandbox/data/in.bin", content)
	if fi.Size != int64(len(content)) || fi.Type != "file" || fi.Mode != "0644" || fi.Path != "/home/sandbox/data/in.bin" || fi.Name != "in.bin" {
		t.Fatalf("put info: %+v", fi)
	}
	gi, got, err := getFile(e, s.ID, "data/in.bin") // relative to the home
	if err != nil || !bytes.Equal(got, content) || gi.Size != fi.Size {
		t.Fatalf("get: %+v, %d bytes, %v", gi, len(got), err)
	}

	// What put wrote, code sees, owned by the sandbox user.
	r := run(t, e, s.ID, "sha256sum /home/sandbox/data/in.bin | cut -d' ' -f1; stat -c '%u %a' /home/sandbox/data/in.bin /home/sandbox/data", 0)
	want := hex.EncodeToString(sum[:]) + "\n1000 644\n1000 755\n"
	if r.Stdout != want {
		t.Fatalf("execute sees %q, want %q (%+v)", r.Stdout, want, r)
	}
	// What code wrote, get returns; an empty file too.
	run(t, e, s.ID, "printf 'from code\\n' > /home/sandbox/out.txt; : > /home/sandbox/empty; chmod 600 /home/sandbox/out.txt; ln -s out.txt /home/sandbox/link; mkdir /home/sandbox/sub", 0)
	if _, got, err := getFile(e, s.ID, "/home/sandbox/out.txt"); err != nil || string(got) != "from code\n" {
		t.Fatalf("get out.txt: %q %v", got, err)
	}
	if fi, got, err := getFile(e, s.ID, "/home/sandbox/empty"); err != nil || len(got) != 0 || fi.Size != 0 {
		t.Fatalf("get empty: %+v %q %v", fi, got, err)
	}
	if fi := putFile(t, e, s.ID, "zero", nil); fi.Size != 0 {
		t.Fatalf("empty put: %+v", fi)
	}
	if _, got, err := getFile(e, s.ID, "zero"); err != nil || len(got) != 0 {
		t.Fatalf("get of empty put: %q %v", got, err)
	}
	// Overwrite keeps the mode code gave the file.
	fi = putFile(t, e, s.ID, "/home/sandbox/out.txt", []byte("replaced"))
	if fi.Mode != "0600" || fi.Size != 8 {
		t.Fatalf("overwrite info: %+v", fi)
	}
	r = run(t, e, s.ID, "cat /home/sandbox/out.txt; echo; stat -c %a /home/sandbox/out.txt", 0)
	if r.Stdout != "replaced\n600\n" {
		t.Fatalf("after overwrite: %+v", r)
	}

	list, err := listEntries(context.Background(), e, "k1", s.ID, "/home/sandbox")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]FileInfo{}
	var names []string
	for _, f := range list {
		byName[f.Name] = f
		names = append(names, f.Name)
	}
	for name, typ := range map[string]string{"data": "dir", "out.txt": "file", "empty": "file", "link": "symlink", "sub": "dir"} {
		if byName[name].Type != typ {
			t.Errorf("listing: %s is %+v, want type %s (all: %v)", name, byName[name], typ, names)
		}
	}
	if f := byName["out.txt"]; f.Size != 8 || f.Mode != "0600" || f.Path != "/home/sandbox/out.txt" || time.Since(f.ModTime) > 10*time.Minute {
		t.Errorf("listing out.txt: %+v", f)
	}
	list, err = listEntries(context.Background(), e, "k1", s.ID, "/home/sandbox/data/")
	if err != nil || len(list) != 1 || list[0].Name != "in.bin" || list[0].Size != int64(len(content)) {
		t.Fatalf("listing data: %+v %v", list, err)
	}
	// Another owner sees no session at all.
	if _, err := e.files.PutFile(context.Background(), "k2", s.ID, "x", strings.NewReader("x"), 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other owner put: %v", err)
	}
	if _, _, err := e.files.GetFile(context.Background(), "k2", s.ID, "out.txt"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other owner get: %v", err)
	}
	if _, err := listEntries(context.Background(), e, "k2", s.ID, "/home/sandbox"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other owner list: %v", err)
	}
}

// TestFileHostilePaths plants what sandboxed code can plant (symlinks out,
// symlinked folders, hard links, FIFOs, sockets, device nodes, unreadable
// files) and checks that every files call refuses it with a clear error,
// quickly, and without touching anything outside the home.
func TestFileHostilePaths(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"channel", "exec"} {
		t.Run(transport, func(t *testing.T) { testFileHostilePaths(t, transport) })
	}
}

func testFileHostilePaths(t *testing.T, transport string) {
	e, cfg := startExecutor(t, func(c *Config) { c.MaxFileBytes = 1 << 20 })
	s := mustSession(t, e, "bash")
	execsBefore := e.execFileOps.Load()
	hostPath := cfg.DataDir + "/sessions/" + s.ID + "/home.img"
	setup := strings.Join([]string{
		"cd /home/sandbox",
		"ln -s /etc/passwd pw",
		"ln -s /etc/shadow shadow",
		"ln -s /proc/1/root/etc/shadow hostish",
		"ln -s " + hostPath + " img",
		"ln -s /etc etcdir",
		"ln -s /tmp tmpdir",
		"ln -s /home/sandbox/real homelink", // even a link that stays inside is refused
		"ln -s loop loop",
		"mkdir real && echo inside > real/f",
		"ln /etc/shadow hard-shadow 2>/dev/null; ln /etc/passwd hard-passwd 2>/dev/null",
		"mkfifo fifo",
		"mknod chr c 1 3 2>/dev/null; mknod blk b 7 0 2>/dev/null",
		"python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.bind('/home/sandbox/sock')\"",
		"mkdir dir",
		"echo secret > locked && chmod 000 locked",
		"mkdir closed && chmod 000 closed",
		"echo keep > keep.txt",
		"head -c 2097152 /dev/zero > big",
		"echo plain > plain",
		"ln -s /proc/self procself",
		"ln -s /proc/1/fd/1 agentfd",
		"ls -la /home/sandbox",
	}, "\n")
	r := run(t, e, s.ID, setup, 30*time.Second)
	if r.Status != StatusOK {
		t.Fatalf("setup: %+v", r)
	}
	for _, name := range []string{"hard-shadow", "hard-passwd", "chr", "blk"} {
		if strings.Contains(r.Stdout, " "+name+"\n") {
			t.Logf("note: sandboxed code could create %s:\n%s", name, r.Stdout)
		}
	}

	if transport == "exec" {
		// A sandbox without a channel (adopted after a restart): every
		// file call takes `runsc exec`.
		e.agents.Drop(s.ID)
	}
	long := "/home/sandbox/" + strings.Repeat("a/", 2100)
	tests := []struct {
		name string
		op   string // get, put, list
		path string
		want []error // any of these
	}{
		{name: "dotdot relative", op: "get", path: "../etc/passwd", want: []error{ErrInvalid}},
		{name: "absolute elsewhere", op: "get", path: "/etc/passwd", want: []error{ErrInvalid}},
		{name: "dotdot out of home", op: "get", path: "/home/sandbox/../../etc/shadow", want: []error{ErrInvalid}},
		{name: "dotdot staying inside", op: "get", path: "/home/sandbox/real/../plain", want: []error{ErrInvalid}},
		{name: "sibling prefix", op: "get", path: "/home/sandboxx/f", want: []error{ErrInvalid}},
		{name: "proc", op: "get", path: "/proc/self/root/etc/passwd", want: []error{ErrInvalid}},
		{name: "dev null", op: "get", path: "/dev/null", want: []error{ErrInvalid}},
		{name: "NUL byte", op: "get", path: "/home/sandbox/plain\x00x", want: []error{ErrInvalid}},
		{name: "empty", op: "get", path: "", want: []error{ErrInvalid}},
		{name: "overlong path", op: "get", path: long, want: []error{ErrInvalid}},
		{name: "overlong name", op: "put", path: strings.Repeat("n", 256), want: []error{ErrInvalid}},
		{name: "put absolute elsewhere", op: "put", path: "/tmp/x", want: []error{ErrInvalid}},
		{name: "list dotdot", op: "list", path: "/home/sandbox/..", want: []error{ErrInvalid}},
		{name: "symlink to passwd get", op: "get", path: "pw", want: []error{ErrSymlink}},
		{name: "symlink to passwd put", op: "put", path: "pw", want: []error{ErrSymlink}},
		{name: "symlink to shadow", op: "get", path: "shadow", want: []error{ErrSymlink}},
		{name: "symlink through proc root", op: "get", path: "hostish", want: []error{ErrSymlink}},
		{name: "symlink to host path", op: "get", path: "img", want: []error{ErrSymlink}},
		{name: "symlink inside home", op: "get", path: "homelink/f", want: []error{ErrSymlink}},
		{name: "symlink loop", op: "get", path: "loop", want: []error{ErrSymlink}},
		{name: "symlinked parent get", op: "get", path: "etcdir/passwd", want: []error{ErrSymlink}},
		{name: "symlinked parent put", op: "put", path: "tmpdir/planted", want: []error{ErrSymlink}},
		{name: "symlinked parent deep put", op: "put", path: "tmpdir/a/b/planted", want: []error{ErrSymlink}},
		{name: "symlinked dir list", op: "list", path: "etcdir", want: []error{ErrSymlink}},
		{name: "hard link to shadow", op: "get", path: "hard-shadow", want: []error{ErrFileNotFound, ErrPermission}},
		{name: "fifo get", op: "get", path: "fifo", want: []error{ErrNotRegular}},
		{name: "fifo put", op: "put", path: "fifo", want: []error{ErrNotRegular}},
		{name: "socket get", op: "get", path: "sock", want: []error{ErrNotRegular}},
		{name: "char device", op: "get", path: "chr", want: []error{ErrFileNotFound, ErrNotRegular}},
		{name: "block device", op: "get", path: "blk", want: []error{ErrFileNotFound, ErrNotRegular}},
		{name: "directory get", op: "get", path: "dir", want: []error{ErrNotRegular}},
		{name: "directory put", op: "put", path: "dir", want: []error{ErrNotRegular}},
		{name: "home get", op: "get", path: "/home/sandbox", want: []error{ErrNotRegular}},
		{name: "home put", op: "put", path: "/home/sandbox/", want: []error{ErrNotRegular}},
		{name: "file as folder put", op: "put", path: "plain/child", want: []error{ErrNotDir}},
		{name: "file as folder list", op: "list", path: "plain", want: []error{ErrNotDir}},
		{name: "missing get", op: "get", path: "nope", want: []error{ErrFileNotFound}},
		{name: "missing list", op: "list", path: "nope", want: []error{ErrFileNotFound}},
		{name: "unreadable file", op: "get", path: "locked", want: []error{ErrPermission}},
		{name: "closed folder put", op: "put", path: "closed/x", want: []error{ErrPermission}},
		{name: "closed folder list", op: "list", path: "closed", want: []error{ErrPermission}},
		{name: "download over limit", op: "get", path: "big", want: []error{sandbox.ErrTooLarge}},
		{name: "long name under the limit, missing", op: "get", path: strings.Repeat("n", 255), want: []error{ErrFileNotFound}},
		{name: "NUL in a folder name", op: "put", path: "dir\x00/x", want: []error{ErrInvalid}},
		{name: "dotdot after symlink", op: "get", path: "etcdir/../plain", want: []error{ErrInvalid}},
		{name: "proc via home path", op: "list", path: "/home/sandbox/../../proc/1/fd", want: []error{ErrInvalid}},
		{name: "dev via home path", op: "put", path: "/home/sandbox/../../dev/null", want: []error{ErrInvalid}},
		{name: "symlink to proc", op: "list", path: "procself", want: []error{ErrSymlink}},
		{name: "symlink to pid 1 fd put", op: "put", path: "agentfd", want: []error{ErrSymlink}},
		{name: "symlink to pid 1 fd get", op: "get", path: "agentfd", want: []error{ErrSymlink}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			var err error
			var leaked []byte
			switch tc.op {
			case "get":
				var rc io.ReadCloser
				_, rc, err = e.files.GetFile(ctx, "k1", s.ID, tc.path)
				if err == nil {
					leaked, _ = io.ReadAll(rc)
					rc.Close()
				}
			case "put":
				_, err = e.files.PutFile(ctx, "k1", s.ID, tc.path, strings.NewReader("planted\n"), 8)
			case "list":
				_, err = listEntries(ctx, e, "k1", s.ID, tc.path)
			}
			ok := false
			for _, w := range tc.want {
				ok = ok || errors.Is(err, w)
			}
			if !ok {
				t.Fatalf("%s %q: err %v (read %q), want one of %v", tc.op, tc.path, err, leaked, tc.want)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Fatalf("%s %q took %v", tc.op, tc.path, took)
			}
		})
	}

	// Nothing landed outside the home; the refused puts changed nothing.
	r = run(t, e, s.ID, "ls -A /tmp | grep -c -e planted -e '^a$'; cat /home/sandbox/keep.txt /home/sandbox/plain; ls -A /home/sandbox | grep -c sbx-upload; true", 0)
	if r.Stdout != "0\nkeep\nplain\n0\n" {
		t.Fatalf("after hostile calls: %q", r.Stdout)
	}
	if n := e.execFileOps.Load() - execsBefore; (transport == "channel") != (n == 0) {
		t.Fatalf("%s transport: %d file calls took runsc exec", transport, n)
	}
}

// TestFileUploadLimits: oversize and cut uploads are refused and leave the
// old file in place.
func TestFileUploadLimits(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.MaxFileBytes = 1 << 20 })
	s := mustSession(t, e, "bash")
	putFile(t, e, s.ID, "keep", []byte("old"))
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), 1<<20+1)

	// Announced size over the limit: refused before the sandbox is asked.
	if _, err := e.files.PutFile(ctx, "k1", s.ID, "keep", bytes.NewReader(big), int64(len(big))); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("oversize with size: %v", err)
	}
	// Unknown size (chunked upload): refused while streaming.
	if _, err := e.files.PutFile(ctx, "k1", s.ID, "keep", bytes.NewReader(big), -1); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("oversize without size: %v", err)
	}
	// Exactly the limit is fine.
	if fi, err := e.files.PutFile(ctx, "k1", s.ID, "exact", bytes.NewReader(big[:1<<20]), -1); err != nil || fi.Size != 1<<20 {
		t.Fatalf("upload at the limit: %+v %v", fi, err)
	}
	// A body that breaks off, or is shorter than announced.
	cut := io.MultiReader(bytes.NewReader(big[:300<<10]), errReader{errors.New("connection reset")})
	if _, err := e.files.PutFile(ctx, "k1", s.ID, "keep", cut, -1); err == nil {
		t.Fatal("cut upload succeeded")
	}
	if _, err := e.files.PutFile(ctx, "k1", s.ID, "keep", bytes.NewReader([]byte("short")), 10); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short upload: %v", err)
	}
	if _, got, err := getFile(e, s.ID, "keep"); err != nil || string(got) != "old" {
		t.Fatalf("keep after refused uploads: %q %v", got, err)
	}
	r := run(t, e, s.ID, "ls -a /home/sandbox | grep -c sbx-upload; true", 0)
	if strings.TrimSpace(r.Stdout) != "0" {
		t.Fatalf("temporary files left: %+v", r)
	}
	// A full home is a clear error, not a half-written file.
	r = run(t, e, s.ID, "head -c 60000000 /dev/zero > /home/sandbox/fill 2>/dev/null; true", 30*time.Second)
	if _, err := e.files.PutFile(ctx, "k1", s.ID, "more", bytes.NewReader(big[:1<<20]), 1<<20); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("put into a full home: %v", err)
	}
	if _, _, err := getFile(e, s.ID, "more"); !errors.Is(err, ErrFileNotFound) {
		t.Fatalf("half-written file after ENOSPC: %v", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// TestFileGetCancelled: a client that stops reading releases the session.
func TestFileGetCancelled(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	run(t, e, s.ID, "head -c 8000000 /dev/urandom > /home/sandbox/big", 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	fi, rc, err := e.files.GetFile(ctx, "k1", s.ID, "big")
	if err != nil || fi.Size != 8000000 {
		t.Fatalf("get: %+v %v", fi, err)
	}
	buf := make([]byte, 1000)
	if _, err := io.ReadFull(rc, buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	done := make(chan struct{})
	go func() { rc.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("close after cancel hung")
	}
	r := run(t, e, s.ID, "echo alive", 0)
	if r.Stdout != "alive\n" {
		t.Fatalf("session after cancelled get: %+v", r)
	}
}

// TestFileSandboxGone: a file call on a session whose sandbox died reports
// the loss (and fails the session) instead of hanging or panicking.
func TestFileSandboxGone(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	putFile(t, e, s.ID, "f", []byte("x"))
	if err := e.runsc.Destroy(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.files.GetFile(context.Background(), "k1", s.ID, "f"); !errors.Is(err, ErrLost) {
		t.Fatalf("get after the sandbox died: %v", err)
	}
	_, err := listEntries(context.Background(), e, "k1", s.ID, "/home/sandbox")
	if !errors.Is(err, ErrBadState) && !errors.Is(err, ErrNotFound) {
		t.Fatalf("list on a lost session: %v", err)
	}
}

// listEntries is List's entries, for tests that do not look at the flag.
func listEntries(ctx context.Context, e *Executor, owner, id, path string) ([]FileInfo, error) {
	l, err := e.files.List(ctx, owner, id, path)
	return l.Entries, err
}
