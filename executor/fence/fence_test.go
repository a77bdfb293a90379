package fence

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// nopCloser turns a writer into the ready end of Run.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// TestRunFenceProtocol: a 'q' from the node ends the fence quietly, EOF
// fences (nothing to do under an empty root), and a second fence on the
// same lock is ready only once the first has finished.
func TestRunFenceProtocol(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Root: filepath.Join(dir, "runsc"), Homes: filepath.Join(dir, "sessions"), Lock: filepath.Join(dir, "fence.lock")}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()

	var ready strings.Builder
	if err := Run(ctx, cfg, strings.NewReader("q"), nopCloser{&ready}, log); err != nil || ready.String() != "ready\n" {
		t.Fatalf("quit: %v, ready %q", err, ready.String())
	}
	if err := Run(ctx, cfg, strings.NewReader(""), nopCloser{io.Discard}, log); err != nil {
		t.Fatalf("EOF with nothing to fence: %v", err)
	}

	r1, w1 := io.Pipe()
	first := make(chan error, 1)
	firstReady := make(chan struct{})
	go func() {
		first <- Run(ctx, cfg, r1, nopCloser{writerFunc(func(p []byte) (int, error) { close(firstReady); return len(p), nil })}, log)
	}()
	<-firstReady
	secondReady := make(chan struct{})
	second := make(chan error, 1)
	go func() {
		second <- Run(ctx, cfg, strings.NewReader("q"), nopCloser{writerFunc(func(p []byte) (int, error) { close(secondReady); return len(p), nil })}, log)
	}()
	select {
	case <-secondReady:
		t.Fatal("a second fence was ready while the first held the lock")
	case <-time.After(200 * time.Millisecond):
	}
	w1.Close() // the node dies
	if err := <-first; err != nil {
		t.Fatalf("first fence: %v", err)
	}
	select {
	case <-secondReady:
	case <-time.After(5 * time.Second):
		t.Fatal("the second fence never got the lock")
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestRunFenceHold: a deadline from the node ("hold <ns>") that passes
// without a newer one fences, and the fence goes on; "free" and a newer
// deadline disarm the older one; a line cut short by the node's death is
// EOF; 'q' still quits.
func TestRunFenceHold(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Root: filepath.Join(dir, "runsc"), Homes: filepath.Join(dir, "sessions"), Lock: filepath.Join(dir, "fence.lock")}
	logs := &testenv.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	fired := func() int { return strings.Count(logs.String(), "hold deadline passed") }
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), cfg, r, nopCloser{io.Discard}, log) }()
	say := func(s string) {
		t.Helper()
		if _, err := io.WriteString(w, s); err != nil {
			t.Fatal(err)
		}
	}

	say("hold 200000000\n") // 200 ms
	say("free\n")
	time.Sleep(400 * time.Millisecond)
	if n := fired(); n != 0 {
		t.Fatalf("a disarmed deadline fired %d times", n)
	}
	say("hold 200000000\n")
	say("hold 2000000000\n") // the newer one counts
	time.Sleep(400 * time.Millisecond)
	if n := fired(); n != 0 {
		t.Fatalf("a deadline replaced by a later one fired %d times", n)
	}
	say("hold 100000000\n")
	deadline := time.Now().Add(5 * time.Second)
	for fired() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if fired() != 1 {
		t.Fatalf("the deadline did not fire; log:\n%s", logs.String())
	}
	select {
	case err := <-done:
		t.Fatalf("the fence ended after its deadline: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	say("hold 100000000\n") // armed again
	for fired() == 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if fired() != 2 {
		t.Fatalf("the re-armed deadline did not fire; log:\n%s", logs.String())
	}
	say("q")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("quit: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("'q' did not end the fence")
	}
	if strings.Contains(logs.String(), "node process gone") {
		t.Fatalf("a quit fenced; log:\n%s", logs.String())
	}

	r, w = io.Pipe()
	go func() { done <- Run(context.Background(), cfg, r, nopCloser{io.Discard}, log) }()
	say("hold 1000")
	w.Close()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(logs.String(), "node process gone") {
			t.Fatalf("EOF in a line: %v; log:\n%s", err, logs.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("EOF in a line did not fence")
	}
}
