package executor

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// Limits on the files of a stateless call.
const (
	maxStatelessFiles     = sandbox.MaxFiles
	maxStatelessFileBytes = 8 << 20
)

// ExecuteStateless runs code in a fresh sandbox (a warm one when ready)
// that is destroyed afterwards; nothing survives the call.
func (e *Executor) ExecuteStateless(ctx context.Context, owner string, req ExecRequest) (Result, error) {
	rt, err := e.rt.LookupVersion(req.Language, req.Version)
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
	mem, err := e.memoryLimit(req.MemoryBytes)
	if err != nil {
		return Result{}, err
	}
	files, err := statelessFiles(rt, req.Code, req.Files)
	if err != nil {
		return Result{}, err
	}
	if err := e.reserve(); err != nil {
		return Result{}, err
	}
	// The capacity slot is given back if getting a sandbox fails or panics;
	// once there is one, its teardown below gives the slot back instead.
	undo := newCleanup(e.log)
	undo.Add("capacity slot", func(context.Context) error { e.release(); return nil })
	defer undo.Clean()
	if err := e.fault(stepStatelessSandbox, ""); err != nil {
		return Result{}, err
	}
	id := ""
	if ws, ok := e.pool.take(); ok {
		id = ws.id
	} else {
		ws, err := e.pool.prepare() // a cold start, same steps
		if err != nil {
			return Result{}, err
		}
		id = ws.id
	}
	undo.Release()
	// Teardown is off the reply's path; the capacity slot is held until the
	// sandbox is gone.
	e.bg.Add(1)
	defer func() {
		go func() {
			defer e.bg.Done()
			dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.pool.destroy(dctx, id); err != nil {
				e.log.ErrorContext(ctx, "destroying stateless sandbox", "sandbox", id, "err", err)
			}
			e.release()
		}()
	}()
	execID := newID("exec_")
	finish := e.record(ctx, store.ExecutionRow{ID: execID, KeyID: owner, Language: rt.Name, StartedAt: time.Now()})
	greq := &guest.Request{
		Files: files, Links: rt.Links, Argv: rt.Run, Compile: rt.Compile, InlineCompile: rt.InlineCompile, CompileTimeoutMS: e.compileTimeoutMS(timeout),
		Env: e.baseEnv(rt, nil, req.Env), Cwd: "{dir}", UID: host.SandboxUID, GID: host.SandboxUID,
		TimeoutMS: timeoutMS(timeout), MemoryBytes: mem, MaxProcs: uint64(e.cfg.Pids),
	}
	res, err := e.guestRun(ctx, id, greq, req.Stdin, req.OnOutput)
	res.ExecutionID = execID
	err = finish(&res, err)
	e.log.InfoContext(ctx, "execution", "execution", execID, "stateless", true, "language", rt.Name, "status", res.Status,
		"exit_code", res.ExitCode, "duration_ms", res.DurationMS, "compile_ms", res.CompileMS, "run_ms", res.RunMS, "truncated", res.Truncated)
	return res, err
}

// checkRelPath accepts a plain relative path inside the work folder.
func checkRelPath(p string) error {
	if p == "" || len(p) > sandbox.MaxFilePathBytes || strings.ContainsRune(p, 0) || filepath.IsAbs(p) || !filepath.IsLocal(p) || strings.Contains(p, `\`) {
		return fmt.Errorf("%w: file path %s must be relative, at most %d bytes, and stay inside the work folder", ErrInvalid, sandbox.Quote(p), sandbox.MaxFilePathBytes)
	}
	return nil
}

// statelessFiles checks the caller's files of a stateless call and returns
// them, with the code first, as the guest writes them. Each path is
// cleaned the way the guest cleans paths, so two spellings of one file
// ("a", "./a", "a/") are one; refused: a path given twice, a path that is a
// folder of another (the guest could not write both), and a path on a name
// the work folder already uses: the code file, the runtime's links
// (node_modules) and whatever its compile and run steps name in {dir}.
func statelessFiles(rt *Runtime, code string, in []sandbox.File) ([]guest.File, error) {
	if len(in) > maxStatelessFiles {
		return nil, fmt.Errorf("%w: at most %d files", ErrInvalid, maxStatelessFiles)
	}
	reserved := reservedNames(rt)
	seen := make(map[string]bool, len(in))
	out := make([]guest.File, 0, len(in)+1)
	out = append(out, guest.File{Path: rt.File, Content: []byte(code)})
	total := 0
	for _, f := range in {
		if err := checkRelPath(f.Path); err != nil {
			return nil, err
		}
		comps, err := guest.CleanPath(f.Path)
		if err != nil || len(comps) == 0 {
			return nil, fmt.Errorf("%w: file path %q must name a file inside the work folder", ErrInvalid, f.Path)
		}
		p := strings.Join(comps, "/")
		if reserved[comps[0]] || reserved[p] {
			return nil, fmt.Errorf("%w: file %q uses a name the %s runtime reserves", ErrInvalid, f.Path, rt.Name)
		}
		if seen[p] {
			return nil, fmt.Errorf("%w: file %q is given twice", ErrInvalid, f.Path)
		}
		seen[p] = true
		total += len(f.Content)
		out = append(out, guest.File{Path: p, Content: f.Content})
	}
	if total > maxStatelessFileBytes {
		return nil, fmt.Errorf("%w: files over %d bytes in all", ErrTooLarge, maxStatelessFileBytes)
	}
	// A path that is a folder of another: any proper prefix of a file's
	// components that is itself a file.
	for p := range seen {
		for i := 0; i < len(p); i++ {
			if p[i] == '/' && seen[p[:i]] {
				return nil, fmt.Errorf("%w: file %q is also a folder of %q", ErrInvalid, p[:i], p)
			}
		}
	}
	return out, nil
}

// reservedNames are the top-level names of the work folder that a
// runtime uses itself: its code file, its links and every {dir}/name its
// compile and run steps name (outputs such as main or main.js).
func reservedNames(rt *Runtime) map[string]bool {
	names := map[string]bool{}
	if comps, err := guest.CleanPath(rt.File); err == nil && len(comps) > 0 {
		names[comps[0]] = true
	}
	for name := range rt.Links {
		names[name] = true
	}
	for _, argv := range [][]string{rt.Compile, rt.Run} {
		for _, a := range argv {
			for rest := a; ; {
				i := strings.Index(rest, "{dir}/")
				if i < 0 {
					break
				}
				rest = rest[i+len("{dir}/"):]
				name, _, _ := strings.Cut(rest, "/")
				if name != "" && name != "." && name != ".." {
					names[name] = true
				}
			}
		}
	}
	return names
}
