package e2b

import (
	"errors"
	"strings"
	"testing"
)

// readSSE hands over each event whole, the heartbeats, the callbacks' own
// errors as they are, and a stream that cannot be read as *sseReadError.
func TestReadSSE(t *testing.T) {
	stream := ": hb\n\nevent: stdout\ndata: {\"a\":1}\n\n\nevent: exit\ndata: x\ndata: y\n\nevent: after\ndata: z\n\n"
	var got []string
	beats := 0
	ended, err := readSSE(strings.NewReader(stream), 1<<10, func(name string, data []byte) (bool, error) {
		got = append(got, name+"="+string(data))
		return name == "exit", nil
	}, func() error { beats++; return nil })
	if !ended || err != nil || beats != 1 || strings.Join(got, " ") != `stdout={"a":1} exit=xy` {
		t.Fatalf("ended %v err %v beats %d events %q", ended, err, beats, got)
	}

	// Ended without its end: false, nil; no heartbeat callback is fine.
	ended, err = readSSE(strings.NewReader(": hb\nevent: a\ndata: 1\n\n"), 1<<10, func(string, []byte) (bool, error) { return false, nil }, nil)
	if ended || err != nil {
		t.Fatalf("a stream that just ends: %v %v", ended, err)
	}

	boom := errors.New("client gone")
	_, err = readSSE(strings.NewReader("event: a\ndata: 1\n\n"), 1<<10, func(string, []byte) (bool, error) { return false, boom }, nil)
	var rerr *sseReadError
	if !errors.Is(err, boom) || errors.As(err, &rerr) {
		t.Fatalf("a callback's error: %v", err)
	}
	_, err = readSSE(strings.NewReader(":\n"), 1<<10, nil, func() error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("a heartbeat's error: %v", err)
	}

	// A line over the cap is a read error, never a cut event.
	called := false
	_, err = readSSE(strings.NewReader("event: a\ndata: "+strings.Repeat("x", 2<<10)+"\n\n"), 1<<10, func(string, []byte) (bool, error) { called = true; return false, nil }, nil)
	if !errors.As(err, &rerr) || called {
		t.Fatalf("a line over the cap: %v (event called: %v)", err, called)
	}
}
