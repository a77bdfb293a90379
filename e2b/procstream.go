package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"

	"connectrpc.com/connect"

	"github.com/sandboxapi/sandboxapi/api/wire"
	procpb "github.com/sandboxapi/sandboxapi/e2b/internal/envdpb/process"
)

// A process's events come from /v1's output stream (Server-Sent Events,
// GET .../processes/{pid}/output?follow=true), read in process: the API
// handler writes into a pipe that follow reads event by event, so each
// chunk is sent on as soon as the API writes it, and nothing is buffered
// whole. When the caller leaves (its context ends) or the process ends,
// follow cancels the /v1 call, closes the pipe under it (so a write
// blocked on it returns) and waits for the handler to return: no reader,
// goroutine or guest read outlives the Connect call.

// maxSSELine bounds one line of the output stream: an output chunk (at
// most 32 KiB read at a time by the guest) as JSON text, every byte
// escaped at worst.
const maxSSELine = 1 << 20

// follow streams process pid's events from output offset from to send:
// data as it comes, a keepalive for each of the stream's heartbeats, and
// the end. It returns nil after the end, the caller's error when ctx
// ends, or the Connect error of a /v1 failure.
func (s procService) follow(ctx context.Context, t *target, pid uint32, from int64, send func(*procpb.ProcessEvent) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	uri := procURI(t, pid, "/output") + "?follow=true&from=" + strconv.FormatInt(from, 10)
	req, err := t.caller.newRequest(http.MethodGet, uri, nil, 0)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	req = req.WithContext(ctx)
	req.Header.Set("Accept", "text/event-stream")
	pr, pw := io.Pipe()
	sw := newStreamWriter(pw)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			// Off the server's goroutine, nothing else would catch a
			// panic: a reverse proxy (the cluster's, forwarding to the
			// session's node) aborts a stream whose reader left with
			// http.ErrAbortHandler, which must not end the server.
			v := recover()
			if v != nil && v != http.ErrAbortHandler {
				s.h.log.Error("e2b: panic in a process's output stream", "sandbox", t.id, "pid", pid, "panic", v, "stack", string(debug.Stack()))
			}
			sw.headerOnce() // a handler that wrote nothing answered 200
			if v != nil {
				pw.CloseWithError(errStreamAborted)
				return
			}
			pw.Close()
		}()
		s.h.api.ServeHTTP(sw, req)
	}()
	defer func() {
		cancel()
		pr.CloseWithError(errFollowEnded)
		<-done
	}()
	select {
	case <-sw.header:
	case <-ctx.Done():
		return ctx.Err()
	}
	if sw.status != http.StatusOK {
		rec := newRecorder(64 << 10)
		rec.status = sw.status
		rec.hdr = sw.hdr.Clone()
		_, _ = io.Copy(rec, io.LimitReader(pr, 64<<10))
		return procError(rec.apiError(), t)
	}
	ended, err := readSSE(pr, maxSSELine, func(event string, data []byte) (bool, error) {
		return s.dispatch(event, data, send)
	}, func() error {
		// The stream's heartbeat: envd's keepalive keeps proxies and the
		// SDK's reads from giving up on a quiet command.
		return send(&procpb.ProcessEvent{Event: &procpb.ProcessEvent_Keepalive{Keepalive: &procpb.ProcessEvent_KeepAlive{}}})
	})
	var rerr *sseReadError
	switch {
	case ended || (err != nil && !errors.As(err, &rerr)):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		s.h.log.Warn("e2b: reading a process's output stream", "sandbox", t.id, "pid", pid, "err", err)
		return connect.NewError(connect.CodeInternal, errors.New("reading the process's output failed"))
	}
	// The stream ended without the process's end: the session went away
	// under it (the API ends a follow only with exit, an error or the
	// caller leaving).
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s stopped serving the process's output", t.id))
}

