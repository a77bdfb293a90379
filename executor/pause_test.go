package executor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clusternode "github.com/sandboxapi/sandboxapi/cluster"
	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/duration"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// pausedLease is the lease of the node in TestClusterPausedNode: long
// enough that its fence (lease/8 before the lease's end) is done before
// the end on a loaded host.
const pausedLease = 8 * time.Second

// TestClusterPausedNodeHelperProcess is not a test: it is node a of
// TestClusterPausedNode, a cluster node (lease loop and executor) in a
// process of its own that the test stops and continues.
func TestClusterPausedNodeHelperProcess(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	e, st := helperNode(t, "SANDBOXAPI_PAUSED_HELPER_CONFIG", "node a of TestClusterPausedNode", log)
	node, err := clusternode.New(clusternode.Settings{Node: "a", AdvertiseURL: "http://127.0.0.1:9", Secret: strings.Repeat("s", 32), Lease: duration.Duration(pausedLease)},
		clusternode.Deps{Store: st.ForNode("a"), Executor: e.Node(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	// As serve does: the node registers (HoldUntil) before the executor
	// starts.
	if err := node.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "echo from-a > /home/sandbox/f; sync"}); err != nil {
		t.Fatal(err)
	}
	epoch := node.Epoch()
	os.Stdout.WriteString("session " + s.ID + "\n")
	// Woken after its lease: the node fences and registers again; then
	// its session (still its own: nobody claimed it) is adopted and used.
	for node.Epoch() == epoch || node.Epoch() == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := e.Node().Adopt(ctx, s.ID); err != nil {
		os.Stdout.WriteString("recover-failed adopt: " + err.Error() + "\n")
	} else if res, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "cat /home/sandbox/f"}); err != nil {
		os.Stdout.WriteString("recover-failed execute: " + err.Error() + "\n")
	} else {
		os.Stdout.WriteString("recovered " + strings.TrimSpace(res.Stdout) + "\n")
	}
	// A new session: not on a warm sandbox that the fence killed.
	if ns, err := e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"}); err != nil {
		os.Stdout.WriteString("create-failed: " + err.Error() + "\n")
	} else if res, err := e.Execute(ctx, "k1", ns.ID, ExecRequest{Code: "echo new"}); err != nil {
		os.Stdout.WriteString("create-failed execute: " + err.Error() + "\n")
	} else {
		os.Stdout.WriteString("created " + strings.TrimSpace(res.Stdout) + "\n")
	}
	select {} // until killed
}

