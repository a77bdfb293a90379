package lifecycle

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// recorder is a component that notes its starts and stops in a shared log.
type recorder struct {
	name     string
	log      *[]string
	startErr error
	stopErr  error
}

func (r *recorder) Start(context.Context) error {
	*r.log = append(*r.log, "start "+r.name)
	return r.startErr
}

func (r *recorder) Stop(context.Context) error {
	*r.log = append(*r.log, "stop "+r.name)
	return r.stopErr
}

var errBoom = errors.New("boom")

func TestGroup(t *testing.T) {
	tests := []struct {
		name      string
		failStart string // the component whose Start fails
		failStop  string // the component whose Stop fails
		wantStart []string
		wantStop  []string // after Stop
		startErr  bool
		stopErr   bool
	}{
		{
			name:      "start in order, stop in reverse",
			wantStart: []string{"start a", "start b", "start c"},
			wantStop:  []string{"stop c", "stop b", "stop a"},
		},
		{
			name:      "failed start unwinds what started",
			failStart: "c",
			wantStart: []string{"start a", "start b", "start c", "stop b", "stop a"},
			wantStop:  nil, // Stop after the failed Start stops nothing twice
			startErr:  true,
		},
		{
			name:      "first start fails",
			failStart: "a",
			wantStart: []string{"start a"},
			startErr:  true,
		},
		{
			name:      "a failed stop does not keep the others running",
			failStop:  "b",
			wantStart: []string{"start a", "start b", "start c"},
			wantStop:  []string{"stop c", "stop b", "stop a"},
			stopErr:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log []string
			var g Group
			for _, n := range []string{"a", "b", "c"} {
				r := &recorder{name: n, log: &log}
				if n == tt.failStart {
					r.startErr = errBoom
				}
				if n == tt.failStop {
					r.stopErr = errBoom
				}
				g.Add(n, r)
			}
			err := g.Start(context.Background())
			if (err != nil) != tt.startErr || (err != nil && !errors.Is(err, errBoom)) {
				t.Fatalf("Start: %v, want error %v", err, tt.startErr)
			}
			if !slices.Equal(log, tt.wantStart) {
				t.Fatalf("after Start: %q, want %q", log, tt.wantStart)
			}
			log = nil
			err = g.Stop(context.Background())
			if (err != nil) != tt.stopErr {
				t.Fatalf("Stop: %v, want error %v", err, tt.stopErr)
			}
			if !slices.Equal(log, tt.wantStop) {
				t.Fatalf("after Stop: %q, want %q", log, tt.wantStop)
			}
			log = nil
			if err := g.Stop(context.Background()); err != nil || len(log) != 0 {
				t.Fatalf("second Stop: %v, %q; want nothing", err, log)
			}
		})
	}
}

// A Start that fails unwinds only what it started: components of an
// earlier Start keep running until Stop.
func TestGroupStartInSteps(t *testing.T) {
	var log []string
	var g Group
	g.Add("store", &recorder{name: "store", log: &log})
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.Add("executor", &recorder{name: "executor", log: &log})
	g.Add("http", &recorder{name: "http", log: &log, startErr: errBoom})
	g.Add("never", &recorder{name: "never", log: &log})
	if err := g.Start(context.Background()); !errors.Is(err, errBoom) {
		t.Fatalf("Start: %v, want %v", err, errBoom)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"start store", "start executor", "start http", "stop executor", "stop store"}
	if !slices.Equal(log, want) {
		t.Fatalf("log %q, want %q", log, want)
	}
}

// Cleanups take their place on the stack when pushed: components started
// later stop first, and a failed Start leaves the cleanups to Stop.
func TestGroupCleanup(t *testing.T) {
	var log []string
	var g Group
	undo := func(name string) func(context.Context) error {
		return func(context.Context) error { log = append(log, "undo "+name); return nil }
	}
	g.Cleanup("store", undo("store"))
	g.Add("executor", &recorder{name: "executor", log: &log})
	g.Cleanup("mirror", undo("mirror")) // opened while wiring, before Start
	g.Add("http", &recorder{name: "http", log: &log, startErr: errBoom})
	if err := g.Start(context.Background()); !errors.Is(err, errBoom) {
		t.Fatalf("Start: %v, want %v", err, errBoom)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = g.Stop(context.Background())
	want := []string{"start executor", "start http", "stop executor", "undo mirror", "undo store"}
	if !slices.Equal(log, want) {
		t.Fatalf("log %q, want %q", log, want)
	}
}
