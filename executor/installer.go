package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Job is a one-off program in its own short-lived sandbox.
type Job = sandbox.Job

// Jobs runs one-off programs (installs, canaries) each in a short-lived
// sandbox of its own; it reaches the session service only through
// jobSessions. Get it from Executor.Jobs; it is safe for concurrent use.
type Jobs struct {
	s      jobSessions
	boxes  *launcher        // sandbox paths and starts
	agents *agent.Transport // sandboxes' agent channels
	runsc  *host.Runsc
	cfg    Config
	log    *slog.Logger
	mu     *sync.Mutex     // the session service's lock (Executor.mu)
	wg     *sync.WaitGroup // the session service's Stop waits for running jobs
}

// jobSessions is what Jobs needs of the session service.
type jobSessions interface {
	acquire(ctx context.Context, owner, id string) (*session, error)
	releaseSession(s *session)
	// reserve takes a slot under max_sandboxes; release gives it back.
	reserve() error
	release()
	// counts says whether the service has started (see nodeSessions).
	// mu held.
	counts() (started bool, live int)
	guestRun(ctx context.Context, id string, greq *guest.Request, stdin []byte, onOutput func(string, []byte)) (Result, error)
}

// Jobs returns the executor's job runner (installer.Runner).
func (e *Executor) Jobs() *Jobs { return e.jobs }

// RunJob runs job in a fresh sandbox of its own and destroys it afterwards.
// With job.SessionID set, the session's home is mounted at /home/sandbox
// (the same host mount the session uses: runsc's default shared file access
// for mounts lets the session see what the job wrote) and the session is
// held for the job's duration, so no execute runs beside it. The program
// runs as the sandbox user under the guest's limits. The job's sandbox
// counts against the host-wide ceiling.
func (j *Jobs) RunJob(ctx context.Context, job Job) (Result, error) {
	if len(job.Argv) == 0 {
		return Result{}, fmt.Errorf("%w: job has no program", ErrInvalid)
	}
	if job.Timeout <= 0 || job.Timeout > j.cfg.MaxTimeout+5*time.Minute {
		return Result{}, fmt.Errorf("%w: job timeout %s out of range", ErrInvalid, job.Timeout)
	}
	home := ""
	var s *session
	if job.SessionID != "" || job.Owner != "" {
		var err error
		s, err = j.s.acquire(ctx, job.Owner, job.SessionID)
		if err != nil {
			return Result{}, err
		}
		defer j.s.releaseSession(s)
		home = host.HomeMount(j.boxes.dir(s.id))
		if !host.Mounted(home) {
			return Result{}, fmt.Errorf("%w: session home is not mounted", ErrBadState)
		}
	}
	if err := j.s.reserve(); err != nil {
		return Result{}, err
	}
	defer j.s.release()
	// Stop waits for running jobs (its wg), so none outlives the executor.
	j.mu.Lock()
	if started, _ := j.s.counts(); !started {
		j.mu.Unlock()
		return Result{}, ErrNotStarted
	}
	j.wg.Add(1)
	j.mu.Unlock()
	defer j.wg.Done()

	id := newID("job_")
	if s != nil {
		// Letting go of the session (Fence) kills this sandbox too: it
		// holds the session's home mount.
		j.mu.Lock()
		s.job = id
		j.mu.Unlock()
		defer func() {
			j.mu.Lock()
			s.job = ""
			j.mu.Unlock()
		}()
	}
	dir := filepath.Join(j.boxes.jobsDir(), id)
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return Result{}, fmt.Errorf("creating job bundle: %w", err)
	}
	defer os.RemoveAll(dir)
	spec := host.SandboxSpec(host.SpecParams{
		ID: id, Cgroup: j.boxes.cgroupName(id), Rootfs: j.cfg.Rootfs, Home: home, GuestDir: j.boxes.guestDir(),
		MemoryBytes: j.boxes.hostMemory(), Pids: j.cfg.Pids*2 + 128, CPUs: j.cfg.CPUs, TmpBytes: j.cfg.TmpBytes, NetNS: job.NetnsPath,
	})
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return Result{}, fmt.Errorf("encoding job spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
		return Result{}, fmt.Errorf("writing job spec: %w", err)
	}
	network := "none"
	if job.NetnsPath != "" {
		network = "sandbox"
	}
	start := time.Now()
	if err := j.boxes.startWithAgent(ctx, id, bundle, network); err != nil {
		_ = j.agents.Destroy(context.WithoutCancel(ctx), id)
		return Result{}, fmt.Errorf("starting job sandbox %s: %w", id, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := j.agents.Destroy(dctx, id); err != nil {
			j.log.Error("destroying job sandbox", "job", id, "err", err)
		}
		// A job that outlived Stop leaves runsc's null-netns mount behind
		// unless the last one out removes it.
		j.mu.Lock()
		started, _ := j.s.counts()
		j.mu.Unlock()
		stopped := !started
		if cs, err := j.runsc.List(dctx); stopped && err == nil && len(cs) == 0 {
			_ = j.runsc.UnmountNullNetns()
		}
	}()
	files := make([]guest.File, 0, len(job.Files))
	for _, f := range job.Files {
		files = append(files, guest.File{Path: f.Path, Content: f.Content})
	}
	// The job starts in its own private folder under the sandbox's /tmp,
	// never in the session's home: a program that imports from its working
	// folder (python -m, node) must not pick up what the session wrote.
	greq := &guest.Request{
		Files: files, Argv: job.Argv, Env: job.Env, Cwd: "{dir}",
		UID: host.SandboxUID, GID: host.SandboxUID, TimeoutMS: job.Timeout.Milliseconds(),
		MemoryBytes: j.cfg.MemoryBytes, MaxProcs: uint64(j.cfg.Pids),
	}
	res, err := j.s.guestRun(ctx, id, greq, job.Stdin, nil)
	j.log.Info("job", "job", id, "session", job.SessionID, "status", res.Status, "exit_code", res.ExitCode,
		"network", job.NetnsPath != "", "ms", time.Since(start).Milliseconds())
	return res, err
}
