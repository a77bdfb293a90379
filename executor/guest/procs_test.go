package guest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOutLogKeepsLatestAndReportsGaps(t *testing.T) {
	t.Parallel()
	l := outLog{max: 3 * (10 + chunkOverhead)}
	for i := range 5 {
		l.add(StreamStdout, bytes.Repeat([]byte{byte('a' + i)}, 10))
	}
	if l.end != 50 || l.base != 20 {
		t.Fatalf("end %d base %d, want 50 and 20", l.end, l.base)
	}
	tests := []struct {
		name        string
		from        int64
		max         int
		wantData    string
		wantNext    int64
		wantDropped int64
	}{
		{name: "from the start: a gap, then what is kept", from: 0, max: 1 << 20, wantData: strings.Repeat("c", 10) + strings.Repeat("d", 10) + strings.Repeat("e", 10), wantNext: 50, wantDropped: 20},
		{name: "inside a chunk", from: 25, max: 1 << 20, wantData: strings.Repeat("c", 5) + strings.Repeat("d", 10) + strings.Repeat("e", 10), wantNext: 50},
		{name: "bounded by max", from: 20, max: 15, wantData: strings.Repeat("c", 10) + strings.Repeat("d", 5), wantNext: 35},
		{name: "at the end", from: 50, max: 100, wantNext: 50},
		{name: "past the end is the end", from: 1 << 40, max: 100, wantNext: 50},
		{name: "negative is a gap from 0", from: -5, max: 10, wantData: strings.Repeat("c", 10), wantNext: 30, wantDropped: 25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chunks, next, dropped := l.read(tt.from, tt.max)
			var got []byte
			off := next - int64(0)
			for i, c := range chunks {
				if i == 0 {
					off = c.Offset
				} else if c.Offset != off {
					t.Fatalf("chunk %d at offset %d, want %d", i, c.Offset, off)
				}
				got = append(got, c.Data...)
				off += int64(len(c.Data))
			}
			if string(got) != tt.wantData || next != tt.wantNext || dropped != tt.wantDropped {
				t.Fatalf("read(%d, %d) = %q next %d dropped %d; want %q next %d dropped %d", tt.from, tt.max, got, next, dropped, tt.wantData, tt.wantNext, tt.wantDropped)
			}
		})
	}
}

// A program that prints one byte at a time cannot grow the log past its
// bound through the chunks' own cost.
func TestOutLogBoundsTinyChunks(t *testing.T) {
	t.Parallel()
	l := outLog{}
	for range 200_000 {
		l.add(StreamStderr, []byte{'x'})
	}
	if l.size > ProcOutputBytes {
		t.Fatalf("log holds %d bytes, over its %d bound", l.size, ProcOutputBytes)
	}
	if want := ProcOutputBytes / (1 + chunkOverhead); len(l.chunks) > want {
		t.Fatalf("%d chunks kept, want at most %d", len(l.chunks), want)
	}
}

func TestParseStatHostileNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stat   string
		ok     bool
		sid    int
		zombie bool
	}{
		{name: "plain", stat: "42 (sleep) S 1 42 42 0 -1", ok: true, sid: 42},
		{name: "comm with spaces and parens", stat: "42 (a) S 1 7 7 (x) R 9 9 9 9) S 1 5 6 0", ok: true, sid: 6},
		{name: "comm that fakes the fields", stat: "42 (x) S 1 1 1) S 1 2 3 0", ok: true, sid: 3},
		{name: "zombie", stat: "42 (z) Z 1 42 42 0", ok: true, sid: 42, zombie: true},
		{name: "no paren", stat: "42 sleep S 1 42 42", ok: false},
		{name: "short", stat: "42 (s) S 1", ok: false},
		{name: "not a number", stat: "42 (s) S 1 2 x 0", ok: false},
		{name: "empty", stat: "", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ok := parseStat(42, []byte(tt.stat))
			if ok != tt.ok || (ok && (st.sid != tt.sid || st.zombie != tt.zombie || st.pid != 42)) {
				t.Fatalf("parseStat(%q) = %+v, %v; want sid %d zombie %v ok %v", tt.stat, st, ok, tt.sid, tt.zombie, tt.ok)
			}
		})
	}
}

func TestSparedFromFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name    string
		content *string
		spared  []int
		not     []int
	}{
		{name: "no file spares nothing", content: nil, not: []int{5}},
		{name: "listed sessions", content: ptr("12\n34\n"), spared: []int{12, 34}, not: []int{1, 13}},
		{name: "pid 1 and garbage never", content: ptr("1\n0\n-4\nabc\n99999999999999999999\n7\n"), spared: []int{7}, not: []int{1, 0, -4}},
		{name: "empty spares nothing", content: ptr(""), not: []int{12}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := dir + "/procs" + strconv.Itoa(i)
			if tt.content != nil {
				if err := os.WriteFile(p, []byte(*tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			spare := sparedFromFile(p)
			for _, sid := range tt.spared {
				if spare == nil || !spare(sid) {
					t.Errorf("session %d not spared", sid)
				}
			}
			for _, sid := range tt.not {
				if spare != nil && spare(sid) {
					t.Errorf("session %d spared", sid)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// waitStart is a test's startCmd: the test process waits for its own child
// (it is not pid 1, and a reaper of every child would take other tests').
func waitStart(cmd *exec.Cmd) (<-chan syscall.WaitStatus, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	go func() {
		_ = cmd.Wait()
		ch <- cmd.ProcessState.Sys().(syscall.WaitStatus)
	}()
	return ch, nil
}

func newTestTable(t *testing.T) (*procTable, chan ProcInfo) {
	t.Helper()
	ended := make(chan ProcInfo, 64)
	tb := newProcTable(waitStart, func(i ProcInfo) { ended <- i }, "")
	t.Cleanup(func() {
		for _, i := range tb.list() {
			if i.State == ProcRunning {
				_ = syscall.Kill(i.PID, syscall.SIGKILL)
			}
		}
	})
	return tb, ended
}

// hostStart is a start on the host: as the test's own user.
func hostStart(argv []string) *ProcStart {
	return &ProcStart{Argv: argv, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: os.TempDir(), UID: os.Getuid(), GID: os.Getgid()}
}

// readAll reads a process's output until it has ended.
func readAll(t *testing.T, tb *procTable, pid int) (map[string]string, *ProcInfo) {
	t.Helper()
	out := map[string]string{}
	from := int64(0)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		o, err := tb.read(pid, from, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range o.Chunks {
			out[c.Stream] += string(c.Data)
		}
		from = o.Next
		if o.Done {
			return out, o.Proc
		}
	}
	t.Fatalf("process %d did not end", pid)
	return nil, nil
}

func procCode(err error) string {
	var pe *procError
	if errors.As(err, &pe) {
		return pe.code
	}
	return ""
}

func TestProcTableOutputAndExit(t *testing.T) {
	t.Parallel()
	tb, ended := newTestTable(t)
	i, err := tb.start(hostStart([]string{"sh", "-c", "echo out; echo err >&2; exit 3"}))
	if err != nil {
		t.Fatal(err)
	}
	if i.State != ProcRunning || i.PID <= 0 || i.Argv[0] != "sh" {
		t.Fatalf("started %+v", i)
	}
	out, end := readAll(t, tb, i.PID)
	if out[StreamStdout] != "out\n" || out[StreamStderr] != "err\n" {
		t.Fatalf("output %q", out)
	}
	if end.State != ProcExited || end.ExitCode == nil || *end.ExitCode != 3 || end.Signal != "" {
		t.Fatalf("end %+v", end)
	}
	select {
	case e := <-ended:
		if e.PID != i.PID || e.State != ProcExited {
			t.Fatalf("end reported %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("end not reported")
	}
	if _, err := tb.stdin(i.PID, []byte("x"), false); procCode(err) != ProcCodeNotRunning {
		t.Fatalf("stdin to an ended process: %v", err)
	}
	if err := tb.signal(i.PID, int(syscall.SIGTERM)); procCode(err) != ProcCodeNotRunning {
		t.Fatalf("signal to an ended process: %v", err)
	}
}

func TestProcTableStdinRoundTrip(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(t)
	s := hostStart([]string{"cat"})
	s.Stdin = true
	i, err := tb.start(s)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := tb.stdin(i.PID, []byte("hello "), false); err != nil || n != 6 {
		t.Fatalf("stdin: %d, %v", n, err)
	}
	if _, err := tb.stdin(i.PID, []byte("world"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.stdin(i.PID, []byte("late"), false); procCode(err) != ProcCodeNoStdin && procCode(err) != ProcCodeNotRunning {
		t.Fatalf("stdin after eof: %v", err)
	}
	out, end := readAll(t, tb, i.PID)
	if out[StreamStdout] != "hello world" || *end.ExitCode != 0 {
		t.Fatalf("cat gave %q, %+v", out, end)
	}
	// Without stdin: writes are refused, the program reads EOF.
	j, err := tb.start(hostStart([]string{"cat"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.stdin(j.PID, []byte("x"), false); procCode(err) != ProcCodeNoStdin && procCode(err) != ProcCodeNotRunning {
		t.Fatalf("stdin without stdin: %v", err)
	}
	if _, end := readAll(t, tb, j.PID); *end.ExitCode != 0 {
		t.Fatalf("cat without stdin: %+v", end)
	}
}

func TestProcTableStdinQueueBound(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(t)
	s := hostStart([]string{"sleep", "30"}) // never reads
	s.Stdin = true
	i, err := tb.start(s)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), ProcStdinBytes/2)
	full := false
	for range 8 { // the pipe takes some, the queue the rest
		if _, err := tb.stdin(i.PID, big, false); procCode(err) == ProcCodeStdinFull {
			full = true
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if !full {
		t.Fatal("stdin queue grew without bound")
	}
	if err := tb.signal(i.PID, int(syscall.SIGKILL)); err != nil {
		t.Fatal(err)
	}
	if _, end := readAll(t, tb, i.PID); end.Signal != "SIGKILL" || *end.ExitCode != 137 {
		t.Fatalf("end %+v", end)
	}
}

func TestProcTableTimeoutAndSessionCleanup(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(t)
	// The leader leaves a sleep behind in its session; when the leader is
	// killed at its timeout, the sleep goes too (else it would hold the
	// output open).
	s := hostStart([]string{"sh", "-c", "sleep 300 & echo $!; wait"})
	s.TimeoutMS = 300
	i, err := tb.start(s)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, end := readAll(t, tb, i.PID)
	if !end.TimedOut || end.Signal != "SIGKILL" {
		t.Fatalf("end %+v", end)
	}
	if took := time.Since(start); took > outputGrace {
		t.Fatalf("output ended after %s: the session's rest was not killed", took)
	}
	child, err := strconv.Atoi(strings.TrimSpace(out[StreamStdout]))
	if err != nil {
		t.Fatalf("child pid %q", out[StreamStdout])
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
		if st, ok := parseStat(child, b); err != nil || (ok && st.zombie) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader's child %d outlived it", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestProcTableLimitsAndBadCalls(t *testing.T) {
	t.Parallel()
	tb, _ := newTestTable(t)
	if r := tb.serveCall(&ProcCall{Op: "start", Start: hostStart([]string{"/nonexistent/prog"})}); r.Code != ProcCodeStart {
		t.Fatalf("start of a missing program: %+v", r)
	}
	var pids []int
	for range MaxRunningProcs {
		i, err := tb.start(hostStart([]string{"sleep", "30"}))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, i.PID)
	}
	if _, err := tb.start(hostStart([]string{"sleep", "30"})); procCode(err) != ProcCodeLimit {
		t.Fatalf("start past the cap: %v", err)
	}
	if err := tb.signal(pids[0], int(syscall.SIGTERM)); err != nil {
		t.Fatal(err)
	}
	readAll(t, tb, pids[0])
	// One ended: one more may start.
	if _, err := tb.start(hostStart([]string{"sleep", "30"})); err != nil {
		t.Fatalf("start after one ended: %v", err)
	}
	bad := []struct {
		name string
		call ProcCall
		code string
	}{
		{name: "unknown op", call: ProcCall{Op: "fork"}, code: ProcCodeInvalid},
		{name: "start without process", call: ProcCall{Op: "start"}, code: ProcCodeInvalid},
		{name: "empty argv", call: ProcCall{Op: "start", Start: &ProcStart{Cwd: "/"}}, code: ProcCodeInvalid},
		{name: "relative cwd", call: ProcCall{Op: "start", Start: &ProcStart{Argv: []string{"true"}, Cwd: "tmp"}}, code: ProcCodeInvalid},
		{name: "zero terminal", call: ProcCall{Op: "start", Start: &ProcStart{Argv: []string{"true"}, Cwd: "/", PTY: &WinSize{}}}, code: ProcCodeInvalid},
		{name: "unknown pid", call: ProcCall{Op: "get", PID: 999999}, code: ProcCodeNotFound},
		{name: "read unknown", call: ProcCall{Op: "read", PID: -1}, code: ProcCodeNotFound},
		{name: "signal 0", call: ProcCall{Op: "signal", PID: pids[1], Signal: 0}, code: ProcCodeInvalid},
		{name: "signal 99", call: ProcCall{Op: "signal", PID: pids[1], Signal: 99}, code: ProcCodeInvalid},
		{name: "resize a pipe process", call: ProcCall{Op: "resize", PID: pids[1], Size: &WinSize{Cols: 80, Rows: 24}}, code: ProcCodeNotPTY},
		{name: "resize without size", call: ProcCall{Op: "resize", PID: pids[1]}, code: ProcCodeInvalid},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if r := tb.serveCall(&tt.call); r.Code != tt.code || r.Error == "" {
				t.Fatalf("reply %+v, want code %s", r, tt.code)
			}
		})
	}
}

func TestProcTablePTY(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/ptmx"); err != nil {
		t.Skip("no /dev/ptmx on this host")
	}
	tb, _ := newTestTable(t)
	s := hostStart([]string{"sh", "-c", "stty size; read line; echo got:$line; stty size"})
	s.PTY = &WinSize{Cols: 100, Rows: 40}
	i, err := tb.start(s)
	if err != nil {
		t.Fatal(err)
	}
	if !i.PTY || !i.Stdin {
		t.Fatalf("started %+v", i)
	}
	// The first size is printed before the read; then resize and answer.
	deadline := time.Now().Add(10 * time.Second)
	var seen string
	from := int64(0)
	for !strings.Contains(seen, "40 100") && time.Now().Before(deadline) {
		o, err := tb.read(i.PID, from, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range o.Chunks {
			seen += string(c.Data)
		}
		from = o.Next
	}
	if err := tb.resize(i.PID, WinSize{Cols: 132, Rows: 50}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.stdin(i.PID, []byte("hi\n"), false); err != nil {
		t.Fatal(err)
	}
	out, end := readAll(t, tb, i.PID)
	all := out[StreamPTY]
	if !strings.Contains(all, "40 100") || !strings.Contains(all, "got:hi") || !strings.Contains(all, "50 132") || *end.ExitCode != 0 {
		t.Fatalf("terminal output %q, end %+v", all, end)
	}
	if err := tb.resize(i.PID, WinSize{Cols: 0, Rows: 5}); procCode(err) != ProcCodeInvalid {
		t.Fatalf("resize to 0 cols: %v", err)
	}
}
