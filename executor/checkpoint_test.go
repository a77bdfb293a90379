package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// makeLive is the tests' stand-in for a kernel or a background process
// (other engineers' work): it marks session id live, as they do when one
// starts, and puts two things into its sandbox's memory that a cold start
// loses: a file in /tmp (a tmpfs: the sandbox's memory) and a Python
// process holding a token in a variable, which writes it to
// /tmp/holder.out and ends on SIGUSR1. The holder is a run sent on the
// agent channel with no call waiting for it (a run's processes end with
// it, and runsc restore kills every process `runsc exec` started), so no
// execute may come until readMemory has ended it. It returns the tokens.
func makeLive(t *testing.T, e *Executor, id string, holder bool) (tmpToken, procToken string) {
	t.Helper()
	tmpToken, procToken = token(), token()
	run(t, e, id, "open('/tmp/mem','w').write('"+tmpToken+"')", 0)
	if holder {
		code := "import os, signal, time\n" +
			"held = '" + procToken + "'\n" +
			"def dump(*_):\n" +
			"    open('/tmp/holder.out.tmp', 'w').write(held)\n" +
			"    os.rename('/tmp/holder.out.tmp', '/tmp/holder.out')\n" +
			"signal.signal(signal.SIGUSR1, dump)\n" +
			"open('/tmp/holder.pid.tmp', 'w').write(str(os.getpid()))\n" +
			"os.rename('/tmp/holder.pid.tmp', '/tmp/holder.pid')\n" +
			"while True:\n" +
			"    time.sleep(3600)\n"
		e.mu.Lock()
		rt := e.sessions[id].runtime
		e.mu.Unlock()
		a := e.agents.For(id)
		if a == nil {
			t.Fatal("no agent channel")
		}
		greq := e.sessionRequest(rt, nil, ExecRequest{Code: code}, 10*time.Minute)
		payload, err := json.Marshal(guest.AgentRequest{Seq: 1 << 40, Request: *greq})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Send(guest.FrameRun, payload); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if out, err := e.runsc.Run(ctx, "", "exec", id, "/bin/cat", "/tmp/holder.pid"); err == nil && len(out) > 0 {
				break
			}
			if time.Now().After(end) {
				t.Fatal("the memory holder did not start")
			}
		}
	}
	// As the kernel and process code do: the field, under the lock of a
	// call; the end of the call writes it to the store (persistLive).
	ctx := context.Background()
	s, err := e.acquire(ctx, "k1", id)
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	s.live = true
	e.mu.Unlock()
	e.releaseSession(s)
	if row, err := e.store.GetSession(ctx, id); err != nil || !row.Live {
		t.Fatalf("live not recorded at the end of the call: %+v %v", row, err)
	}
	return tmpToken, procToken
}

// readMemory reads makeLive's tokens back through `runsc exec` ("-" for
// one that is gone), ending the holder; then the agent is free for
// executes again.
func readMemory(t *testing.T, e *Executor, id string) string {
	t.Helper()
	script := `tmp=$(cat /tmp/mem 2>/dev/null || echo -)
proc=-
if [ -f /tmp/holder.pid ] && kill -USR1 "$(cat /tmp/holder.pid)" 2>/dev/null; then
  for i in $(seq 200); do [ -f /tmp/holder.out ] && break; sleep 0.05; done
  proc=$(cat /tmp/holder.out 2>/dev/null || echo -)
fi
echo "$tmp $proc"`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := e.runsc.Run(ctx, "", "exec", id, "/bin/sh", "-c", script)
	if err != nil {
		t.Fatalf("reading memory: %v", err)
	}
	// The holder ends (its run's end kills what it left, this exec too),
	// and its run's result goes to the host with no call waiting for it.
	_, _ = e.runsc.Run(ctx, "", "exec", id, "/bin/sh", "-c", `[ -f /tmp/holder.pid ] && { p=$(cat /tmp/holder.pid); rm -f /tmp/holder.pid; kill -TERM "$p"; }`)
	waitAgentFree(t, e, id)
	return strings.TrimSpace(string(out))
}

