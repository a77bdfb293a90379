package guest

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The bridge runs as the user, whose code can write to its output: every
// line is hostile input to the guest.
func TestReadBridgeHostileLines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		input string
		max   int
		want  []string // the t of each message decoded, in order
	}{
		{name: "plain", input: `{"t":"ready","pid":7}` + "\n" + `{"t":"done"}` + "\n", max: 1 << 10, want: []string{"ready", "done"}},
		{name: "not json skipped", input: "garbage\n{\"t\":\"done\"}\n", max: 1 << 10, want: []string{"done"}},
		{name: "over-long line skipped whole", input: `{"t":"stream","text":"` + strings.Repeat("a", 5000) + "\"}\n{\"t\":\"done\"}\n", max: 100, want: []string{"done"}},
		{name: "over-long line past the reader's buffer", input: `{"t":"x","text":"` + strings.Repeat("b", 200<<10) + "\"}\n{\"t\":\"done\"}\n", max: 1 << 10, want: []string{"done"}},
		{name: "no final newline", input: `{"t":"done"}`, max: 1 << 10, want: []string{"done"}},
		{name: "nul and binary", input: "\x00\xff\xfe\n{\"t\":\"done\"}\n", max: 1 << 10, want: []string{"done"}},
		{name: "empty", input: "", max: 1 << 10, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msgs := make(chan bridgeMsg, 16)
			go readBridge(strings.NewReader(tc.input), msgs, tc.max)
			var got []string
			timeout := time.After(10 * time.Second)
			for done := false; !done; {
				select {
				case m, ok := <-msgs:
					if !ok {
						done = true
						break
					}
					got = append(got, m.T)
				case <-timeout:
					t.Fatal("readBridge did not end")
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReadLineCap(t *testing.T) {
	t.Parallel()
	br := bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 300)+"\nok\n"), 16)
	if line, err := readLine(br, 100); err != nil || line != nil {
		t.Fatalf("over-long line: %q %v", line, err)
	}
	if line, err := readLine(br, 100); err != nil || string(line) != "ok\n" {
		t.Fatalf("next line: %q %v", line, err)
	}
	if _, err := readLine(br, 100); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

// A pid the bridge names is signalled by the guest as root: only a
// process of the user's, never pid 1 or another user's, is accepted.
func TestUserPIDRefusesOthers(t *testing.T) {
	t.Parallel()
	proc := t.TempDir()
	for _, pid := range []string{"1", "42"} {
		if err := os.Mkdir(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	me := os.Getuid()
	for _, tc := range []struct {
		name     string
		pid, uid int
		want     int
	}{
		{name: "the user's", pid: 42, uid: me, want: 42},
		{name: "another user's", pid: 42, uid: me + 1, want: 0},
		{name: "pid 1", pid: 1, uid: me, want: 0},
		{name: "zero", pid: 0, uid: me, want: 0},
		{name: "negative (a process group)", pid: -42, uid: me, want: 0},
		{name: "minus one (every process)", pid: -1, uid: me, want: 0},
		{name: "no such process", pid: 43, uid: me, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := userPIDIn(proc, tc.pid, tc.uid); got != tc.want {
				t.Fatalf("userPIDIn(%d, %d) = %d, want %d", tc.pid, tc.uid, got, tc.want)
			}
		})
	}
}

func TestLastLine(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                              "no output",
		"a\nb\n":                        "b",
		"Traceback\nImportError: x\n\n": "ImportError: x",
		"one":                           "one",
	} {
		if got := lastLine([]byte(in)); got != want {
			t.Errorf("lastLine(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzReadBridge feeds the guest's reader of the bridge's output (which
// the user's code can write to) arbitrary bytes: it must end, and pass on
// only lines within its cap.
func FuzzReadBridge(f *testing.F) {
	f.Add([]byte(`{"t":"ready","pid":7}` + "\n" + `{"t":"done"}` + "\n"))
	f.Add([]byte(`{"t":"display","type":"display_data","data":{"image/png":"AAAA"}}`))
	f.Add([]byte("\n\n\n{\x00}\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		const max = 64
		msgs := make(chan bridgeMsg, 1)
		go readBridge(bytes.NewReader(in), msgs, max)
		for range msgs {
		}
		br := bufio.NewReaderSize(bytes.NewReader(in), 16)
		for {
			line, err := readLine(br, max)
			if len(line) > max {
				t.Fatalf("a line of %d bytes passed the %d cap", len(line), max)
			}
			if err != nil {
				return
			}
		}
	})
}