// TestClusterPausedNode: a cluster node whose process is stopped
// (SIGSTOP) but alive has its sandboxes killed and its homes unmounted by
// its fence process once its hold deadline passes, before its lease ends
// (so before another node may claim its sessions). Continued (SIGCONT),
// it fences, registers again, and serves its session again.
func TestClusterPausedNode(t *testing.T) {
	// Serial (no t.Parallel): the fence must be done before the 8 s lease ends (lease/8 after its hold deadline); other tests' load would break that.
	c := newCluster(t)
	cfgA := c.nodeConfig(t, func(cfg *Config) { cfg.WarmPool = 1 })
	raw, err := json.Marshal(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterPausedNodeHelperProcess$")
	cmd.Env = append(os.Environ(), "SANDBOXAPI_PAUSED_HELPER_CONFIG="+string(raw), "SANDBOXAPI_NODE_HELPER_DB="+c.dbPath, "SANDBOXAPI_NODE_HELPER_DB_URL="+c.dbURL)
	logs := &testenv.LogBuffer{}
	cmd.Stderr = logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	root, sessions := filepath.Join(cfgA.DataDir, "runsc"), filepath.Join(cfgA.DataDir, "sessions")
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
		// Its fence fences on EOF; runsc's null-netns mount is left.
		for end := time.Now().Add(10 * time.Second); len(host.RootProcesses(root)) > 0 && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
		_ = (&host.Runsc{Root: root}).UnmountNullNetns()
	})
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
		close(lines)
	}()
	var id string
	select {
	case l := <-lines:
		id, _ = strings.CutPrefix(l, "session ")
	case <-time.After(2 * time.Minute):
		t.Fatalf("node a did not make its session; its log:\n%s", logs.String())
	}
	if id == "" {
		t.Fatalf("node a exited; its log:\n%s", logs.String())
	}
	img := filepath.Join(c.homes, id, "home.img")
	stop := loopWatch(img)
	// Its session and its warm sandbox.
	for end := time.Now().Add(time.Minute); len(host.HomeMounts(sessions)) < 2 && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	if len(host.RootProcesses(root)) == 0 || len(host.HomeMounts(sessions)) < 2 {
		t.Fatalf("node a runs no sandbox or mounts: %d processes, mounts %v", len(host.RootProcesses(root)), host.HomeMounts(sessions))
	}

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	time.Sleep(200 * time.Millisecond) // a renewal in flight lands, or never
	row, err := c.st.GetNode(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	for len(host.RootProcesses(root)) > 0 || len(host.HomeMounts(sessions)) > 0 || len(host.LoopDevices(img)) > 0 {
		if time.Now().After(row.LeaseUntil) {
			t.Fatalf("node a's lease ended %v after it was stopped with %d processes under its root, mounts %v, loop devices %v; log:\n%s",
				row.LeaseUntil.Sub(stopped), len(host.RootProcesses(root)), host.HomeMounts(sessions), host.LoopDevices(img), logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	fenced := time.Now()
	t.Logf("fenced %v after SIGSTOP, %v before the lease's end", fenced.Sub(stopped), row.LeaseUntil.Sub(fenced))
	for end := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "hold deadline passed") && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "hold deadline passed") {
		t.Errorf("no fence line in a's log:\n%s", logs.String())
	}
	if r, err := c.st.GetSession(context.Background(), id); err != nil || r.Node != "a" {
		t.Fatalf("session row after the fence: %+v %v", r, err)
	}

	// Woken after its lease ended (nobody claimed the session meanwhile).
	time.Sleep(time.Until(row.LeaseUntil) + 200*time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case l, ok := <-lines:
		if !ok || l != "recovered from-a" {
			t.Fatalf("node a after SIGCONT: %q (open %v); its log:\n%s", l, ok, logs.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("node a did not recover; its log:\n%s", logs.String())
	}
	select {
	case l, ok := <-lines:
		if !ok || l != "created new" {
			t.Fatalf("a new session on node a after SIGCONT: %q (open %v); its log:\n%s", l, ok, logs.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("node a made no new session; its log:\n%s", logs.String())
	}
	if n := stop(); n > 1 {
		t.Fatalf("the image was on %d loop devices at once", n)
	}
	select {
	case <-exited:
		t.Fatal("node a exited")
	default:
	}
}

// TestClusterFenceWaitsForMount: a Fence that comes while a resume is
// mounting its home (mountHome may wait seconds for the image) does not
// return before that mount has been undone, and leaves nothing mounted;
// the resume answers ErrSessionMoved.
func TestClusterFenceWaitsForMount(t *testing.T) {
	// Serial (no t.Parallel): the Fence must finish within 5 s, against a 300 ms release; other tests' load would break that.
	c := newCluster(t)
	a := c.start(t, "a", c.nodeConfig(t))
	ctx := context.Background()
	s, err := a.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	clusterRun(t, a, s.ID, "echo kept > /home/sandbox/f")
	if _, err := a.Durable().HibernateSession(ctx, "k1", s.ID); err != nil {
		t.Fatal(err)
	}
	reached, release := make(chan struct{}), make(chan struct{})
	a.createFault = func(step createStep, id string) error {
		if step == stepResumeMounting && id == s.ID {
			close(reached)
			<-release
		}
		return nil
	}
	t.Cleanup(func() { a.createFault = nil })
	done := make(chan error, 1)
	go func() {
		_, err := a.Execute(ctx, "k1", s.ID, ExecRequest{Code: "cat /home/sandbox/f"})
		done <- err
	}()
	select {
	case <-reached:
	case <-time.After(time.Minute):
		t.Fatal("the resume did not reach its mount")
	}
	timer := time.AfterFunc(300*time.Millisecond, func() { close(release) })
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ferr := a.Node().Fence(fctx)
	select {
	case <-release:
	default:
		timer.Stop()
		close(release)
		t.Fatalf("Fence returned (%v) while a mount of a session it let go of was still to come", ferr)
	}
	if ferr != nil {
		t.Fatalf("fence: %v", ferr)
	}
	if h := hostHolds(a, s.ID); len(h) > 0 {
		t.Fatalf("after the fence, a holds %v", h)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrSessionMoved) {
			t.Fatalf("the resume: %v, want ErrSessionMoved", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the resume did not end")
	}
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if host.Mounted(host.HomeMount(a.boxes.dir(s.ID))) {
			t.Fatal("the home was mounted after the fence")
		}
	}
	// Neither the Fence nor the resume's undo wrote the row after it.
	if r, err := c.st.GetSession(ctx, s.ID); err != nil || r.State != StateResuming {
		t.Fatalf("row after the fence: %+v %v", r, err)
	}
	// a's own session again (its lease is back): files intact.
	a.createFault = nil
	if _, err := a.Node().Adopt(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if res := clusterRun(t, a, s.ID, "cat /home/sandbox/f"); res.Stdout != "kept\n" {
		t.Fatalf("after the fence: %+v", res)
	}
}

// TestClusterLostAfterReadopt: a call that was running when its node
// fenced and finds its sandbox gone only after the node has adopted the
// session again (the same id, a new object) answers ErrSessionMoved and
// leaves the new object alone: it is not failed, its row not ended, its
// image kept. The Adopt waits until the old call is over.
func TestClusterLostAfterReadopt(t *testing.T) {
	// Serial (no t.Parallel): a 1 s sleep stands for the call being under way, and it must find its sandbox gone within 10 s of the fence; other tests' load would break that.
	c := newCluster(t)
	a := c.start(t, "a", c.nodeConfig(t))
	ctx := context.Background()
	s, err := a.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	clusterRun(t, a, s.ID, "echo kept > /home/sandbox/f")
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a.createFault = func(step createStep, id string) error {
		if step == stepRunLost && id == s.ID {
			once.Do(func() {
				close(reached)
				<-release
			})
		}
		return nil
	}
	t.Cleanup(func() { a.createFault = nil })
	done := make(chan error, 1)
	go func() {
		_, err := a.Execute(ctx, "k1", s.ID, ExecRequest{Code: "sleep 30", Timeout: 40 * time.Second})
		done <- err
	}()
	time.Sleep(time.Second)
	if err := a.Node().Fence(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the call in flight did not find its sandbox gone")
	}
	adopted := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := a.Node().Adopt(actx, s.ID)
		adopted <- err
	}()
	time.Sleep(300 * time.Millisecond)
	close(release)
	select {
	case err := <-done:
		if !errors.Is(err, ErrSessionMoved) {
			t.Fatalf("the call in flight: %v, want ErrSessionMoved", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call in flight did not end")
	}
	if err := <-adopted; err != nil {
		t.Fatalf("adopt: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // a teardown it may have started
	r, err := c.st.GetSession(ctx, s.ID)
	if err != nil || r.Node != "a" || r.State == StateFailed || r.State == StateEnded {
		t.Fatalf("row after the old call: %+v %v", r, err)
	}
	if !a.Node().Has(s.ID) {
		t.Fatal("the adopted session is gone")
	}
	if _, err := os.Stat(filepath.Join(c.homes, s.ID, "home.img")); err != nil {
		t.Fatalf("image: %v", err)
	}
	if res := clusterRun(t, a, s.ID, "cat /home/sandbox/f"); res.Stdout != "kept\n" {
		t.Fatalf("after adopting again: %+v", res)
	}
}

// TestClusterFenceCutsImageWait: a resume waiting for its image to be
// free (a loop device of this host still on it: mountHome waits up to
// imageBusyWait) when its node fences stops waiting at once and answers
// ErrSessionMoved; once the image is free the Fence returns, and nothing
// was mounted.
func TestClusterFenceCutsImageWait(t *testing.T) {
	// Serial (no t.Parallel): the waiting resume must end within 1 s of the fence; other tests' load would break that.
	c := newCluster(t)
	a := c.start(t, "a", c.nodeConfig(t))
	ctx := context.Background()
	s, err := a.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Durable().HibernateSession(ctx, "k1", s.ID); err != nil {
		t.Fatal(err)
	}
	img := a.boxes.home(s.ID).Image()
	out, err := exec.Command("losetup", "--find", "--show", "--read-only", img).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	detach := func() { _ = exec.Command("losetup", "-d", dev).Run() }
	t.Cleanup(detach)
	stop := loopWatch(img)
	done := make(chan error, 1)
	go func() {
		_, err := a.Execute(ctx, "k1", s.ID, ExecRequest{Code: "true"})
		done <- err
	}()
	time.Sleep(500 * time.Millisecond) // waiting for the image
	fenced := make(chan error, 1)
	go func() {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		fenced <- a.Node().Fence(fctx)
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrSessionMoved) {
			t.Fatalf("the resume: %v, want ErrSessionMoved", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the resume still waits for its image a second after the fence")
	}
	detach()
	if err := <-fenced; err != nil {
		t.Fatalf("fence: %v", err)
	}
	if host.Mounted(host.HomeMount(a.boxes.dir(s.ID))) {
		t.Fatal("the home is mounted")
	}
	if n := stop(); n > 1 {
		t.Fatalf("the image was on %d loop devices at once", n)
	}
}

// TestClusterHoldBeforeStart: a HoldUntil that comes before Start (serve
// registers the node first) arms the fence that Start launches; a Fence
// that worked disarms it.
func TestClusterHoldBeforeStart(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	cfg := c.nodeConfig(t)
	rt, err := LoadRuntimes(configs.Runtimes, cfg.VersionsFile)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg, rt, c.st.ForNode("a"), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	e.Node().HoldUntil(time.Now().Add(time.Minute))
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	armed := e.node.fenceSwitch().Hold()
	if armed.IsZero() || e.node.holdPassed() {
		t.Fatalf("fence after Start: hold %v, passed %v", armed, e.node.holdPassed())
	}
	e.Node().HoldUntil(time.Now().Add(-time.Second))
	if !e.node.holdPassed() {
		t.Fatal("a hold in the past has not passed")
	}
	if err := e.Node().Fence(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.node.holdPassed() {
		t.Fatal("a Fence that worked left the fence armed")
	}
}