// waitAgentFree returns once a run of its own has its own result: the
// guest answers runs in order, one result each, so every result before
// it (the holder's, which a probe may have taken) has been delivered.
func waitAgentFree(t *testing.T, e *Executor, id string) {
	t.Helper()
	for end := time.Now().Add(60 * time.Second); ; {
		tok := token()
		r, err := e.Execute(context.Background(), "k1", id, ExecRequest{Code: "print('" + tok + "')"})
		if err == nil && r.Stdout == tok+"\n" {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the agent did not come free: %+v %v", r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// resumeOf resumes hibernated session id with an execute and returns its
// result (memory outcome, resume time).
func resumeOf(t *testing.T, e *Executor, id string) Result {
	t.Helper()
	r, err := e.Execute(context.Background(), "k1", id, ExecRequest{Code: "pass"})
	if err != nil {
		t.Fatalf("resuming: %v", err)
	}
	return r
}

func token() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// checkpointLeft lists the checkpoint files of session id on the host.
func checkpointLeft(e *Executor, id string) []string {
	h := e.boxes.home(id)
	var out []string
	for _, p := range []string{checkpointDir(h), checkpointDir(h) + partialSuffix} {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func TestLiveHibernateResumeKeepsMemory(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	ctx := context.Background()
	s := mustSession(t, e, "python3")
	defer e.DeleteSession(ctx, "k1", s.ID)
	tmpTok, procTok := makeLive(t, e, s.ID, true)
	committed, _ := e.Disk().Stats()
	h, err := e.Durable().HibernateSession(ctx, "k1", s.ID)
	if err != nil || h.State != StateHibernated || !h.Live || h.CheckpointBytes <= 0 {
		t.Fatalf("hibernate: %+v %v", h, err)
	}
	if got := held(t, e, s.ID); len(got) != 0 {
		t.Fatalf("a hibernated live session holds %v", got)
	}
	if after, _ := e.Disk().Stats(); after != committed+h.CheckpointBytes {
		t.Fatalf("disk committed %d after hibernation, want %d + image %d", after, committed, h.CheckpointBytes)
	}
	row, err := e.store.GetSession(ctx, s.ID)
	if err != nil || !row.Live || row.Checkpoint.Path == "" || row.Checkpoint.Bytes != h.CheckpointBytes || row.Checkpoint.Runsc == "" {
		t.Fatalf("store row: %+v %v", row, err)
	}
	fi, err := os.Stat(checkpointDir(e.boxes.home(s.ID)))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("checkpoint folder: %v %v", fi, err)
	}
	t.Logf("checkpoint: %d bytes", h.CheckpointBytes)
	// The resume, through the files API (an execute would meet the
	// holder's run in the guest).
	if _, err := e.files.List(ctx, "k1", s.ID, "/home/sandbox"); err != nil {
		t.Fatalf("resuming: %v", err)
	}
	if got, want := readMemory(t, e, s.ID), tmpTok+" "+procTok; got != want {
		t.Fatalf("memory after resume: %q, want %q", got, want)
	}
	if left := checkpointLeft(e, s.ID); len(left) != 0 {
		t.Fatalf("the image stayed after a restore: %v", left)
	}
	if after, _ := e.Disk().Stats(); after != committed {
		t.Fatalf("disk committed %d after the restore, want %d", after, committed)
	}
	v, _ := e.GetSession(ctx, "k1", s.ID)
	if !v.Live || v.Memory == nil || !v.Memory.Restored || v.CheckpointBytes != 0 {
		t.Fatalf("session view: %+v", v)
	}
	// The channel is the restored guest's: calls go through it.
	if r := run(t, e, s.ID, "print(6*7)", 0); r.Stdout != "42\n" {
		t.Fatalf("a call after the restore: %+v", r)
	}
	if e.agents.For(s.ID) == nil {
		t.Fatal("no agent channel after the restore")
	}
	// A second round, resumed by an execute, which reports the restore.
	if _, err := e.Durable().HibernateSession(ctx, "k1", s.ID); err != nil {
		t.Fatal(err)
	}
	r := resumeOf(t, e, s.ID)
	if r.ResumedMS <= 0 || r.Memory == nil || !r.Memory.Restored {
		t.Fatalf("resume not reported as restoring memory: %+v", r)
	}
	t.Logf("resume with restore took %d ms", r.ResumedMS)
	if got := readMemory(t, e, s.ID); got != tmpTok+" -" {
		t.Fatalf("memory after the second resume: %q", got)
	}
}

// Sessions without live state hibernate as before: no checkpoint, and a
// resume that says nothing of memory.
func TestNotLiveHibernatesWithoutCheckpoint(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	ctx := context.Background()
	s := mustSession(t, e, "python3")
	defer e.DeleteSession(ctx, "k1", s.ID)
	run(t, e, s.ID, "open('/tmp/mem','w').write('x')", 0)
	h, err := e.Durable().HibernateSession(ctx, "k1", s.ID)
	if err != nil || h.Live || h.CheckpointBytes != 0 {
		t.Fatalf("hibernate: %+v %v", h, err)
	}
	if left := checkpointLeft(e, s.ID); len(left) != 0 {
		t.Fatalf("checkpoint of a session without live state: %v", left)
	}
	r := resumeOf(t, e, s.ID)
	if got := readMemory(t, e, s.ID); got != "- -" || r.Memory != nil {
		t.Fatalf("plain resume: %q %+v", got, r)
	}
}

// A restore that cannot be done starts the session on its files and says
// why; the image goes, and the session is no longer live.
func TestLiveRestoreFallsBack(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		spoil  func(t *testing.T, dir string)
		reason string
	}{
		{"corrupt state", func(t *testing.T, dir string) {
			// One byte changed: caught by the digest the row keeps.
			p := filepath.Join(dir, "checkpoint.img")
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0xff
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, lostUnreadable},
		{"truncated pages", func(t *testing.T, dir string) {
			// Past the digest: runsc restore itself fails.
			if err := os.Truncate(filepath.Join(dir, "pages.img"), 4096); err != nil {
				t.Fatal(err)
			}
		}, lostRestoreFail},
		{"missing", func(t *testing.T, dir string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}, lostMissing},
		{"other runsc", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, checkpointMeta), []byte(`{"runsc":"sha256:00","guest_protocol":"10"}`), 0o600); err != nil {
				t.Fatal(err)
			}
		}, lostOtherRunsc},
		{"row names another folder", nil, lostUnreadable},
		{"meta unreadable", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, checkpointMeta), []byte(`{`), 0o600); err != nil {
				t.Fatal(err)
			}
		}, lostUnreadable},
	}
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustSession(t, e, "python3")
			defer e.DeleteSession(ctx, "k1", s.ID)
			run(t, e, s.ID, "open('/home/sandbox/f','w').write('files')", 0)
			makeLive(t, e, s.ID, false)
			committed, _ := e.Disk().Stats()
			h, err := e.Durable().HibernateSession(ctx, "k1", s.ID)
			if err != nil || h.CheckpointBytes <= 0 {
				t.Fatalf("hibernate: %+v %v", h, err)
			}
			if tc.spoil != nil {
				tc.spoil(t, checkpointDir(e.boxes.home(s.ID)))
			} else {
				// A row that names a folder not its own (another
				// session's, or outside the homes): never given to runsc.
				e.mu.Lock()
				e.sessions[s.ID].ckpt.Path = filepath.Join("..", s.ID, checkpointFolder)
				e.mu.Unlock()
			}
			r, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "import os\nprint(open('/home/sandbox/f').read(), os.path.exists('/tmp/mem'))"})
			if err != nil || r.Stdout != "files False\n" {
				t.Fatalf("resume on files: %+v %v", r, err)
			}
			if r.Memory == nil || r.Memory.Restored || r.Memory.Reason != tc.reason {
				t.Fatalf("memory outcome %+v, want lost: %q", r.Memory, tc.reason)
			}
			v, _ := e.GetSession(ctx, "k1", s.ID)
			if v.Live || v.Memory == nil || v.Memory.Reason != tc.reason {
				t.Fatalf("session view: %+v", v)
			}
			row, _ := e.store.GetSession(ctx, s.ID)
			if row.Live || row.Checkpoint.Path != "" {
				t.Fatalf("store row still live: %+v", row)
			}
			if left := checkpointLeft(e, s.ID); len(left) != 0 {
				t.Fatalf("image left: %v", left)
			}
			if after, _ := e.Disk().Stats(); after != committed {
				t.Fatalf("disk committed %d, want %d", after, committed)
			}
		})
	}
}

