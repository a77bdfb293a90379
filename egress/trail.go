package egress

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// AuditPruneInterval is how often an AuditPruner deletes the stored
// decisions past their retention.
const AuditPruneInterval = time.Hour

// AuditPruner keeps a stored audit trail within its retention: a lifecycle
// component that deletes the decisions older than Retention when it starts
// and every AuditPruneInterval, until Stop, which waits for a prune under
// way. The zero value prunes nothing, as does Retention <= 0 (only
// possible while egress is disabled, which skips validation). Set the
// fields before Start; Start and Stop are each called once.
type AuditPruner struct {
	Retention time.Duration
	// Prune deletes the decisions recorded before the given time and
	// returns how many it deleted (the store's PruneEgressDecisions).
	Prune func(ctx context.Context, before time.Time) (int64, error)
	Log   *slog.Logger // nil: slog.Default()

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// Start prunes now and then every AuditPruneInterval in the background,
// until ctx ends or Stop is called.
func (p *AuditPruner) Start(ctx context.Context) error {
	if p.Retention <= 0 || p.Prune == nil {
		return nil
	}
	log := p.Log
	if log == nil {
		log = slog.Default()
	}
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	prune := func() {
		n, err := p.Prune(ctx, time.Now().Add(-p.Retention))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("pruning egress decisions", "err", err)
		case n > 0:
			log.Info("egress decisions pruned", "rows", n, "retention", p.Retention.String())
		}
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(AuditPruneInterval)
		defer t.Stop()
		prune()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				prune()
			}
		}
	}()
	return nil
}

// Stop ends the pruning and waits for a prune under way.
func (p *AuditPruner) Stop(context.Context) error {
	p.stopOnce.Do(func() {
		if p.cancel != nil {
			p.cancel()
			<-p.done
		}
	})
	return nil
}

// AuditHooks returns the proxy's Options.OnDecision and Options.Observe
// for an audit trail: onDecision hands record the decisions the proxy
// keeps (bounded per session, see Config.AuditRecordsPerMinute), observe
// hands count every decision. The topology canary's own connections
// (sessions named ProbeSessionPrefix...) are neither recorded nor counted.
func AuditHooks(record, count func(Decision)) (onDecision, observe func(Decision)) {
	onDecision = func(d Decision) {
		if !strings.HasPrefix(d.Session, ProbeSessionPrefix) {
			record(d)
		}
	}
	observe = func(d Decision) {
		if !strings.HasPrefix(d.Session, ProbeSessionPrefix) {
			count(d)
		}
	}
	return onDecision, observe
}
