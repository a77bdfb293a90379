package guest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestThreadCredsArePerThread: the user switch of a stream touches its own
// thread only, drops what root could do there, and goes back to root.
func TestThreadCredsArePerThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	// t.TempDir's parent is closed to other users: a folder of its own.
	dir, err := os.MkdirTemp("", "threadcreds-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	open := filepath.Join(dir, "open")
	closed := filepath.Join(dir, "closed")
	for p, mode := range map[string]os.FileMode{open: 0o777, closed: 0o755} {
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(p, mode)
	}
	_ = os.Chmod(dir, 0o755)
	type out struct {
		euid, otherEuid int
		owner           uint32
		closedErr       error
		chownErr        error
		backEuid        int
		err             error
	}
	ch := make(chan out, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the test goroutine
		var o out
		h := newHost()
		h.anyPID = true
		o.err = h.userRunner(1000, 1000)(func() error {
			r, _, _ := unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0)
			o.euid = int(r)
			other := make(chan int)
			go func() { r, _, _ := unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0); other <- int(r) }()
			o.otherEuid = <-other
			f, err := os.Create(filepath.Join(open, "f"))
			if err != nil {
				return err
			}
			f.Close()
			var st unix.Stat_t
			_ = unix.Stat(filepath.Join(open, "f"), &st)
			o.owner = st.Uid
			_, o.closedErr = os.Create(filepath.Join(closed, "f"))
			o.chownErr = os.Chown(filepath.Join(open, "f"), 0, 0)
			return nil
		})
		r, _, _ := unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0)
		o.backEuid = int(r)
		ch <- o
	}()
	o := <-ch
	switch {
	case o.err != nil:
		t.Fatal(o.err)
	case o.euid != 1000 || o.owner != 1000:
		t.Fatalf("as the user: euid %d, new file owned by %d", o.euid, o.owner)
	case o.otherEuid == 1000 && runtime.GOMAXPROCS(0) > 1:
		t.Fatalf("another thread became the user too")
	case !errors.Is(o.closedErr, os.ErrPermission):
		t.Fatalf("created in a folder closed to the user: %v", o.closedErr)
	case !errors.Is(o.chownErr, os.ErrPermission):
		t.Fatalf("chown as the user: %v", o.chownErr)
	case o.backEuid != 0:
		t.Fatalf("euid after the switch: %d", o.backEuid)
	}
	if os.Geteuid() != 0 {
		t.Fatal("the process lost root")
	}
}

// agentPair runs an agent's serve loop on pipes with Home at a temp folder
// and returns the host's ends.
func agentPair(t *testing.T) (*bufio.Reader, io.Writer, string) {
	t.Helper()
	home := t.TempDir()
	h := newHost()
	h.homeRoot = home
	hostR, guestW := io.Pipe()
	guestR, hostW := io.Pipe()
	a := &agent{out: bufio.NewWriter(guestW), host: h}
	go a.serve(guestR)
	t.Cleanup(func() { hostW.Close(); guestW.Close() })
	return bufio.NewReader(hostR), hostW, home
}

func openStream(t *testing.T, w io.Writer, op FileOpen) {
	t.Helper()
	b, _ := json.Marshal(op)
	if err := WriteFrame(w, FrameFileOpen, b); err != nil {
		t.Fatal(err)
	}
}

// nextFrame reads the next frame of stream id (credits skipped unless asked).
func nextFrame(t *testing.T, r *bufio.Reader, id uint32, credits bool) (byte, []byte) {
	t.Helper()
	for {
		typ, p, err := ReadFrame(r, 16<<20)
		if err != nil {
			t.Fatal(err)
		}
		sid, data, err := StreamPayload(p)
		if err != nil || sid != id {
			t.Fatalf("frame %c of stream %d (%v), want stream %d", typ, sid, err, id)
		}
		if typ == FrameFileCredit && !credits {
			continue
		}
		return typ, data
	}
}