// A failure in the middle of a checkpoint or a restore leaves no process,
// mount or image behind, and the session whole on its files (and says so).
func TestLiveFaults(t *testing.T) {
	t.Parallel()
	for _, step := range []createStep{stepCheckpointSaved, stepCheckpointRecorded, stepRestoreRunsc} {
		t.Run(string(step), func(t *testing.T) {
			e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
			ctx := context.Background()
			s := mustSession(t, e, "python3")
			defer e.DeleteSession(ctx, "k1", s.ID)
			run(t, e, s.ID, "open('/home/sandbox/f','w').write('whole')", 0)
			makeLive(t, e, s.ID, false)
			e.createFault = func(at createStep, id string) error {
				if at == step && id == s.ID {
					return errors.New("injected")
				}
				return nil
			}
			h, err := e.Durable().HibernateSession(ctx, "k1", s.ID)
			if err != nil || h.State != StateHibernated {
				t.Fatalf("hibernate: %+v %v", h, err)
			}
			if got := held(t, e, s.ID); len(got) != 0 {
				t.Fatalf("hibernated session holds %v", got)
			}
			if step != stepRestoreRunsc {
				if left := checkpointLeft(e, s.ID); len(left) != 0 || h.Live {
					t.Fatalf("a failed checkpoint left %v (live %v)", left, h.Live)
				}
			}
			r, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "import os\nprint(open('/home/sandbox/f').read(), os.path.exists('/tmp/mem'))"})
			if err != nil || r.Stdout != "whole False\n" || r.Memory == nil || r.Memory.Restored || r.Memory.Reason == "" {
				t.Fatalf("resume after a fault at %s: %+v %v", step, r, err)
			}
			if left := checkpointLeft(e, s.ID); len(left) != 0 {
				t.Fatalf("image left: %v", left)
			}
			e.createFault = nil
			// One sandbox, one agent channel: nothing of the failed
			// restore is left beside the cold one.
			procs := 0
			for _, p := range host.RootProcesses(e.runsc.Root) {
				if !p.IsCLI() && p.Argv[len(p.Argv)-1] == s.ID {
					procs++
				}
			}
			if procs > 2 { // the sandbox and its gofer
				t.Fatalf("%d runsc processes for one session", procs)
			}
		})
	}
}

