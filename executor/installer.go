package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Job is a one-off program in its own short-lived sandbox.
type Job = sandbox.Job

// RunJob runs job in a fresh sandbox of its own and destroys it afterwards.
// With job.SessionID set, the session's home is mounted at /home/sandbox
// (the same host mount the session uses: runsc's default shared file access
// for mounts lets the session see what the job wrote) and the session is
// held for the job's duration, so no execute runs beside it. The program
// runs as the sandbox user under the guest's limits. The job's sandbox
// counts against the host-wide ceiling.
func (e *Executor) RunJob(ctx context.Context, job Job) (Result, error) {
	if len(job.Argv) == 0 {
		return Result{}, fmt.Errorf("%w: job has no program", ErrInvalid)
	}
	if job.Timeout <= 0 || job.Timeout > e.cfg.MaxTimeout+5*time.Minute {
		return Result{}, fmt.Errorf("%w: job timeout %s out of range", ErrInvalid, job.Timeout)
	}
	home := ""
	var s *session
	if job.SessionID != "" || job.Owner != "" {
		var err error
		s, err = e.acquire(ctx, job.Owner, job.SessionID)
		if err != nil {
			return Result{}, err
		}
		defer e.releaseSession(s)
		home = host.HomeMount(e.boxes.dir(s.id))
		if !host.Mounted(home) {
			return Result{}, fmt.Errorf("%w: session home is not mounted", ErrBadState)
		}
	}
	if err := e.reserve(); err != nil {
		return Result{}, err
	}
	defer e.release()
	// Stop waits for running jobs (e.wg), so none outlives the executor.
	e.mu.Lock()
	if !e.started {
		e.mu.Unlock()
		return Result{}, ErrNotStarted
	}
	e.wg.Add(1)
	e.mu.Unlock()
	defer e.wg.Done()

	id := newID("job_")
	if s != nil {
		// Letting go of the session (Fence) kills this sandbox too: it
		// holds the session's home mount.
		e.mu.Lock()
		s.job = id
		e.mu.Unlock()
		defer func() {
			e.mu.Lock()
			s.job = ""
			e.mu.Unlock()
		}()
	}
	dir := filepath.Join(e.boxes.jobsDir(), id)
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return Result{}, fmt.Errorf("creating job bundle: %w", err)
	}
	defer os.RemoveAll(dir)
	spec := host.SandboxSpec(host.SpecParams{
		ID: id, Cgroup: e.boxes.cgroupName(id), Rootfs: e.cfg.Rootfs, Home: home, GuestDir: e.boxes.guestDir(),
		MemoryBytes: e.boxes.hostMemory(), Pids: e.cfg.Pids*2 + 128, CPUs: e.cfg.CPUs, TmpBytes: e.cfg.TmpBytes, NetNS: job.NetnsPath,
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
	if err := e.boxes.startWithAgent(ctx, id, bundle, network); err != nil {
		_ = e.agents.Destroy(context.WithoutCancel(ctx), id)
		return Result{}, fmt.Errorf("starting job sandbox %s: %w", id, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := e.agents.Destroy(dctx, id); err != nil {
			e.log.Error("destroying job sandbox", "job", id, "err", err)
		}
		// A job that outlived Stop leaves runsc's null-netns mount behind
		// unless the last one out removes it.
		e.mu.Lock()
		stopped := !e.started
		e.mu.Unlock()
		if cs, err := e.runsc.List(dctx); stopped && err == nil && len(cs) == 0 {
			_ = e.runsc.UnmountNullNetns()
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
		MemoryBytes: e.cfg.MemoryBytes, MaxProcs: uint64(e.cfg.Pids),
	}
	res, err := e.guestRun(ctx, id, greq, job.Stdin, nil)
	e.log.Info("job", "job", id, "session", job.SessionID, "status", res.Status, "exit_code", res.ExitCode,
		"network", job.NetnsPath != "", "ms", time.Since(start).Milliseconds())
	return res, err
}
