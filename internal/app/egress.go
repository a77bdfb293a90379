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
	"github.com/sandboxapi/sandboxapi/internal/metrics"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/seal"
	"github.com/sandboxapi/sandboxapi/store"
)

// egressParts is what setupEgress started: the session networking (nil
// while egress is off), the API's view of the audit trail and the func
// that stops them.
type egressParts struct {
	keys     *seal.Keys // seals and opens credentials; nil while egress is off
	sessions *egress.Sessions
	trail    *egressTrail
	stop     func()
}

// egressFlushInterval is how often queued egress decisions are written to
// the store (egress.AuditPruneInterval is how often those older than
// egress.audit_retention are deleted).
const egressFlushInterval = 200 * time.Millisecond

// setupEgress starts the egress proxy and sandbox networking when the
// config enables them, and installs them in the executor (before Start).
// Stale namespaces, veths and rules are reconciled when the executor
// starts (it calls Network.Reconcile with its live sessions). Every
// decision is written to st, whose trail is pruned past
// egress.audit_retention (also while egress is disabled, so that turning
// it off keeps the retention promise), and counted in m. Its stop stops
// the proxy, then writes the decisions still queued; call it before st
// closes. The networks of sessions still alive stay, so a restarted server
// can adopt them. With egress off, the trail is the store's alone
// (decisions of runs with egress on stay readable for
// egress.audit_retention) and sessions is nil.
func setupEgress(ctx context.Context, env *Env, ex *executor.Executor, st *store.Store, m *metrics.Metrics) (_ *egressParts, err error) {
	ec := env.Config.Egress
	log := env.Log.With("component", "egress")
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	pruner := &egress.AuditPruner{Retention: ec.AuditRetention, Prune: st.PruneEgressDecisions, Log: log}
	_ = pruner.Start(ctx) // never fails
	stopPrune := func() { _ = pruner.Stop(ctx) }
	undo = append(undo, stopPrune)
	if !ec.Enabled {
		return &egressParts{trail: &egressTrail{st: st}, stop: stopPrune}, nil
	}
	trail := store.NewEgressWriter(ctx, st, egressFlushInterval, log)
	undo = append(undo, trail.Close)
	onDecision, observe := egressAudit(trail, m)
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
	opts := egress.Options{Logger: log, OnDecision: onDecision, Observe: observe, Reserved: reserved, CA: ca, Credentials: keys}
	sessions, err := egress.NewSessions(ec.Config, opts, filepath.Join(env.Config.DataDir, "egress"))
	if err != nil {
		return nil, err
	}
	ex.SetNetwork(sessions)
	return &egressParts{keys: keys, sessions: sessions, trail: &egressTrail{st: st, w: trail}, stop: func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := sessions.Stop(stopCtx); err != nil {
			log.Error("stopping egress proxy", "err", err)
		}
		trail.Close() // after the proxy: tunnels it closed report on the way out
		stopPrune()
	}}, nil
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
