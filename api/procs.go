package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Processes is what the background-process routes need from the executor.
type Processes interface {
	StartProcess(ctx context.Context, owner, id string, spec sandbox.ProcessSpec) (sandbox.Process, error)
	ListProcesses(ctx context.Context, owner, id string) ([]sandbox.Process, error)
	GetProcess(ctx context.Context, owner, id string, pid int) (sandbox.Process, error)
	// ProcessOutput calls emit with the output from offset from; with
	// follow until the process ends (an Exit event) or ctx is done.
	ProcessOutput(ctx context.Context, owner, id string, pid int, from int64, follow bool, emit func(sandbox.ProcessEvent) error) error
	WriteProcessStdin(ctx context.Context, owner, id string, pid int, data []byte, eof bool) (int, error)
	SignalProcess(ctx context.Context, owner, id string, pid int, signal string) error
	ResizeProcess(ctx context.Context, owner, id string, pid int, size sandbox.TermSize) error
}

// mountProcesses enables background processes:
//
//	POST /v1/sessions/{id}/processes               -> 201 process
//	GET  /v1/sessions/{id}/processes               -> 200 {processes}
//	GET  /v1/sessions/{id}/processes/{pid}         -> 200 process
//	GET  /v1/sessions/{id}/processes/{pid}/output  -> SSE stdout|stderr|pty, dropped, exit
//	POST /v1/sessions/{id}/processes/{pid}/stdin   -> 200 {written} (raw body; ?eof=true)
//	POST /v1/sessions/{id}/processes/{pid}/signal  -> 204
//	POST /v1/sessions/{id}/processes/{pid}/resize  -> 204
func (s *Server) mountProcesses(ps Processes) {
	s.handle("POST /v1/sessions/{id}/processes", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		return s.startProcess(w, r, ps)
	}))
	s.handle("GET /v1/sessions/{id}/processes", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		list, err := ps.ListProcesses(r.Context(), principal(r.Context()).KeyID, r.PathValue("id"))
		if err != nil {
			return err
		}
		out := wire.ProcessList{Processes: make([]wire.Process, 0, len(list))}
		for _, p := range list {
			out.Processes = append(out.Processes, wire.ProcessOf(p))
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}))
	s.handle("GET /v1/sessions/{id}/processes/{pid}", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		pid, err := pathPID(r)
		if err != nil {
			return err
		}
		p, err := ps.GetProcess(r.Context(), principal(r.Context()).KeyID, r.PathValue("id"), pid)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, wire.ProcessOf(p))
		return nil
	}))
	s.handle("GET /v1/sessions/{id}/processes/{pid}/output", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		return s.processOutput(w, r, ps)
	}))
	s.handle("POST /v1/sessions/{id}/processes/{pid}/stdin", s.authedCall(func(w http.ResponseWriter, r *http.Request, c *call) error {
		return s.processStdin(w, r, c, ps)
	}))
	s.handle("POST /v1/sessions/{id}/processes/{pid}/signal", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		pid, err := pathPID(r)
		if err != nil {
			return err
		}
		var req wire.SignalRequest
		if err := decodeJSON(r, &req); err != nil {
			return err
		}
		if err := ps.SignalProcess(r.Context(), principal(r.Context()).KeyID, r.PathValue("id"), pid, req.Signal); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}))
	s.handle("POST /v1/sessions/{id}/processes/{pid}/resize", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		pid, err := pathPID(r)
		if err != nil {
			return err
		}
		var req wire.TermSize
		if err := decodeJSON(r, &req); err != nil {
			return err
		}
		if err := ps.ResizeProcess(r.Context(), principal(r.Context()).KeyID, r.PathValue("id"), pid, sandbox.TermSize{Cols: req.Cols, Rows: req.Rows}); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}))
}

// pathPID is the {pid} of the path; one that is not a pid names no process.
func pathPID(r *http.Request) (int, error) {
	v := r.PathValue("pid")
	pid, err := strconv.Atoi(v)
	if err != nil || pid <= 0 || pid > 1<<22 || strconv.Itoa(pid) != v {
		return 0, apiErr(http.StatusNotFound, "process_not_found", "no process %q", v)
	}
	return pid, nil
}

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request, ps Processes) error {
	var req wire.StartProcessRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	p := principal(r.Context())
	spec := sandbox.ProcessSpec{Cmd: req.Cmd, Args: req.Args, Env: req.Env, Cwd: req.Cwd, Stdin: req.Stdin, Tag: req.Tag,
		MemoryBytes: p.Plan.MemoryMB << 20}
	if req.Timeout != nil {
		t := *req.Timeout
		if math.IsNaN(t) || t <= 0 {
			return apiErr(http.StatusBadRequest, "invalid_request", "timeout must be a positive number of seconds")
		}
		// A huge timeout is held at a value that still fits a Duration,
		// so that the executor's own bound names the most allowed.
		spec.Timeout = time.Duration(min(t, math.MaxInt32) * float64(time.Second))
	}
	if req.PTY != nil {
		spec.PTY = &sandbox.TermSize{Cols: req.PTY.Cols, Rows: req.PTY.Rows}
	}
	proc, err := ps.StartProcess(r.Context(), p.KeyID, r.PathValue("id"), spec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, wire.ProcessOf(proc))
	return nil
}

