package egress

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// capHarness drives an auditor on a fake clock and collects what it keeps.
type capHarness struct {
	a    *auditor
	mu   sync.Mutex
	kept []Decision
	seen int
	now  time.Time
}

func newCapHarness(perWindow int, window time.Duration) *capHarness {
	h := &capHarness{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	h.a = newAuditor(slog.New(slog.DiscardHandler), Options{
		OnDecision: func(d Decision) { h.mu.Lock(); h.kept = append(h.kept, d); h.mu.Unlock() },
		Observe:    func(Decision) { h.mu.Lock(); h.seen++; h.mu.Unlock() },
	}, 10, perWindow)
	h.a.window = window
	h.a.now = func() time.Time { h.mu.Lock(); defer h.mu.Unlock(); return h.now }
	h.a.open("s")
	return h
}

func (h *capHarness) advance(d time.Duration) { h.mu.Lock(); h.now = h.now.Add(d); h.mu.Unlock() }

func (h *capHarness) record(host string, o Outcome) {
	h.mu.Lock()
	at := h.now
	h.mu.Unlock()
	h.a.record(Decision{Time: at, Session: "s", Mode: ModeConnect, Host: host, Port: 443, Outcome: o, Reason: "r", BytesUp: 1})
}

func (h *capHarness) snapshot() (kept []Decision, seen int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Decision(nil), h.kept...), h.seen
}

// describe renders kept records compactly: host/outcome xCount, S for summaries.
func describe(ds []Decision) string {
	var out string
	for _, d := range ds {
		tag := ""
		switch {
		case d.Summary:
			tag = fmt.Sprintf(" S%d", d.Count)
		case d.Count > 0:
			tag = fmt.Sprintf(" x%d", d.Count)
		}
		out += fmt.Sprintf("[%s/%s%s]", d.Host, d.Outcome, tag)
	}
	return out
}

func TestAuditCap(t *testing.T) {
	t.Parallel()
	type step struct {
		host    string
		outcome Outcome
		times   int
		advance time.Duration // before the step
	}
	tests := []struct {
		name  string
		cap   int
		steps []step
		drop  bool // RemoveSession at the end
		want  string
	}{
		{name: "single decisions are kept as they come", cap: 5,
			steps: []step{{host: "a", outcome: OutcomeDeny, times: 1}, {host: "b", outcome: OutcomeAllow, times: 1}},
			want:  "[a/deny][b/allow]"},
		{name: "repeats wait for the window to close", cap: 5,
			steps: []step{{host: "a", outcome: OutcomeDeny, times: 100}},
			want:  "[a/deny]"},
		{name: "repeats are kept as one record on drop", cap: 5, drop: true,
			steps: []step{{host: "a", outcome: OutcomeDeny, times: 100}},
			want:  "[a/deny][a/deny x99]"},
		{name: "allows are never aggregated but count against the cap", cap: 2, drop: true,
			steps: []step{{host: "a", outcome: OutcomeAllow, times: 5}},
			want:  "[a/allow][a/allow][/allow S3]"},
		{name: "past the cap new names go to a summary per mode and outcome", cap: 2, drop: true,
			steps: []step{{host: "a", outcome: OutcomeDeny, times: 1}, {host: "b", outcome: OutcomeDeny, times: 1},
				{host: "c", outcome: OutcomeDeny, times: 1}, {host: "d", outcome: OutcomeError, times: 1},
				{host: "a", outcome: OutcomeDeny, times: 3}},
			want: "[a/deny][b/deny][/deny S1][/error S1][a/deny x3]"},
		{name: "the next window's first decision closes the last one", cap: 2,
			steps: []step{{host: "a", outcome: OutcomeDeny, times: 4}, {host: "x", outcome: OutcomeDeny, times: 3},
				{host: "a", outcome: OutcomeDeny, times: 1, advance: time.Hour}},
			want: "[a/deny][x/deny][a/deny x3][x/deny x2][a/deny]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newCapHarness(tt.cap, time.Hour) // the timer never fires here
			total := 0
			for _, s := range tt.steps {
				h.advance(s.advance)
				for range s.times {
					h.record(s.host, s.outcome)
					h.advance(time.Millisecond)
				}
				total += s.times
			}
			if tt.drop {
				h.a.drop("s")
			}
			kept, seen := h.snapshot()
			if got := describe(kept); got != tt.want {
				t.Fatalf("kept %s\n want %s", got, tt.want)
			}
			if seen != total {
				t.Fatalf("observed %d decisions, want %d", seen, total)
			}
			if !tt.drop {
				return
			}
			sum := 0
			for _, d := range kept {
				sum += max(d.Count, 1)
				if d.Count > 0 && (d.First.IsZero() || d.Last.Before(d.First) || !d.Time.Equal(d.First)) {
					t.Errorf("record %+v: bad first/last", d)
				}
			}
			if sum != total {
				t.Fatalf("counts add up to %d, want %d", sum, total)
			}
		})
	}
}

// A window holding repeats is closed by its timer even if the session
// goes quiet.
func TestAuditWindowClosesOnItsOwn(t *testing.T) {
	t.Parallel()
	h := newCapHarness(5, 100*time.Millisecond)
	h.a.now = time.Now
	for range 10 {
		h.record("a", OutcomeDeny)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if kept, _ := h.snapshot(); describe(kept) == "[a/deny][a/deny x9]" {
			h.a.drop("s")
			if kept, _ := h.snapshot(); len(kept) != 2 {
				t.Fatalf("drop after the timer kept more: %s", describe(kept))
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	kept, _ := h.snapshot()
	t.Fatalf("after the window: %s", describe(kept))
}
