package app

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/lifecycle"
	"github.com/sandboxapi/sandboxapi/internal/metrics"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/seal"
	"github.com/sandboxapi/sandboxapi/store"
)

// egressParts is what the egress unit built: the session networking
// (nil while egress is off), the API's view of the audit trail, the
// credentials' keys, and what writes and prunes the trail.
type egressParts struct {
	keys     *seal.Keys // seals and opens credentials; nil while egress is off
	sessions *egress.Sessions
	trail    *egressTrail
	writer   *store.EgressWriter // nil while egress is off
	pruner   *egress.AuditPruner
}

// egressFlushInterval is how often queued egress decisions are written to
// the store (egress.AuditPruneInterval is how often those older than
// egress.audit_retention are deleted).
const egressFlushInterval = 200 * time.Millisecond

// egressUnit builds the egress proxy and sandbox networking when the
// config enables them; the executor is given them at construction. Stale
// namespaces, veths and rules are reconciled when the executor starts (it
// calls Network.Reconcile with its live sessions). Every decision is
// written to the store, whose trail is pruned past egress.audit_retention
// (also while egress is disabled, so that turning it off keeps the
// retention promise), and counted in the metrics. Stop stops the proxy
// and the pruner; Cleanup then writes the decisions still queued (tunnels
// the proxy closed report on the way out). The networks of sessions still
// alive stay, so a restarted server can adopt them. With egress off, the
// trail is the store's alone (decisions of runs with egress on stay
// readable for egress.audit_retention) and sessions is nil.
func (p *parts) egressUnit() lifecycle.Unit {
	return lifecycle.Unit{
		Name:  "egress",
		Needs: []string{"store", "metrics"},
		Provision: func(ctx context.Context) (err error) {
			p.eg, err = newEgress(ctx, p.env, p.st, p.m)
			return err
		},
		Start: func(ctx context.Context) error { return p.eg.pruner.Start(ctx) },
		Stop: func(ctx context.Context) error {
			var errs []error
			if p.eg.sessions != nil {
				stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := p.eg.sessions.Stop(stopCtx); err != nil {
					errs = append(errs, fmt.Errorf("stopping egress proxy: %w", err))
				}
			}
			return errors.Join(append(errs, p.eg.pruner.Stop(ctx))...)
		},
		Cleanup: func(context.Context) error {
			if p.eg.writer != nil {
				p.eg.writer.Close()
			}
			return nil
		},
	}
}

// newEgress builds the egress unit's parts; a failure closes what it
// opened.
func newEgress(ctx context.Context, env *Env, st *store.Store, m *metrics.Metrics) (*egressParts, error) {
	ec := env.Config.Egress
	log := env.Log.With("component", "egress")
	pruner := &egress.AuditPruner{Retention: ec.AuditRetention, Prune: st.PruneEgressDecisions, Log: log}
	if !ec.Enabled {
		return &egressParts{trail: &egressTrail{st: st}, pruner: pruner}, nil
	}
	// The installers' pool is never dialled either, whatever
	// extra_allowed_cidrs says (config validation keeps them disjoint).
	var reserved []netip.Prefix
	if p, err := netip.ParsePrefix(env.Config.Installer.Pool); err == nil {
		reserved = append(reserved, p.Masked())
	}
	keys, err := seal.LoadKeys(credentialsKeyFile(env), ec.CredentialsOldKeyFiles)
	if err != nil {
		return nil, fmt.Errorf("loading the credentials key: %w", err)
	}
	ca, err := egress.LoadCA(filepath.Join(env.Config.DataDir, "egress-ca"))
	if err != nil {
		return nil, err
	}
	writer := store.NewEgressWriter(ctx, st, egressFlushInterval, log)
	onDecision, observe := egressAudit(writer, m)
	opts := egress.Options{Logger: log, OnDecision: onDecision, Observe: observe, Reserved: reserved, CA: ca, Credentials: keys}
	sessions, err := egress.NewSessions(ec.Config, opts, filepath.Join(env.Config.DataDir, "egress"))
	if err != nil {
		writer.Close()
		return nil, err
	}
	return &egressParts{keys: keys, sessions: sessions, trail: &egressTrail{st: st, w: writer}, writer: writer, pruner: pruner}, nil
}