func (s *Server) processStdin(w http.ResponseWriter, r *http.Request, c *call, ps Processes) error {
	pid, err := pathPID(r)
	if err != nil {
		return err
	}
	eof, err := boolQuery(r, "eof")
	if err != nil {
		return err
	}
	c.liftBodyLimit(w, sandbox.MaxStdinWrite)
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return apiErr(http.StatusRequestEntityTooLarge, "body_too_large", "at most %d bytes of stdin per call", sandbox.MaxStdinWrite)
		}
		return err
	}
	n, err := ps.WriteProcessStdin(r.Context(), principal(r.Context()).KeyID, r.PathValue("id"), pid, data, eof)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.StdinReply{Written: n})
	return nil
}

// boolQuery reads an optional boolean query parameter.
func boolQuery(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, apiErr(http.StatusBadRequest, "invalid_request", "%s must be true or false", name)
	}
	return b, nil
}

// processOutput streams a process's output as Server-Sent Events: stdout,
// stderr or pty events (data and offset), a dropped event where kept
// output no longer reaches back to the offset asked for, and a final exit
// event (the process) once it has ended and everything is out. Each
// output event's id is the offset after it, so a client that lost the
// stream resumes with ?from= that id (or Last-Event-ID). Without
// follow=true the stream ends after what is kept now.
func (s *Server) processOutput(w http.ResponseWriter, r *http.Request, ps Processes) error {
	pid, err := pathPID(r)
	if err != nil {
		return err
	}
	follow, err := boolQuery(r, "follow")
	if err != nil {
		return err
	}
	from := int64(0)
	v := r.URL.Query().Get("from")
	if v == "" {
		v = r.Header.Get("Last-Event-ID")
	}
	if v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return apiErr(http.StatusBadRequest, "invalid_request", "from must be an output offset (a number from 0)")
		}
		from = n
	}
	owner, id := principal(r.Context()).KeyID, r.PathValue("id")
	// Asked first, so that an unknown process or session is a plain
	// error reply, not a stream.
	if _, err := ps.GetProcess(r.Context(), owner, id, pid); err != nil {
		return err
	}
	if _, ok := w.(http.Flusher); !ok {
		return fmt.Errorf("streaming unsupported by the response writer")
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.streamWriteTimeout(), cancel: cancel, begin: time.Now()}
	sw.startHeartbeat(min(streamHeaderHold, s.streamHeartbeat()), s.streamHeartbeat())
	err = ps.ProcessOutput(ctx, owner, id, pid, from, follow, func(ev sandbox.ProcessEvent) error {
		sw.mu.Lock()
		defer sw.mu.Unlock()
		switch {
		case ev.Exit != nil:
			sw.event("exit", wire.ProcessOf(*ev.Exit))
		case ev.Dropped > 0:
			sw.eventWithID("dropped", ev.Offset, wire.ProcessOutputGap{Dropped: ev.Dropped, Offset: ev.Offset})
		default:
			sw.eventWithID(ev.Stream, ev.Offset+int64(len(ev.Data)), wire.ProcessOutputChunk{Data: string(ev.Data), Offset: ev.Offset})
		}
		return sw.err
	})
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.stopHeartbeat()
	if !sw.started && err == nil {
		sw.write(nil) // nothing to send: an empty stream
	}
	defer sw.clearDeadline()
	if sw.err != nil {
		return nil // the client left
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		if !sw.started {
			return err
		}
		ae := toAPIError(interrupted(r, err))
		if ae == nil {
			ae = &Error{Code: "internal", Message: "internal error"}
			s.log.Error("process output stream failed", "request_id", requestID(r.Context()), "err", err)
		}
		sw.event("error", errorPayload{Code: ae.Code, Message: ae.Message, RequestID: requestID(r.Context())})
	}
	return nil
}

// eventWithID writes an event with an id line (the offset to resume at).
// Callers hold mu.
func (sw *sseWriter) eventWithID(name string, id int64, v any) {
	sw.write(func(w http.ResponseWriter) error {
		if _, err := fmt.Fprintf(w, "id: %d\n", id); err != nil {
			return err
		}
		return writeEvent(w, name, v)
	})
}
