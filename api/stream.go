package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// replyExecution runs an execution and writes the JSON result, or streams
// it as Server-Sent Events. A stream's headers go out with the first
// output or after streamHeaderHold, whichever is first, so that a run
// the executor refuses at once (no capacity, no such session) still gets
// its status; after that a comment line is sent whenever the stream has
// been silent for the heartbeat, so clients and proxies with read
// timeouts keep a quiet program, and a failure is an `error` event. Each
// write must reach the client's socket within the stream write timeout: a
// client that stops reading fails the write, which cancels the run so its
// sandbox is released.
func (s *Server) replyExecution(w http.ResponseWriter, r *http.Request, ereq sandbox.ExecRequest, stream bool, run func(context.Context, sandbox.ExecRequest) (sandbox.Result, error)) error {
	cw, _ := w.(*countingWriter)
	if !stream {
		res, err := run(r.Context(), ereq)
		if err != nil && res.Status != sandbox.StatusOOM {
			return err
		}
		if cw != nil {
			cw.execMillis = res.DurationMS
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	if _, ok := w.(http.Flusher); !ok {
		return fmt.Errorf("streaming unsupported by the response writer")
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.streamWriteTimeout(), cancel: cancel}
	sw.startHeartbeat(min(streamHeaderHold, s.streamHeartbeat()), s.streamHeartbeat())
	ereq.OnOutput = func(streamName string, p []byte) {
		sw.mu.Lock()
		defer sw.mu.Unlock()
		sw.event(streamName, map[string]string{"data": string(p)})
	}
	res, err := run(ctx, ereq)
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.stopHeartbeat()
	defer sw.clearDeadline()
	if sw.err != nil {
		s.log.Warn("stream client stopped reading; execution cancelled", "request_id", requestID(r.Context()), "err", sw.err)
		return nil
	}
	if err != nil && res.Status != sandbox.StatusOOM {
		if !sw.started {
			return err
		}
		ae := toAPIError(err)
		if ae == nil {
			ae = &Error{Code: "internal", Message: "internal error"}
			s.log.Error("streamed execution failed", "request_id", requestID(r.Context()), "err", err)
		}
		sw.event("error", errorPayload{Code: ae.Code, Message: ae.Message, RequestID: requestID(r.Context())})
		return nil
	}
	if cw != nil {
		cw.execMillis = res.DurationMS
	}
	sw.event("result", res)
	return nil
}

// defaultStreamWriteTimeout bounds each SSE write when
// Config.StreamWriteTimeout is zero; defaultStreamHeartbeat is the
// heartbeat when Config.StreamHeartbeat is zero. streamHeaderHold is the
// longest a stream's headers wait for the run to print or fail (never
// longer than the heartbeat).
const (
	defaultStreamWriteTimeout = 30 * time.Second
	defaultStreamHeartbeat    = 15 * time.Second
	streamHeaderHold          = time.Second
)

func (s *Server) streamWriteTimeout() time.Duration {
	if s.cfg.StreamWriteTimeout > 0 {
		return s.cfg.StreamWriteTimeout
	}
	return defaultStreamWriteTimeout
}

func (s *Server) streamHeartbeat() time.Duration {
	if s.cfg.StreamHeartbeat > 0 {
		return s.cfg.StreamHeartbeat
	}
	return defaultStreamHeartbeat
}

// heartbeatComment is the SSE comment line sent while a stream is silent;
// SSE clients ignore lines that start with a colon.
const heartbeatComment = ": keepalive\n\n"

// sseWriter writes the events of one streamed execution. Callers of event
// hold mu. After a failed write it drops every later write and has
// cancelled the run.
type sseWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	cancel  context.CancelFunc
	started bool // headers sent
	err     error

	every   time.Duration // heartbeat
	last    time.Time     // of the latest write
	beat    *time.Timer   // runs heartbeat
	stopped bool          // no heartbeat after stopHeartbeat
}

// startHeartbeat arms the timer: the headers go out after hold unless a
// write came first, then a comment line after every silence of every.
func (sw *sseWriter) startHeartbeat(hold, every time.Duration) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.every = every
	sw.beat = time.AfterFunc(hold, sw.heartbeat)
}

// heartbeat runs on the timer: it sends the headers if nothing has yet,
// or a comment when the stream has been silent for the heartbeat, and
// re-arms the timer.
func (sw *sseWriter) heartbeat() {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.stopped || sw.err != nil {
		return
	}
	if !sw.started {
		sw.write(nil)
		sw.beat.Reset(sw.every)
		return
	}
	if wait := sw.every - time.Since(sw.last); wait > 0 {
		sw.beat.Reset(wait)
		return
	}
	sw.write(func(w http.ResponseWriter) error {
		_, err := io.WriteString(w, heartbeatComment)
		return err
	})
	sw.beat.Reset(sw.every)
}

// stopHeartbeat ends the heartbeat; the caller holds mu, so no heartbeat
// is being written and none follows.
func (sw *sseWriter) stopHeartbeat() {
	sw.stopped = true
	if sw.beat != nil {
		sw.beat.Stop()
	}
}

func (sw *sseWriter) event(name string, v any) {
	sw.write(func(w http.ResponseWriter) error { return writeEvent(w, name, v) })
}

// write sends the headers if they are not out yet, then runs f (if any)
// on the response under the write deadline, and flushes. Callers hold mu.
func (sw *sseWriter) write(f func(http.ResponseWriter) error) {
	if sw.err != nil {
		return
	}
	// A writer without deadlines (a recorder, the in-process MCP client)
	// cannot stall on a socket; anything else can, and is bounded.
	if err := sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		sw.fail(err)
		return
	}
	if !sw.started {
		sw.started = true
		h := sw.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no")
		sw.w.WriteHeader(http.StatusOK)
	}
	if f != nil {
		if err := f(sw.w); err != nil {
			sw.fail(err)
			return
		}
	}
	if err := sw.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		sw.fail(err)
		return
	}
	sw.last = time.Now()
}

func (sw *sseWriter) fail(err error) {
	sw.err = fmt.Errorf("writing to the stream: %w", err)
	sw.cancel()
}

// clearDeadline lifts the last write's deadline so it cannot cut a later
// response on the same connection.
func (sw *sseWriter) clearDeadline() {
	if sw.started && sw.err == nil {
		_ = sw.rc.SetWriteDeadline(time.Time{})
	}
}

func writeEvent(w io.Writer, event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	return err
}
