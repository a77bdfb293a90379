package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/sandboxapi/sandboxapi/api/wire"
	fspb "github.com/sandboxapi/sandboxapi/e2b/internal/envdpb/filesystem"
)

// envd's WatchDir (what the SDK's files.watchDir calls: a server stream,
// not the CreateWatcher/GetWatcherEvents polling calls, which stay
// unimplemented) is the files API's watch, GET
// /v1/sessions/{id}/files/watch, whose server-sent events become the
// stream's messages as they come: start, then one filesystem event per
// change (its name relative to the watched folder, as envd's), and a
// keepalive for every keepalive comment. The stream ends when the SDK
// stops it (or its timeout passes), the folder goes or the sandbox stops.

// maxWatchEvent bounds one server-sent event from the API.
const maxWatchEvent = 64 << 10

func (s fsService) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	t := targetOf(ctx)
	if t == nil {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("no sandbox"))
	}
	p, err := pathArg(req.Msg.GetPath())
	if err != nil {
		return err
	}
	uri := "/v1/sessions/" + url.PathEscape(t.id) + "/files/watch?path=" + url.QueryEscape(p) +
		"&recursive=" + strconv.FormatBool(req.Msg.GetRecursive())
	r, err := t.caller.newRequest(http.MethodGet, uri, nil, 0)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	// The Connect call's own context: the SDK's timeout and its going away
	// end the watch.
	r = r.WithContext(ctx)
	sink := &watchSink{rec: newRecorder(64 << 10), dir: p, stream: stream}
	t.caller.api.ServeHTTP(sink, r)
	if sink.rec.status != http.StatusOK {
		return rpcError(sink.rec.apiError(), t.id)
	}
	if !sink.started {
		return connect.NewError(connect.CodeUnavailable, errors.New("the watch ended before it started"))
	}
	return sink.failure
}

// watchSink is the ResponseWriter of the in-process watch: a 200 reply's
// events become stream messages; any other reply is recorded.
type watchSink struct {
	rec    *recorder
	dir    string // the watched folder, our path
	stream *connect.ServerStream[fspb.WatchDirResponse]

	mu      sync.Mutex
	buf     []byte
	started bool
	failure error // the watch ended with an error event
	gone    bool  // the SDK stopped reading
}

func (w *watchSink) Header() http.Header  { return w.rec.hdr }
func (w *watchSink) WriteHeader(code int) { w.rec.WriteHeader(code) }
func (w *watchSink) Flush()               {}

func (w *watchSink) Write(p []byte) (int, error) {
	if w.rec.status == 0 {
		w.rec.WriteHeader(http.StatusOK)
	}
	if w.rec.status != http.StatusOK {
		return w.rec.Write(p)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone {
		return 0, errors.New("the watcher went away")
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.Index(w.buf, []byte("\n\n"))
		if i < 0 {
			break
		}
		ev := string(w.buf[:i])
		w.buf = w.buf[i+2:]
		if err := w.event(ev); err != nil {
			w.gone = true
			return 0, err
		}
	}
	if len(w.buf) > maxWatchEvent {
		w.gone = true
		return 0, errors.New("a watch event over the limit")
	}
	return len(p), nil
}

// event handles one server-sent event (its lines, without the blank one).
func (w *watchSink) event(text string) error {
	var name, data string
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, ":"):
			if w.started {
				return w.stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}})
			}
			return nil
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
	switch name {
	case "start":
		w.started = true
		return w.stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}})
	case "change":
		var fe wire.FileEvent
		if err := json.Unmarshal([]byte(data), &fe); err != nil {
			return err
		}
		typ, ok := eventTypes[fe.Op]
		if !ok {
			return nil // overflow: envd has no word for it
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(fe.Path, w.dir), "/")
		return w.stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: &fspb.FilesystemEvent{Name: rel, Type: typ}}})
	case "error":
		w.failure = connect.NewError(connect.CodeUnavailable, errors.New("the sandbox stopped; watch again"))
	}
	return nil
}

var eventTypes = map[string]fspb.EventType{
	"create": fspb.EventType_EVENT_TYPE_CREATE,
	"write":  fspb.EventType_EVENT_TYPE_WRITE,
	"remove": fspb.EventType_EVENT_TYPE_REMOVE,
	"rename": fspb.EventType_EVENT_TYPE_RENAME,
	"chmod":  fspb.EventType_EVENT_TYPE_CHMOD,
}
