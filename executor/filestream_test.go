package executor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/guest"
)

// gatedReader yields head, then blocks until gate is closed, then yields
// tail: an upload whose client pauses half way.
type gatedReader struct {
	head, tail []byte
	gate       chan struct{}
	reached    chan struct{} // closed when head has been read
	stage      int
}

func (g *gatedReader) Read(p []byte) (int, error) {
	switch g.stage {
	case 0:
		n := copy(p, g.head)
		g.head = g.head[n:]
		if len(g.head) == 0 {
			g.stage = 1
		}
		return n, nil
	case 1:
		close(g.reached)
		<-g.gate
		g.stage = 2
		fallthrough
	default:
		if len(g.tail) == 0 {
			return 0, io.EOF
		}
		n := copy(p, g.tail)
		g.tail = g.tail[n:]
		return n, nil
	}
}

// TestFileUploadBesideExecute: an upload in progress does not hold up an
// execute in the same session, and the execute sees the old file whole
// (never a part of the new one); once the upload has returned, the next
// execute sees the new file. On the old transport the execute waited for
// the whole upload (the session's lock).
func TestFileUploadBesideExecute(t *testing.T) {
	// Serial (no t.Parallel): an execute beside the upload must end within 5 s; other tests' load would break that.
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	putFile(t, e, s.ID, "doc", []byte("old\n"))
	head := bytes.Repeat([]byte("n"), 3<<20)
	g := &gatedReader{head: head, tail: []byte("\nend\n"), gate: make(chan struct{}), reached: make(chan struct{})}
	size := int64(len(head) + len(g.tail))
	type putOut struct {
		fi  FileInfo
		err error
	}
	done := make(chan putOut, 1)
	go func() {
		fi, err := e.files.PutFile(context.Background(), "k1", s.ID, "doc", g, size)
		done <- putOut{fi, err}
	}()
	select {
	case <-g.reached:
	case <-time.After(30 * time.Second):
		t.Fatal("upload never got under way")
	}
	start := time.Now()
	r := run(t, e, s.ID, "cat /home/sandbox/doc; ls -A /home/sandbox | grep -c sbx-upload", 10*time.Second)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("execute beside an upload took %v", took)
	}
	// The upload's temporary file is there, the target is still the old one.
	if r.Stdout != "old\n1\n" {
		t.Fatalf("execute during the upload saw %q, want the old file and one temporary file", r.Stdout)
	}
	select {
	case o := <-done:
		t.Fatalf("upload ended before its body: %+v %v", o.fi, o.err)
	default:
	}
	close(g.gate)
	o := <-done
	if o.err != nil || o.fi.Size != size {
		t.Fatalf("upload: %+v %v", o.fi, o.err)
	}
	r = run(t, e, s.ID, "tail -c 4 /home/sandbox/doc; wc -c < /home/sandbox/doc; stat -c %u /home/sandbox/doc", 0)
	if want := "end\n3145733\n1000\n"; r.Stdout != want {
		t.Fatalf("after the upload: %q, want %q", r.Stdout, want)
	}
}

// TestFileDownloadChangedFails: a download whose file is rewritten while
// it is under way fails instead of returning a mix of two versions; one
// that nothing touches returns the file.
func TestFileDownloadChangedFails(t *testing.T) {
	// Serial (no t.Parallel): an execute beside the download must end within 5 s; other tests' load would break that.
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	const size = 12 << 20 // three windows: the guest waits for credit
	run(t, e, s.ID, "head -c 12582912 /dev/zero | tr '\\0' a > /home/sandbox/f", 30*time.Second)
	ctx := context.Background()
	fi, rc, err := e.files.GetFile(ctx, "k1", s.ID, "f")
	if err != nil || fi.Size != size {
		t.Fatalf("get: %+v %v", fi, err)
	}
	first := make([]byte, 1<<20)
	if _, err := io.ReadFull(rc, first); err != nil {
		t.Fatal(err)
	}
	// The execute runs while the download is paused half way.
	start := time.Now()
	r := run(t, e, s.ID, "printf b | dd of=/home/sandbox/f bs=1 seek=12000000 conv=notrunc 2>/dev/null; echo done", 10*time.Second)
	if r.Stdout != "done\n" || time.Since(start) > 5*time.Second {
		t.Fatalf("execute beside a download: %+v after %v", r, time.Since(start))
	}
	rest, err := io.ReadAll(rc)
	rc.Close()
	if err == nil {
		t.Fatalf("a download of a file changed under it succeeded (%d bytes, b at %d)", len(first)+len(rest), bytes.IndexByte(rest, 'b'))
	}
	if !errors.Is(err, agent.ErrDownloadAborted) {
		t.Fatalf("changed download: %v", err)
	}
	// Untouched, it comes whole, and the session is fine.
	_, got, err := getFile(e, s.ID, "f")
	if err != nil || len(got) != size || got[12000000] != 'b' {
		t.Fatalf("second download: %d bytes, %v", len(got), err)
	}
}

