package executor

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/host"
)

// Stale upload staging files (an upload cut short by a kill of the
// sandbox or of the server) are removed by the guest when it starts:
// whichever way a home comes into a new sandbox.

const (
	// plantStaging writes two staging files the way a killed upload
	// leaves them: 20 MiB in the home, 1 MiB in a sub-folder.
	plantStaging = "mkdir -p /home/sandbox/sub && head -c 20971520 /dev/zero > /home/sandbox/.sbx-upload-0123456789abcdef && " +
		"head -c 1048576 /dev/zero > /home/sandbox/sub/.sbx-upload-00000000000000ff && sync"
	// countStaging prints how many staging files the home holds and its
	// used KiB.
	countStaging = "find /home/sandbox -name '.sbx-upload-*' | wc -l; df -k --output=used /home/sandbox | tail -1"
)

// stagingState runs countStaging in session id.
func stagingState(t *testing.T, e *Executor, id string) (files int, usedKiB int64) {
	t.Helper()
	r := run(t, e, id, countStaging, 30*time.Second)
	f := strings.Fields(r.Stdout)
	if len(f) != 2 {
		t.Fatalf("counting staging files: %+v", r)
	}
	files, _ = strconv.Atoi(f[0])
	usedKiB, _ = strconv.ParseInt(f[1], 10, 64)
	return files, usedKiB
}

// wantSwept fails t unless session id holds no staging file and uses no
// more than base KiB (and a little slack) of its home.
func wantSwept(t *testing.T, e *Executor, id, after string, base int64) {
	t.Helper()
	files, used := stagingState(t, e, id)
	if files != 0 {
		t.Fatalf("after %s: %d staging files left in the home", after, files)
	}
	if used > base+2048 {
		t.Fatalf("after %s: home uses %d KiB, %d before the upload was cut", after, used, base)
	}
}

func plant(t *testing.T, e *Executor, id string) {
	t.Helper()
	run(t, e, id, plantStaging, 30*time.Second)
	if files, _ := stagingState(t, e, id); files != 2 {
		t.Fatalf("planted %d staging files, want 2", files)
	}
}

// TestStaleStagingSweptOnStart: staging files left in a home are gone
// (and their space free again) after a resume, a clean restart, and in a
// fork's child. (After a crash the sandbox lives on and is adopted: its
// guest stops the cut upload itself, TestUploadCutByCrashLeavesNothing.)
func TestStaleStagingSweptOnStart(t *testing.T) {
	t.Parallel()
	_, open := restartable(t)
	e, st := open()
	ctx := context.Background()
	s := mustSession(t, e, "bash")
	_, base := stagingState(t, e, s.ID)

	plant(t, e, s.ID)
	if _, err := e.Durable().HibernateSession(ctx, "k1", s.ID); err != nil {
		t.Fatal(err)
	}
	wantSwept(t, e, s.ID, "hibernate and resume", base)

	plant(t, e, s.ID)
	c, err := e.Durable().ForkSession(ctx, s.ID, ForkSpec{Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	wantSwept(t, e, c.ID, "fork (the child)", base)

	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()
	e, st = open()
	defer func() {
		_ = e.Stop(context.Background())
		st.Close()
	}()
	wantSwept(t, e, s.ID, "a clean restart", base)
}

// dropChannels closes e's ends of its guests' channels, as the death of
// the server's process does.
func dropChannels(e *Executor) {
	e.agents.CloseAll()
}

// blockingReader yields n zero bytes, then blocks until release is
// closed, then fails.
type blockingReader struct {
	n       int64
	release chan struct{}
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		<-r.release
		return 0, io.ErrUnexpectedEOF
	}
	if int64(len(p)) > r.n {
		p = p[:r.n]
	}
	clear(p)
	r.n -= int64(len(p))
	return len(p), nil
}

// TestUploadCutByCrashLeavesNothing: an upload in progress when the
// server dies leaves no staging file in the home once the session serves
// again: the guest, whose channel closed, stops it.
func TestUploadCutByCrashLeavesNothing(t *testing.T) {
	t.Parallel()
	_, open := restartable(t)
	e, st := open()
	s := mustSession(t, e, "bash")
	_, base := stagingState(t, e, s.ID)

	body := &blockingReader{n: 20 << 20, release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := e.files.PutFile(context.Background(), "k1", s.ID, "big.bin", body, 40<<20)
		done <- err
	}()
	// The staging file is seen from the host through the home's mount.
	mnt := host.HomeMount(e.boxes.dir(s.ID))
	deadline := time.Now().Add(30 * time.Second)
	for {
		ents, _ := os.ReadDir(mnt)
		var size int64
		for _, ent := range ents {
			if strings.HasPrefix(ent.Name(), ".sbx-upload-") {
				if fi, err := ent.Info(); err == nil {
					size = fi.Size()
				}
			}
		}
		if size >= 20<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 20 MiB staging file in %s", mnt)
		}
		time.Sleep(50 * time.Millisecond)
	}
	crash(e, st)
	dropChannels(e)   // the server's process died: its ends of the channels close
	e2, st2 := open() // adopts the sandbox, the upload cut in it
	defer func() {
		_ = e2.Stop(context.Background())
		st2.Close()
	}()
	close(body.release)
	<-done
	wantSwept(t, e2, s.ID, "an upload cut by a crash", base)
}

// TestStaleStagingSweptOnAdoption: a session another node takes over
// (claim, then Adopt) serves there without the staging files its home
// held.
func TestStaleStagingSweptOnAdoption(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := c.start(t, "a", c.nodeConfig(t))
	b := c.start(t, "b", c.nodeConfig(t))
	ctx := context.Background()
	s, err := a.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	_, base := stagingState(t, a, s.ID)
	plant(t, a, s.ID)
	c.claim(t, "b", s.ID)
	// a finds out on its next state write and lets go of the session.
	if _, err := a.Durable().HibernateSession(ctx, "k1", s.ID); !errors.Is(err, ErrSessionMoved) {
		t.Fatalf("hibernate on a after b's claim: %v, want ErrSessionMoved", err)
	}
	if _, err := b.Node().Adopt(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	wantSwept(t, b, s.ID, "adoption by another node", base)
}