// A crash (the server killed) in the middle of a checkpoint or a restore
// leaves the session whole for the next start: served hibernated, its
// memory restored when the image was complete and recorded, else lost
// and said so; no partial image stays.
func TestLiveCrash(t *testing.T) {
	t.Parallel()
	cases := []struct {
		step     createStep
		restored bool
	}{
		{stepCheckpointSaved, false},
		{stepCheckpointRecorded, true},
		{stepRestoreRunsc, true},
	}
	for _, tc := range cases {
		t.Run(string(tc.step), func(t *testing.T) {
			_, open := restartable(t)
			first, st := open()
			s := mustSession(t, first, "python3")
			tmpTok, _ := makeLive(t, first, s.ID, false)
			reached := make(chan struct{})
			first.createFault = func(at createStep, id string) error {
				if at == tc.step && id == s.ID {
					close(reached)
					blockForever()
				}
				return nil
			}
			go func() {
				if tc.step == stepRestoreRunsc {
					if _, err := first.Durable().HibernateSession(context.Background(), "k1", s.ID); err == nil {
						_, _ = first.Execute(context.Background(), "k1", s.ID, ExecRequest{Code: "print(1)"})
					}
					return
				}
				_, _ = first.Durable().HibernateSession(context.Background(), "k1", s.ID)
			}()
			<-reached
			crash(first, st)
			second, st2 := open()
			defer func() { second.Stop(context.Background()); st2.Close() }()
			if got := state(t, second, s.ID); got != StateHibernated {
				t.Fatalf("after a crash at %s: %s", tc.step, got)
			}
			if _, err := os.Stat(checkpointDir(second.boxes.home(s.ID)) + partialSuffix); err == nil {
				t.Fatal("a partial image survived the restart")
			}
			r := resumeOf(t, second, s.ID)
			got := readMemory(t, second, s.ID)
			if r.Memory == nil || r.Memory.Restored != tc.restored {
				t.Fatalf("memory outcome after a crash at %s: %+v (%q)", tc.step, r.Memory, got)
			}
			if tc.restored && got != tmpTok+" -" {
				t.Fatalf("memory after a crash at %s: %q, want %s", tc.step, got, tmpTok)
			}
			if !tc.restored && got != "- -" {
				t.Fatalf("memory after a crash at %s: %q, want none", tc.step, got)
			}
			if left := checkpointLeft(second, s.ID); len(left) != 0 {
				t.Fatalf("image left: %v", left)
			}
		})
	}
}