// credentialsKeyFile is egress.credentials_key_file, by default
// credentials.key in the data folder.
func credentialsKeyFile(env *Env) string {
	if f := env.Config.Egress.CredentialsKeyFile; f != "" {
		return f
	}
	return filepath.Join(env.Config.DataDir, "credentials.key")
}

// egressAudit returns the proxy's audit hooks (egress.AuditHooks):
// onDecision stores the records the proxy keeps in trail, observe counts
// every decision in m.
func egressAudit(trail *store.EgressWriter, m *metrics.Metrics) (onDecision, observe func(egress.Decision)) {
	return egress.AuditHooks(
		func(d egress.Decision) { trail.Record(egressRow(d)) },
		func(d egress.Decision) { m.EgressDecision(string(d.Outcome), string(d.Class)) })
}

var (
	_ executor.Network = (*egress.Sessions)(nil)
	_ api.EgressLog    = (*egressTrail)(nil)
)

// egressTrail serves the egress audit trail from the store: the decisions
// of live and ended sessions, kept for egress.audit_retention. It
// implements api.EgressLog. Safe for concurrent use.
type egressTrail struct {
	st *store.Store
	w  *store.EgressWriter // nil when egress is off: nothing is queued
}

// EgressDecisions returns the session's latest limit decisions, oldest
// first (an empty list for a session without any).
func (t *egressTrail) EgressDecisions(ctx context.Context, sessionID string, limit int) ([]wire.EgressDecision, error) {
	// The caller's latest decisions count; a client hanging up must not
	// abort the write of rows already taken off the queue.
	if t.w != nil {
		t.w.Flush(context.WithoutCancel(ctx))
	}
	rows, err := t.st.EgressDecisions(ctx, sessionID, limit)
	if err != nil {
		return nil, err
	}
	out := make([]wire.EgressDecision, 0, len(rows))
	for _, r := range rows {
		d := wire.EgressDecision{Time: r.Time, Mode: r.Mode, Host: r.Host, Port: uint16(r.Port), Addr: r.Addr, Outcome: r.Outcome,
			Reason: r.Reason, BytesUp: r.BytesUp, BytesDown: r.BytesDown, DurationMS: r.DurationMS, Count: max(r.Count, 1), Summary: r.Summary, Credential: r.Credential}
		if !r.Last.IsZero() {
			first, last := r.Time, r.Last
			d.First, d.Last = &first, &last
		}
		out = append(out, d)
	}
	return out, nil
}

// SessionOwner returns the key that created the session, from the store
// (which keeps ended sessions).
func (t *egressTrail) SessionOwner(ctx context.Context, sessionID string) (string, error) {
	row, err := t.st.GetSession(ctx, sessionID)
	if errors.Is(err, store.ErrNotFound) {
		return "", sandbox.ErrNotFound
	}
	if err != nil {
		return "", err
	}
	return row.KeyID, nil
}

// egressRow is d as the store keeps it. The key id is filled in by the
// store from the session's row.
func egressRow(d egress.Decision) store.EgressRow {
	r := store.EgressRow{SessionID: d.Session, Time: d.Time, Mode: string(d.Mode), Host: egress.ClipText(d.Host, egress.MaxAuditText), Port: int(d.Port),
		Outcome: string(d.Outcome), Reason: egress.ClipText(d.Reason, egress.MaxAuditText), BytesUp: d.BytesUp, BytesDown: d.BytesDown,
		DurationMS: d.Duration.Milliseconds(), Count: max(d.Count, 1), Summary: d.Summary, Credential: d.Credential}
	if !d.Last.IsZero() {
		r.Last = d.Last
	}
	if d.Addr.IsValid() {
		r.Addr = d.Addr.String()
	}
	return r
}