// readSSE reads /v1's Server-Sent Events from r (lines of at most max
// bytes): each event's name and data go to event, which says whether the
// stream is over; each heartbeat (a comment line) goes to heartbeat, when
// not nil. It returns true once event said so, the first error of a
// callback as it is, or a *sseReadError when r failed; false and nil
// when r ended first.
func readSSE(r io.Reader, max int, event func(name string, data []byte) (bool, error), heartbeat func() error) (bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(64<<10, max)), max)
	var name string
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if name != "" {
				if ended, err := event(name, data); err != nil || ended {
					return ended, err
				}
			}
			name, data = "", data[:0]
		case line[0] == ':':
			if heartbeat != nil {
				if err := heartbeat(); err != nil {
					return false, err
				}
			}
		case bytes.HasPrefix(line, []byte("event: ")):
			name = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			data = append(data, line[len("data: "):]...)
		}
	}
	if err := sc.Err(); err != nil {
		return false, &sseReadError{err}
	}
	return false, nil
}

// sseReadError is a /v1 stream that could not be read to its end.
type sseReadError struct{ err error }

func (e *sseReadError) Error() string { return "reading the stream: " + e.err.Error() }
func (e *sseReadError) Unwrap() error { return e.err }

// errFollowEnded closes the pipe under a /v1 stream the caller no longer
// reads; errStreamAborted is a /v1 stream that ended in a panic.
var (
	errFollowEnded   = errors.New("the E2B caller stopped following the process")
	errStreamAborted = errors.New("the process's output stream was aborted")
)

// dispatch sends one /v1 stream event on; ended is true after the end.
func (s procService) dispatch(event string, data []byte, send func(*procpb.ProcessEvent) error) (ended bool, err error) {
	switch event {
	case "stdout", "stderr", "pty":
		var c wire.ProcessOutputChunk
		if err := json.Unmarshal(data, &c); err != nil {
			return false, connect.NewError(connect.CodeInternal, errors.New("unreadable output event"))
		}
		if c.Data == "" {
			return false, nil
		}
		out := &procpb.ProcessEvent_DataEvent{}
		switch event {
		case "stdout":
			out.Output = &procpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte(c.Data)}
		case "stderr":
			out.Output = &procpb.ProcessEvent_DataEvent_Stderr{Stderr: []byte(c.Data)}
		default:
			out.Output = &procpb.ProcessEvent_DataEvent_Pty{Pty: []byte(c.Data)}
		}
		return false, send(&procpb.ProcessEvent{Event: &procpb.ProcessEvent_Data{Data: out}})
	case "exit":
		var p wire.Process
		if err := json.Unmarshal(data, &p); err != nil {
			return false, connect.NewError(connect.CodeInternal, errors.New("unreadable exit event"))
		}
		return true, send(endEvent(p))
	case "error":
		var e struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		return true, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the process's output stream failed: %s", e2bMessage(e.Message)))
	}
	// dropped: output no longer kept (the reader fell 2 MiB behind);
	// envd has no such event, and what is kept follows.
	return false, nil
}

// streamWriter is the ResponseWriter of an in-process /v1 stream: the
// body goes into a pipe that follow reads; header is closed once the
// status is known. Writes block until read (or fail once the reader has
// gone), so a stream cannot pile up in memory.
type streamWriter struct {
	hdr    http.Header
	status int
	header chan struct{}
	once   sync.Once
	pw     *io.PipeWriter
}

func newStreamWriter(pw *io.PipeWriter) *streamWriter {
	return &streamWriter{hdr: http.Header{}, header: make(chan struct{}), pw: pw}
}

func (w *streamWriter) Header() http.Header { return w.hdr }

func (w *streamWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.status = code
		close(w.header)
	})
}

func (w *streamWriter) headerOnce() { w.WriteHeader(http.StatusOK) }

func (w *streamWriter) Write(p []byte) (int, error) {
	w.headerOnce()
	return w.pw.Write(p)
}

// Flush is a no-op: every write reaches the reader unbuffered.
func (w *streamWriter) Flush() {}
