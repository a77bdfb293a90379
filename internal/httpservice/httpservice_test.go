package httpservice

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/httperr"
	"github.com/sandboxapi/sandboxapi/internal/lifecycle"
)

var _ lifecycle.Component = (*Service)(nil)

func newService(t *testing.T, h http.Handler) *Service {
	return &Service{
		Server: &http.Server{Handler: h},
		Listen: func(context.Context) (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") },
		Log:    slog.New(slog.DiscardHandler),
	}
}

// Stop runs the drain hook first, keeps serving for the drain delay, lets
// a running request finish within the grace period, then refuses
// connections.
func TestServiceDrainsThenStops(t *testing.T) {
	release := make(chan struct{})
	var drained atomic.Bool
	running := make(chan struct{})
	s := newService(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(running)
			<-release
		}
		if drained.Load() {
			w.Header().Set("X-Drained", "1")
		}
	}))
	s.Drain = func() { drained.Store(true) }
	s.DrainDelay, s.ShutdownGrace = 300*time.Millisecond, 5*time.Second
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr().String()
	slow := make(chan error, 1)
	go func() {
		resp, err := http.Get(base + "/slow")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		slow <- err
	}()
	<-running // the slow request is in the handler, not on its way
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(context.Background()) }()
	time.Sleep(100 * time.Millisecond) // within the drain delay
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(base + "/fast")
	if err != nil {
		t.Fatalf("during the drain delay: %v", err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Drained") != "1" {
		t.Error("the drain hook did not run before the delay")
	}
	close(release)
	if err := <-slow; err != nil {
		t.Errorf("the running request was cut: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", s.Addr().String(), time.Second); err == nil {
		t.Error("still listening after Stop")
	}
}

// A request still running when the grace period ends, that does not
// answer when told to, has its connection closed after the reply wait; a
// failed server skips the drain delay.
func TestServiceGraceOverClosesConnections(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	running := make(chan struct{})
	s := newService(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { close(running); <-hang }))
	s.DrainDelay, s.ShutdownGrace, s.ReplyWait = time.Hour, 100*time.Millisecond, 200*time.Millisecond
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.Failed(http.ErrServerClosed) // as if Done had yielded: no drain delay
	got := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr().String() + "/")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	<-running // a refused connection would pass for a closed one
	start := time.Now()
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop took %s", d)
	}
	if err := <-got; err == nil {
		t.Error("the hanging request got a reply; want its connection closed")
	}
}

// TestServiceGraceOverInterruptsWithReply: a request still running when
// the grace period ends has its context cancelled with cause
// httperr.ErrShutdown, and the reply it then writes (here 503 "draining")
// reaches the client before the connection closes.
func TestServiceGraceOverInterruptsWithReply(t *testing.T) {
	running := make(chan struct{})
	s := newService(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(running)
		<-r.Context().Done()
		if !errors.Is(context.Cause(r.Context()), httperr.ErrShutdown) {
			return
		}
		time.Sleep(100 * time.Millisecond) // killing the work takes a moment
		w.Header().Set("Retry-After", "5")
		httperr.Write(w, http.StatusServiceUnavailable, httperr.Payload{Code: "draining", Message: "interrupted"})
	}))
	s.ShutdownGrace = 200 * time.Millisecond
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	type result struct {
		status int
		body   string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr().String() + "/")
		if err != nil {
			got <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- result{resp.StatusCode, string(b), err}
	}()
	<-running // Stop before the request arrived would refuse it instead
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"code":"draining"`) {
		t.Fatalf("call cut by the grace period: %d %q %v; want its 503 draining reply", r.status, r.body, r.err)
	}
}

// A listener that cannot be opened fails Start.
func TestServiceListenFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	s := newService(t, http.NotFoundHandler())
	s.Listen = func(context.Context) (net.Listener, error) { return net.Listen("tcp", taken.Addr().String()) }
	if err := s.Start(t.Context()); err == nil {
		t.Fatal("Start on a taken port succeeded")
	}
}