// Memory survives a stop and start of the server (SIGTERM: Stop
// hibernates every session) and a kill of the server (its sandboxes go on
// running; the next start adopts the live one and gives it a new agent
// channel by a checkpoint and restore).
func TestLiveSurvivesRestart(t *testing.T) {
	t.Parallel()
	for _, kill := range []bool{false, true} {
		name := "stop"
		if kill {
			name = "kill"
		}
		t.Run(name, func(t *testing.T) {
			_, open := restartable(t)
			first, st := open()
			s := mustSession(t, first, "python3")
			tmpTok, procTok := makeLive(t, first, s.ID, true)
			if kill {
				// A killed server's pipes close with it: the guest reads
				// EOF and waits for a new channel (the executor in this
				// test process would keep them open).
				first.agents.Drop(s.ID)
				crash(first, st)
			} else {
				if err := first.Stop(context.Background()); err != nil {
					t.Fatal(err)
				}
				st.Close()
			}
			second, st2 := open()
			defer func() { second.Stop(context.Background()); st2.Close() }()
			if kill {
				// regainLive runs in the background after Start.
				for end := time.Now().Add(60 * time.Second); second.agents.For(s.ID) == nil; time.Sleep(100 * time.Millisecond) {
					if time.Now().After(end) {
						t.Fatal("the adopted live session got no agent channel")
					}
				}
			}
			if !kill {
				if _, err := second.files.List(context.Background(), "k1", s.ID, "/home/sandbox"); err != nil {
					t.Fatalf("resuming: %v", err)
				}
			}
			got := readMemory(t, second, s.ID)
			if got != tmpTok+" "+procTok {
				t.Fatalf("memory after %s: %q, want %q", name, got, tmpTok+" "+procTok)
			}
			if left := checkpointLeft(second, s.ID); len(left) != 0 {
				t.Fatalf("image left: %v", left)
			}
			row, _ := st2.GetSession(context.Background(), s.ID)
			if !row.Live || row.Checkpoint != (store.Checkpoint{}) {
				t.Fatalf("store row: %+v", row)
			}
		})
	}
}

