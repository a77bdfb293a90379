package executor

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/store"
)

// Limits on the files of a stateless call.
const (
	maxStatelessFiles     = 64
	maxStatelessFileBytes = 8 << 20
)

// ExecuteStateless runs code in a fresh sandbox (a warm one when ready)
// that is destroyed afterwards; nothing survives the call.
func (e *Executor) ExecuteStateless(ctx context.Context, owner string, req ExecRequest) (Result, error) {
	rt, err := e.rt.Lookup(req.Language)
	if err != nil {
		return Result{}, err
	}
	if err := CheckEnv(req.Env); err != nil {
		return Result{}, err
	}
	timeout, err := e.ClampTimeout(req.Timeout)
	if err != nil {
		return Result{}, err
	}
	files := []guest.File{{Path: rt.File, Content: []byte(req.Code)}}
	if len(req.Files) > maxStatelessFiles {
		return Result{}, fmt.Errorf("%w: at most %d files", ErrInvalid, maxStatelessFiles)
	}
	total := 0
	for _, f := range req.Files {
		if err := checkRelPath(f.Path); err != nil {
			return Result{}, err
		}
		if f.Path == rt.File {
			return Result{}, fmt.Errorf("%w: file %q would replace the code", ErrInvalid, f.Path)
		}
		total += len(f.Content)
		files = append(files, guest.File{Path: f.Path, Content: f.Content})
	}
	if total > maxStatelessFileBytes {
		return Result{}, fmt.Errorf("%w: files over %d bytes in all", ErrTooLarge, maxStatelessFileBytes)
	}
	if err := e.reserve(); err != nil {
		return Result{}, err
	}
	id := ""
	if ws, ok := e.takeWarm(); ok {
		id = ws.id
	} else {
		ws, err := e.prepareWarm() // a cold start, same steps
		if err != nil {
			e.release()
			return Result{}, err
		}
		id = ws.id
	}
	// Teardown is off the reply's path; the capacity slot is held until the
	// sandbox is gone.
	e.bg.Add(1)
	defer func() {
		go func() {
			defer e.bg.Done()
			dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.destroySandbox(dctx, id); err != nil {
				e.log.Error("destroying stateless sandbox", "sandbox", id, "err", err)
			}
			e.release()
		}()
	}()
	execID := newID("exec_")
	finish := e.record(ctx, store.ExecutionRow{ID: execID, KeyID: owner, Language: rt.Name, StartedAt: time.Now()})
	greq := &guest.Request{
		Files: files, Links: rt.Links, Argv: rt.Run, Compile: rt.Compile, CompileTimeoutMS: e.cfg.CompileTimeout.Milliseconds(),
		Env: e.baseEnv(rt, nil, req.Env), Cwd: "{dir}", UID: SandboxUID, GID: SandboxUID,
		TimeoutMS: timeout.Milliseconds(), MemoryBytes: e.cfg.MemoryBytes, MaxProcs: uint64(e.cfg.Pids),
	}
	res, err := e.guestRun(ctx, id, greq, req.Stdin, req.OnOutput)
	res.ExecutionID = execID
	err = finish(&res, err)
	e.log.Info("execution", "execution", execID, "stateless", true, "language", rt.Name, "status", res.Status,
		"exit_code", res.ExitCode, "duration_ms", res.DurationMS, "truncated", res.Truncated)
	return res, err
}

// checkRelPath accepts a plain relative path inside the work folder.
func checkRelPath(p string) error {
	if p == "" || len(p) > 255 || strings.ContainsRune(p, 0) || filepath.IsAbs(p) || !filepath.IsLocal(p) || strings.Contains(p, `\`) {
		return fmt.Errorf("%w: file path %q must be relative and stay inside the work folder", ErrInvalid, p)
	}
	return nil
}
