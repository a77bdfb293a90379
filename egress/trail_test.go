package egress

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// TestAuditPruner: a pruner prunes once when it starts, with the cut-off
// its retention makes, and Stop ends it; without a retention it never
// prunes. The probe sessions' decisions are neither recorded nor counted.
func TestAuditPruner(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		retention time.Duration
		want      int64
	}{
		{name: "retention", retention: time.Hour, want: 1},
		{name: "none", retention: 0, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			pruned := make(chan time.Time, 1)
			p := &AuditPruner{Retention: tt.retention, Log: slog.New(slog.DiscardHandler),
				Prune: func(ctx context.Context, before time.Time) (int64, error) {
					calls.Add(1)
					pruned <- before
					return 0, errors.New("store closed")
				}}
			if err := p.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if tt.want > 0 {
				select {
				case before := <-pruned:
					if d := time.Since(before); d < tt.retention || d > tt.retention+time.Minute {
						t.Errorf("pruned before %v, %v ago; want %v ago", before, d, tt.retention)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("no prune at start")
				}
			}
			if err := p.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := p.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := calls.Load(); got != tt.want {
				t.Errorf("%d prunes, want %d", got, tt.want)
			}
		})
	}
}

func TestAuditHooksSkipProbes(t *testing.T) {
	t.Parallel()
	var recorded, counted []string
	onDecision, observe := AuditHooks(func(d Decision) { recorded = append(recorded, d.Session) },
		func(d Decision) { counted = append(counted, d.Session) })
	for _, id := range []string{"sess_a", ProbeSessionPrefix + "00ff"} {
		onDecision(Decision{Session: id})
		observe(Decision{Session: id})
	}
	if len(recorded) != 1 || recorded[0] != "sess_a" || len(counted) != 1 || counted[0] != "sess_a" {
		t.Fatalf("recorded %v, counted %v; want sess_a alone", recorded, counted)
	}
}