// A fork of a live session, running or hibernated, restores a copy of
// its memory into the child, and the two diverge from there.
func TestLiveFork(t *testing.T) {
	t.Parallel()
	for _, hibernated := range []bool{false, true} {
		t.Run(fmt.Sprintf("hibernated=%v", hibernated), func(t *testing.T) {
			e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
			ctx := context.Background()
			s := mustSession(t, e, "python3")
			defer e.DeleteSession(ctx, "k1", s.ID)
			tmpTok, _ := makeLive(t, e, s.ID, false)
			if hibernated {
				if _, err := e.Durable().HibernateSession(ctx, "k1", s.ID); err != nil {
					t.Fatal(err)
				}
			}
			c, err := e.Durable().ForkSession(ctx, s.ID, ForkSpec{Owner: "k1"})
			if err != nil || !c.Live || c.CheckpointBytes <= 0 {
				t.Fatalf("fork: %+v %v", c, err)
			}
			defer e.DeleteSession(ctx, "k1", c.ID)
			r, err := e.Execute(ctx, "k1", c.ID, ExecRequest{Code: "print(open('/tmp/mem').read())\nopen('/tmp/mem','w').write('child')"})
			if err != nil || r.Stdout != tmpTok+"\n" || r.Memory == nil || !r.Memory.Restored {
				t.Fatalf("child's first call: %+v %v", r, err)
			}
			if left := checkpointLeft(e, c.ID); len(left) != 0 {
				t.Fatalf("child's image left: %v", left)
			}
			r, err = e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "print(open('/tmp/mem').read())"})
			if err != nil || r.Stdout != tmpTok+"\n" {
				t.Fatalf("source after the child wrote: %+v %v", r, err)
			}
			if hibernated && (r.Memory == nil || !r.Memory.Restored) {
				t.Fatalf("source's resume: %+v", r)
			}
			if r := run(t, e, c.ID, "print(open('/tmp/mem').read())", 0); r.Stdout != "child\n" {
				t.Fatalf("child: %+v", r)
			}
		})
	}
}

