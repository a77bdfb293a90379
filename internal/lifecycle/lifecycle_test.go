package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

var errBoom = errors.New("boom")

// spec is one unit of a test system: its needs and the step that fails.
type spec struct {
	name  string
	needs []string
	fail  string // "provision", "validate", "start", "stop" or "cleanup"
}

// build makes the units of specs, each noting every step it takes in the
// shared log as "step name".
func build(specs []spec, log *[]string) []Unit {
	var units []Unit
	for _, sp := range specs {
		step := func(name string) error {
			*log = append(*log, name+" "+sp.name)
			if sp.fail == name {
				return errBoom
			}
			return nil
		}
		units = append(units, Unit{
			Name:      sp.name,
			Needs:     sp.needs,
			Provision: func(context.Context) error { return step("provision") },
			Validate:  func() error { return step("validate") },
			Start:     func(context.Context) error { return step("start") },
			Stop:      func(context.Context) error { return step("stop") },
			Cleanup:   func(context.Context) error { return step("cleanup") },
		})
	}
	return units
}

// chain is c needs b needs a, added out of order.
var chain = []spec{{name: "c", needs: []string{"b"}}, {name: "a"}, {name: "b", needs: []string{"a"}}}

func TestSystem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		units     []spec
		wantStart []string // the steps Start took
		startErr  string   // "" for none, else a part of its message
		wantStop  []string // the steps the Stop after it took
		stopErr   string
	}{
		{
			name:  "needs order every step; stop in reverse",
			units: chain,
			wantStart: []string{"provision a", "provision b", "provision c", "validate a", "validate b", "validate c",
				"start a", "start b", "start c"},
			wantStop: []string{"stop c", "cleanup c", "stop b", "cleanup b", "stop a", "cleanup a"},
		},
		{
			name:  "ties keep the order added",
			units: []spec{{name: "z"}, {name: "y", needs: []string{"z"}}, {name: "x"}, {name: "w", needs: []string{"x", "y"}}},
			wantStart: []string{"provision z", "provision y", "provision x", "provision w", "validate z", "validate y", "validate x", "validate w",
				"start z", "start y", "start x", "start w"},
			wantStop: []string{"stop w", "cleanup w", "stop x", "cleanup x", "stop y", "cleanup y", "stop z", "cleanup z"},
		},
		{
			name:      "a cycle is an error naming it, and nothing runs",
			units:     []spec{{name: "a", needs: []string{"c"}}, {name: "b", needs: []string{"a"}}, {name: "c", needs: []string{"b"}}, {name: "d"}},
			startErr:  "a cycle of needs: a -> c -> b -> a",
			wantStart: nil,
		},
		{
			name:      "a unit needing itself is a cycle",
			units:     []spec{{name: "a", needs: []string{"a"}}},
			startErr:  "a cycle of needs: a -> a",
			wantStart: nil,
		},
		{
			name:      "a missing need is an error naming both, and nothing runs",
			units:     []spec{{name: "a"}, {name: "b", needs: []string{"a", "ghost"}}},
			startErr:  "b needs ghost, which is not in the system",
			wantStart: nil,
		},
		{
			name:     "two units of one name",
			units:    []spec{{name: "a"}, {name: "a"}},
			startErr: `two units named "a"`,
		},
		{
			name:      "a failed provision cleans up what provisioned, in reverse",
			units:     []spec{{name: "a"}, {name: "b", needs: []string{"a"}, fail: "provision"}, {name: "c", needs: []string{"b"}}},
			wantStart: []string{"provision a", "provision b", "cleanup a"},
			startErr:  "provisioning b: boom",
		},
		{
			name:  "a failed validation starts nothing",
			units: []spec{{name: "a", fail: "validate"}, {name: "b", needs: []string{"a"}}, {name: "c", needs: []string{"b"}, fail: "validate"}},
			wantStart: []string{"provision a", "provision b", "provision c", "validate a", "validate b", "validate c",
				"cleanup c", "cleanup b", "cleanup a"},
			startErr: "validating a: boom\nvalidating c: boom",
		},
		{
			name:  "a failed start unwinds in reverse: stop what started, clean up what provisioned",
			units: []spec{{name: "a"}, {name: "b", needs: []string{"a"}, fail: "start"}, {name: "c", needs: []string{"b"}}},
			wantStart: []string{"provision a", "provision b", "provision c", "validate a", "validate b", "validate c",
				"start a", "start b", "cleanup c", "cleanup b", "stop a", "cleanup a"},
			startErr: "starting b: boom",
			wantStop: nil, // Stop after the failed Start stops nothing twice
		},
		{
			name:  "stop errors are joined and do not keep the others up",
			units: []spec{{name: "a", fail: "stop"}, {name: "b", needs: []string{"a"}, fail: "cleanup"}, {name: "c", needs: []string{"b"}}},
			wantStart: []string{"provision a", "provision b", "provision c", "validate a", "validate b", "validate c",
				"start a", "start b", "start c"},
			wantStop: []string{"stop c", "cleanup c", "stop b", "cleanup b", "stop a", "cleanup a"},
			stopErr:  "cleaning up b: boom\nstopping a: boom",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var log []string
			var s System
			s.Add(build(tt.units, &log)...)
			err := s.Start(context.Background())
			checkErr(t, "Start", err, tt.startErr)
			if !slices.Equal(log, tt.wantStart) {
				t.Errorf("Start took\n%q\nwant\n%q", log, tt.wantStart)
			}
			log = nil
			checkErr(t, "Stop", s.Stop(context.Background()), tt.stopErr)
			if !slices.Equal(log, tt.wantStop) {
				t.Errorf("Stop took\n%q\nwant\n%q", log, tt.wantStop)
			}
			log = nil
			if err := s.Stop(context.Background()); err != nil || len(log) > 0 {
				t.Errorf("a second Stop: %v, took %q; want nothing", err, log)
			}
		})
	}
}

func checkErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s: no error, want one containing %q", what, want)
		return
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %q, want it to contain %q", what, err, want)
	}
	// An error of ordering is ErrOrder; any other wraps the unit's own.
	if !errors.Is(err, ErrOrder) && !errors.Is(err, errBoom) {
		t.Errorf("%s: %v is neither ErrOrder nor the unit's error", what, err)
	}
}

func TestOrder(t *testing.T) {
	t.Parallel()
	var log []string
	var s System
	s.Add(build(chain, &log)...)
	got, err := s.Order()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Order = %q, want %q", got, want)
	}
	if len(log) > 0 {
		t.Errorf("Order ran steps: %q", log)
	}
	if g := s.Graph(); !slices.Equal(g["c"], []string{"b"}) || len(g["a"]) != 0 || len(g) != 3 {
		t.Errorf("Graph = %v", g)
	}
}

// TestNilFuncs: a unit with no funcs is a node of the graph only.
func TestNilFuncs(t *testing.T) {
	t.Parallel()
	var log []string
	var s System
	s.Add(Unit{Name: "empty"})
	s.Add(build([]spec{{name: "a", needs: []string{"empty"}}}, &log)...)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"provision a", "validate a", "start a", "stop a", "cleanup a"}; !slices.Equal(log, want) {
		t.Errorf("took %q, want %q", log, want)
	}
}

// TestLog: one line per unit started and stopped, naming it, in order;
// after a failed start, the units that never started are cleaned up.
func TestLog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		units []spec
		want  []string
	}{
		{
			name:  "start and stop",
			units: chain,
			want:  []string{"started a", "started b", "started c", "stopped c", "stopped b", "stopped a"},
		},
		{
			name:  "failed start",
			units: []spec{{name: "a"}, {name: "b", needs: []string{"a"}, fail: "start"}, {name: "c", needs: []string{"b"}}},
			want:  []string{"started a", "cleaned up c", "cleaned up b", "stopped a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			s := System{Log: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			var steps []string
			s.Add(build(tt.units, &steps)...)
			_ = s.Start(context.Background())
			if err := s.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				var l struct{ Msg, Component string }
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					t.Fatal(err)
				}
				got = append(got, l.Msg+" "+l.Component)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("logged %q, want %q", got, tt.want)
			}
		})
	}
}

// TestStopWithoutStart: Stop on a system never started does nothing.
func TestStopWithoutStart(t *testing.T) {
	t.Parallel()
	var log []string
	var s System
	s.Add(build(chain, &log)...)
	if err := s.Stop(context.Background()); err != nil || len(log) > 0 {
		t.Errorf("Stop: %v, took %q", err, log)
	}
}