func resultOf(t *testing.T, r *bufio.Reader, id uint32) FileResult {
	t.Helper()
	typ, data := nextFrame(t, r, id, false)
	if typ != FrameFileResult {
		t.Fatalf("frame %c, want a result", typ)
	}
	var res FileResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestAgentFileStreams drives the guest's stream protocol the way the host
// does, and the way a broken host might.
func TestAgentFileStreams(t *testing.T) {
	r, w, home := agentPair(t)
	user := func(op FileOpen) FileOpen { op.UID, op.GID = 1000, 1000; return op }

	// put in two chunks, then get it back.
	openStream(t, w, user(FileOpen{Stream: 1, Op: "put", Path: "/home/sandbox/d/x", Max: 100}))
	_ = WriteStreamFrame(w, FrameFileData, 1, []byte("hello "))
	_ = WriteStreamFrame(w, FrameFileData, 1, []byte("world"))
	_ = WriteStreamFrame(w, FrameFileData, 1, nil)
	if res := resultOf(t, r, 1); res.Code != "" || res.Info.Size != 11 {
		t.Fatalf("put: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(home, "d", "x")); string(b) != "hello world" {
		t.Fatalf("put wrote %q", b)
	}
	openStream(t, w, user(FileOpen{Stream: 2, Op: "get", Path: "d/x", Max: 100}))
	if res := resultOf(t, r, 2); res.Info == nil || res.Info.Size != 11 {
		t.Fatalf("get: %+v", res)
	}
	var got []byte
	for {
		typ, data := nextFrame(t, r, 2, false)
		if typ != FrameFileChunk {
			t.Fatalf("frame %c in a download", typ)
		}
		if len(data) == 0 {
			break
		}
		got = append(got, data...)
	}
	if string(got) != "hello world" {
		t.Fatalf("get: %q", got)
	}

	// A cancelled upload, an oversize one and one over the window leave
	// nothing behind.
	for i, tc := range []struct {
		name string
		send func(id uint32)
		code string
	}{
		{"cancel", func(id uint32) {
			_ = WriteStreamFrame(w, FrameFileData, id, []byte("part"))
			_ = WriteStreamFrame(w, FrameFileCancel, id, nil)
		}, CodeAborted},
		{"over max", func(id uint32) {
			_ = WriteStreamFrame(w, FrameFileData, id, bytes.Repeat([]byte("x"), 101))
			_ = WriteStreamFrame(w, FrameFileData, id, nil)
		}, CodeTooLarge},
		{"over the window", func(id uint32) {
			chunk := bytes.Repeat([]byte("x"), FileChunk)
			for j := 0; j < FileWindow/FileChunk+2; j++ {
				_ = WriteStreamFrame(w, FrameFileData, id, chunk)
			}
			_ = WriteStreamFrame(w, FrameFileData, id, nil)
		}, CodeAborted},
	} {
		id := uint32(10 + i)
		max := int64(100)
		if tc.name == "over the window" {
			max = 1 << 30
		}
		openStream(t, w, user(FileOpen{Stream: id, Op: "put", Path: "d/x", Max: max}))
		tc.send(id)
		if res := resultOf(t, r, id); res.Code != tc.code {
			t.Fatalf("%s: %+v, want code %s", tc.name, res, tc.code)
		}
		if b, _ := os.ReadFile(filepath.Join(home, "d", "x")); string(b) != "hello world" {
			t.Fatalf("%s: file now %q", tc.name, b)
		}
		ents, _ := os.ReadDir(filepath.Join(home, "d"))
		if len(ents) != 1 {
			t.Fatalf("%s: left %v", tc.name, ents)
		}
	}

	// Refused opens: root, a bad path, an unknown op.
	for i, op := range []FileOpen{
		{Stream: 20, Op: "put", Path: "y", Max: 10},
		user(FileOpen{Stream: 21, Op: "get", Path: "../etc/passwd", Max: 10}),
		user(FileOpen{Stream: 22, Op: "chmod", Path: "y", Max: 10}),
	} {
		openStream(t, w, op)
		if res := resultOf(t, r, op.Stream); res.Code != CodeInvalid {
			t.Fatalf("open %d: %+v", i, res)
		}
	}

	// Frames of unknown streams, short frames and junk are ignored: the
	// loop still answers.
	_ = WriteStreamFrame(w, FrameFileData, 999, []byte("stray"))
	_ = WriteFrame(w, FrameFileData, []byte{1})
	_ = WriteFrame(w, FrameFileWindow, []byte{0, 0, 0, 2, 9})
	_ = WriteFrame(w, FrameFileOpen, []byte("{"))
	openStream(t, w, user(FileOpen{Stream: 30, Op: "list", Path: "/home/sandbox", Max: 10}))
	if res := resultOf(t, r, 30); res.Code != "" || len(res.Entries) != 1 || res.Entries[0].Name != "d" {
		t.Fatalf("list: %+v", res)
	}
}

// TestAgentDownloadWaitsForCredit: the guest sends no more than the window
// until the host grants more.
func TestAgentDownloadWaitsForCredit(t *testing.T) {
	r, w, home := agentPair(t)
	size := FileWindow + FileChunk + 5
	if err := os.WriteFile(filepath.Join(home, "big"), bytes.Repeat([]byte("z"), size), 0o644); err != nil {
		t.Fatal(err)
	}
	openStream(t, w, FileOpen{Stream: 7, Op: "get", Path: "big", Max: 1 << 30, UID: 1000, GID: 1000})
	resultOf(t, r, 7)
	got := 0
	for got < FileWindow {
		_, data := nextFrame(t, r, 7, false)
		got += len(data)
	}
	if got != FileWindow {
		t.Fatalf("sent %d before credit, window %d", got, FileWindow)
	}
	next := make(chan int, 1)
	go func() { _, data := nextFrame(t, r, 7, false); next <- len(data) }()
	select {
	case n := <-next:
		t.Fatalf("sent %d more bytes without credit", n)
	case <-time.After(200 * time.Millisecond):
	}
	_ = WriteStreamFrame(w, FrameFileWindow, 7, CreditData(FileWindow))
	got += <-next
	for {
		_, data := nextFrame(t, r, 7, false)
		if len(data) == 0 {
			break
		}
		got += len(data)
	}
	if got != size {
		t.Fatalf("downloaded %d of %d", got, size)
	}
}

// TestAgentStreamSlotFreedBeforeItsEnd: a stream leaves the guest's table
// before its last frame goes out, so a host that opens the next stream as
// soon as it has that frame never finds the table full.
func TestAgentStreamSlotFreedBeforeItsEnd(t *testing.T) {
	r, w, _ := agentPair(t)
	for round := 0; round < 50; round++ {
		base := uint32(100 * (round + 1))
		for i := uint32(0); i < MaxFileStreams; i++ {
			openStream(t, w, FileOpen{Stream: base + i, Op: "put", Path: "p", Max: 10, UID: 1000, GID: 1000})
		}
		// One ends; at once another opens in its place.
		_ = WriteStreamFrame(w, FrameFileData, base, nil)
		if res := resultOf(t, r, base); res.Code != "" {
			t.Fatalf("round %d: put: %+v", round, res)
		}
		openStream(t, w, FileOpen{Stream: base + 50, Op: "list", Path: "/home/sandbox", Max: 10, UID: 1000, GID: 1000})
		if res := resultOf(t, r, base+50); res.Code != "" {
			t.Fatalf("round %d: the next stream was refused: %+v", round, res)
		}
		for i := uint32(1); i < MaxFileStreams; i++ {
			_ = WriteStreamFrame(w, FrameFileCancel, base+i, nil)
			if res := resultOf(t, r, base+i); res.Code != CodeAborted {
				t.Fatalf("round %d: cancel: %+v", round, res)
			}
		}
	}
}