// A live session with network: its namespace goes with the hibernation
// and egress.Sessions makes a new one for the resume (another path, a
// fresh veth); the restore takes it, memory comes back, and the sandbox
// has the same interfaces, addresses and routes as before.
func TestLiveNetworkSession(t *testing.T) {
	t.Parallel()
	f := startFaultExecutor(t)
	e, ctx := f.e, context.Background()
	s, err := e.CreateSession(ctx, SessionSpec{Language: "python3", Owner: "k1", Network: sandbox.NetworkRequest{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.DeleteSession(ctx, "k1", s.ID)
	// Its interfaces with their addresses, and its routes.
	netCheck := "import socket, fcntl, struct\n" +
		"names = sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:])\n" +
		"def addr(n):\n" +
		"    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n" +
		"    try:\n" +
		"        return socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, struct.pack('256s', n.encode()))[20:24])\n" +
		"    except OSError:\n" +
		"        return '-'\n" +
		"print([(n, addr(n)) for n in names], len(open('/proc/net/route').read().splitlines()))"
	before := run(t, e, s.ID, netCheck, 0)
	if before.Status != StatusOK || !strings.Contains(before.Stdout, ".") {
		t.Fatalf("network before: %+v", before)
	}
	t.Logf("network: %s", before.Stdout)
	tmpTok, _ := makeLive(t, e, s.ID, false)
	h, err := e.Durable().HibernateSession(ctx, "k1", s.ID)
	if err != nil || h.CheckpointBytes <= 0 {
		t.Fatalf("hibernate: %+v %v", h, err)
	}
	if got := held(t, e, s.ID); len(got) != 0 {
		t.Fatalf("a hibernated live session holds %v", got)
	}
	r := resumeOf(t, e, s.ID)
	if r.Memory == nil || !r.Memory.Restored {
		t.Fatalf("network session's memory: %+v", r.Memory)
	}
	if got := readMemory(t, e, s.ID); got != tmpTok+" -" {
		t.Fatalf("memory after resume: %q", got)
	}
	if after := run(t, e, s.ID, netCheck, 0); after.Stdout != before.Stdout || after.Status != StatusOK {
		t.Fatalf("network after the restore: %+v, before %+v", after, before)
	}
	// Packets cross the new veth: the host side (.1 of the sandbox's
	// subnet) answers a connection, by accepting or refusing it.
	reach := "import socket, fcntl, struct\n" +
		"s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n" +
		"ip = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, struct.pack('256s', b'eth0'))[20:24])\n" +
		"host = ip.rsplit('.', 1)[0] + '.1'\n" +
		"try:\n" +
		"    socket.create_connection((host, 9), timeout=5).close()\n" +
		"    print('answered')\n" +
		"except ConnectionRefusedError:\n" +
		"    print('answered')\n" +
		"except OSError as ex:\n" +
		"    print('silent', ex)"
	if r := run(t, e, s.ID, reach, 30*time.Second); r.Stdout != "answered\n" {
		t.Fatalf("the host side does not answer after the restore: %+v", r)
	}
}

// hibernate_after checkpoints a live session too: idle, it hibernates
// with its memory, and the next call has it back.
func TestLiveHibernateAfter(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0; c.HibernateAfter = time.Second })
	ctx := context.Background()
	s := mustSession(t, e, "python3")
	defer e.DeleteSession(ctx, "k1", s.ID)
	tmpTok, _ := makeLive(t, e, s.ID, false)
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		v, err := e.GetSession(ctx, "k1", s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if v.State == StateHibernated {
			if !v.Live || v.CheckpointBytes <= 0 {
				t.Fatalf("idle hibernation without a checkpoint: %+v", v)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatal("the idle session did not hibernate")
		}
	}
	r, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "print(open('/tmp/mem').read())"})
	if err != nil || r.Stdout != tmpTok+"\n" || r.Memory == nil || !r.Memory.Restored {
		t.Fatalf("after the idle hibernation: %+v %v", r, err)
	}
}

// In a cluster, a live session handed over at its node's stop is
// restored by the node that takes it: the checkpoint lives beside the
// home on the shared homes folder, and the row names it.
func TestClusterLiveHandOver(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := context.Background()
	cfgA := c.nodeConfig(t)
	rtA, err := LoadRuntimes(configs.Runtimes, cfgA.VersionsFile)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfgA, rtA, c.st.ForNode("a"), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	b := c.start(t, "b", c.nodeConfig(t))
	s, err := a.CreateSession(ctx, SessionSpec{Language: "python3", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	tmpTok, _ := makeLive(t, a, s.ID, false)
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	r, err := c.st.GetSession(ctx, s.ID)
	if err != nil || r.Node != "" || r.State != StateHibernated || !r.Live || r.Checkpoint.Path == "" {
		t.Fatalf("row after the hand-over: %+v %v", r, err)
	}
	c.claim(t, "b", s.ID)
	v, err := b.Node().Adopt(ctx, s.ID)
	if err != nil || !v.Live || v.CheckpointBytes != r.Checkpoint.Bytes {
		t.Fatalf("adopt: %+v %v", v, err)
	}
	res, err := b.Execute(ctx, "k1", s.ID, ExecRequest{Code: "print(open('/tmp/mem').read())"})
	if err != nil || res.Stdout != tmpTok+"\n" || res.Memory == nil || !res.Memory.Restored {
		t.Fatalf("on b: %+v %v", res, err)
	}
	if left := checkpointLeft(b, s.ID); len(left) != 0 {
		t.Fatalf("image left on the shared homes: %v", left)
	}
	if err := b.DeleteSession(ctx, "k1", s.ID); err != nil {
		t.Fatal(err)
	}
}