// TestFileStreamThreadIsClosedToTheUser: while an upload streams, the
// sandbox user's code can neither reach pid 1's descriptors (the host
// channel) through /proc, nor signal or ptrace any of its threads, and the
// transfer completes. (The stream's thread acts as the user only for the
// steps that resolve names; gVisor would give the user that thread's
// /proc folder meanwhile, so the bytes are copied as root.)
func TestFileStreamThreadIsClosedToTheUser(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "python3")
	g := &gatedReader{head: bytes.Repeat([]byte("x"), 2<<20), tail: []byte("y"), gate: make(chan struct{}), reached: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := e.files.PutFile(context.Background(), "k1", s.ID, "up", g, 2<<20+1)
		done <- err
	}()
	<-g.reached
	probe := `
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
tids = os.listdir('/proc/1/task')
print('threads', len(tids) > 1)
open_ = []
for tid in tids:
    base = '/proc/1/task/%s' % tid
    try:
        os.listdir(base + '/fd')
        open_.append(base + '/fd')
    except OSError:
        pass
    for p in ('fd/0', 'fd/1', 'fd/2'):
        for mode in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR):
            try:
                os.open(base + '/' + p, mode | os.O_NONBLOCK)
                open_.append(base + '/' + p + ' mode %d' % mode)
            except OSError:
                pass
        try:
            os.readlink(base + '/' + p)
            open_.append(base + '/' + p + ' readlink')
        except OSError:
            pass
    st = os.stat(base)
    if st.st_uid != 0:
        open_.append(base + ' owned by %d' % st.st_uid)
    for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGQUIT, signal.SIGSEGV, signal.SIGTERM):
        if libc.syscall(234, 1, int(tid), int(sig)) == 0:  # tgkill
            open_.append('signalled %s with %d' % (tid, sig))
    if libc.syscall(101, 16, int(tid), 0, 0) == 0:  # ptrace(PTRACE_ATTACH)
        open_.append('ptrace attached ' + tid)
for p in ('/proc/1/fd', '/proc/1/fd/1', '/proc/1/mem', '/proc/1/environ'):
    try:
        if p.endswith('fd'):
            os.listdir(p)
        else:
            os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        open_.append(p)
    except OSError:
        pass
print('open', open_)
print('dumpable', libc.prctl(3, 0, 0, 0, 0))
`
	r := run(t, e, s.ID, probe, 20*time.Second)
	if r.Status != StatusOK || !strings.Contains(r.Stdout, "threads True") || !strings.Contains(r.Stdout, "open []") {
		t.Fatalf("probe of pid 1 during a transfer: %+v", r)
	}
	// The user's own processes stay dumpable (pid 1's setting is its own).
	if !strings.Contains(r.Stdout, "dumpable 1") {
		t.Errorf("user code is not dumpable: %q", r.Stdout)
	}
	close(g.gate)
	if err := <-done; err != nil {
		t.Fatalf("upload after the probe: %v", err)
	}
	if r := run(t, e, s.ID, "import os; print(os.path.getsize('/home/sandbox/up'))", 0); r.Stdout != "2097153\n" {
		t.Fatalf("after the probe: %+v", r)
	}
}

// TestFileStreamsConcurrent: more transfers than the guest serves at once,
// in one session, all complete with the right bytes.
func TestFileStreamsConcurrent(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	const n = 2*guest.MaxFileStreams + 1
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			name := "c" + strings.Repeat("x", i)
			want := bytes.Repeat([]byte{byte('a' + i)}, 300<<10+i)
			if _, err := e.files.PutFile(context.Background(), "k1", s.ID, name, bytes.NewReader(want), int64(len(want))); err != nil {
				errs <- err
				return
			}
			_, got, err := getFile(e, s.ID, name)
			if err == nil && !bytes.Equal(got, want) {
				err = errors.New(name + ": wrong bytes")
			}
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
