package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/metrics"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// egressFlushInterval is how often queued egress decisions are written to
// the store; egressPruneInterval how often those older than
// egress.audit_retention are deleted.
const (
	egressFlushInterval = 200 * time.Millisecond
	egressPruneInterval = time.Hour
)

// setupEgress starts the egress proxy and sandbox networking when the
// config enables them, and installs them in the executor (before Start).
// Stale namespaces, veths and rules are reconciled when the executor
// starts (it calls Network.Reconcile with its live sessions). Every
// decision is written to st, whose trail is pruned past
// egress.audit_retention (also while egress is disabled, so that turning
// it off keeps the retention promise), and counted in m. It returns the
// trail the API serves (nil when egress is off: the API reads the store's
// alone, so decisions of runs with egress on stay readable for
// egress.audit_retention) and a func that stops the proxy, then writes
// the decisions still queued; call it before st closes. The networks of
// sessions still alive stay, so a restarted server can adopt them.
func setupEgress(ctx context.Context, env *Env, ex *executor.Executor, st *store.Store, m *metrics.Metrics) (_ *egressTrail, _ func(), err error) {
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
	stopPrune := startEgressPruner(ctx, st, ec.AuditRetention, log)
	undo = append(undo, stopPrune)
	if !ec.Enabled {
		return nil, stopPrune, nil
	}
	nw, err := egress.NewNetwork(ec.Config, log)
	if err != nil {
		return nil, nil, err
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
	proxy, err := egress.NewProxy(ec.Config, egress.Options{Logger: log, OnDecision: onDecision, Observe: observe, Reserved: reserved})
	if err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(env.Config.DataDir, "egress")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("creating egress state folder: %w", err)
	}
	ex.SetNetwork(&egressNetwork{cfg: ec.Config, net: nw, proxy: proxy, dir: dir, log: log})
	return &egressTrail{st: st, w: trail}, func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := proxy.Stop(stopCtx); err != nil {
			log.Error("stopping egress proxy", "err", err)
		}
		trail.Close() // after the proxy: tunnels it closed report on the way out
		stopPrune()
	}, nil
}

// egressAudit returns the proxy's audit hooks: onDecision stores the
// records the proxy keeps (bounded per session, see
// egress.Config.AuditRecordsPerMinute) in trail, observe counts every
// decision in m. The readiness canary's own connections are
// neither stored nor counted.
func egressAudit(trail *store.EgressWriter, m *metrics.Metrics) (onDecision, observe func(egress.Decision)) {
	onDecision = func(d egress.Decision) {
		if !strings.HasPrefix(d.Session, probeSessionPrefix) {
			trail.Record(egressRow(d))
		}
	}
	observe = func(d egress.Decision) {
		if !strings.HasPrefix(d.Session, probeSessionPrefix) {
			m.EgressDecision(string(d.Outcome), egress.ReasonClass(d))
		}
	}
	return onDecision, observe
}

// startEgressPruner deletes the decisions older than retention now and
// every egressPruneInterval, until ctx ends or the returned func (which
// waits for a prune under way) is called. retention <= 0 (only possible
// while egress is disabled, which skips validation) prunes nothing.
func startEgressPruner(ctx context.Context, st *store.Store, retention time.Duration, log *slog.Logger) func() {
	if retention <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	prune := func() {
		n, err := st.PruneEgressDecisions(ctx, time.Now().Add(-retention))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("pruning egress decisions", "err", err)
		case n > 0:
			log.Info("egress decisions pruned", "rows", n, "retention", retention.String())
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(egressPruneInterval)
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
	return func() {
		cancel()
		<-done
	}
}

// egressNetwork implements executor.Network over egress.Network (netns,
// veth, nftables) and egress.Proxy (per-session listeners and policy). It
// records each session's network request under dir so that a restarted
// server can serve the sessions it adopts. Safe for concurrent use.
type egressNetwork struct {
	cfg   egress.Config
	net   *egress.Network
	proxy *egress.Proxy
	dir   string
	log   *slog.Logger
}

var (
	_ executor.Network = (*egressNetwork)(nil)
	_ api.EgressLog    = (*egressTrail)(nil)
)

// networkRequest is the session's network block as the API stored it.
type networkRequest struct {
	Enabled        bool     `json:"enabled"`
	AllowedDomains []string `json:"allowed_domains"`
}

func parseNetworkRequest(raw json.RawMessage) (policy.Policy, error) {
	var req networkRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return policy.Policy{}, fmt.Errorf("decoding network request: %w", err)
	}
	pol, err := policy.New(req.Enabled, req.AllowedDomains)
	if err != nil {
		return policy.Policy{}, fmt.Errorf("building egress policy: %w", err)
	}
	return pol, nil
}

func (n *egressNetwork) stateFile(id string) string { return filepath.Join(n.dir, id+".json") }

// Attach creates the session's netns and veth, opens its proxy listeners
// with the session's policy and returns what the sandbox needs.
func (n *egressNetwork) Attach(ctx context.Context, id string, raw json.RawMessage) (_ *executor.Attachment, err error) {
	if strings.ContainsAny(id, `/\`) || id == "" || id[0] == '.' {
		return nil, fmt.Errorf("attaching network: bad session id %q", id)
	}
	pol, err := parseNetworkRequest(raw)
	if err != nil {
		return nil, err
	}
	att, err := n.net.Setup(ctx, id)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = n.net.Teardown(context.WithoutCancel(ctx), id)
		}
	}()
	if _, err := n.proxy.AddSession(ctx, egress.Session{ID: id, HostAddr: att.HostAddr, SandboxAddr: att.SandboxAddr, Policy: pol}); err != nil {
		return nil, err
	}
	if err := os.WriteFile(n.stateFile(id), raw, 0o600); err != nil {
		_ = n.proxy.RemoveSession(context.WithoutCancel(ctx), id)
		return nil, fmt.Errorf("recording egress session: %w", err)
	}
	return n.attachment(att), nil
}

func (n *egressNetwork) attachment(att *egress.Attachment) *executor.Attachment {
	return &executor.Attachment{NetnsPath: att.NetnsPath, Env: sandboxProxyEnv(att, n.cfg.ConnectPort), ResolvConf: att.ResolvConf()}
}

// sandboxProxyEnv is egress.Attachment.ProxyEnv plus what pip, npm and
// plain-HTTP clients read. Plain HTTP goes to the proxy too, which refuses
// it with a clear 403 instead of a silent timeout.
func sandboxProxyEnv(att *egress.Attachment, port uint16) []string {
	u := fmt.Sprintf("http://%s:%d", att.HostAddr, port)
	var env []string
	for _, kv := range att.ProxyEnv(port) {
		k, _, _ := strings.Cut(kv, "=")
		if strings.EqualFold(k, "NO_PROXY") {
			continue
		}
		env = append(env, kv)
	}
	const local = "localhost,127.0.0.1,::1"
	return append(env,
		"HTTP_PROXY="+u, "http_proxy="+u,
		"NO_PROXY="+local, "no_proxy="+local,
		"npm_config_https_proxy="+u, "npm_config_proxy="+u,
		"PIP_PROXY="+u,
	)
}

// Detach closes the session's proxy listeners and removes its network.
func (n *egressNetwork) Detach(ctx context.Context, id string) error {
	var errs []error
	if err := n.proxy.RemoveSession(ctx, id); err != nil && !errors.Is(err, egress.ErrUnknownSession) {
		errs = append(errs, err)
	}
	if err := n.net.Teardown(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(n.stateFile(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing egress session record: %w", err))
	}
	return errors.Join(errs...)
}

// Reconcile removes the networks of sessions not in live and serves the
// live ones again (after a restart the proxy starts empty).
func (n *egressNetwork) Reconcile(ctx context.Context, live []string) error {
	if err := n.net.Reconcile(ctx, live); err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, id := range live {
		keep[id] = true
	}
	// A live session whose network cannot be served again stays without
	// egress (fail closed); that must not keep the server from starting.
	var errs []error
	for _, id := range live {
		raw, rerr := os.ReadFile(n.stateFile(id))
		if rerr != nil {
			continue // a session without network
		}
		att, ok := n.net.Attachment(id)
		if !ok {
			errs = append(errs, fmt.Errorf("adopting network of session %s: network missing", id))
			continue
		}
		pol, perr := parseNetworkRequest(raw)
		if perr != nil {
			errs = append(errs, fmt.Errorf("adopting network of session %s: %w", id, perr))
			continue
		}
		_, aerr := n.proxy.AddSession(ctx, egress.Session{ID: id, HostAddr: att.HostAddr, SandboxAddr: att.SandboxAddr, Policy: pol})
		if aerr != nil && !errors.Is(aerr, egress.ErrSessionExists) {
			errs = append(errs, fmt.Errorf("adopting network of session %s: %w", id, aerr))
			continue
		}
		n.log.Info("egress session adopted", "session", id)
	}
	if ents, derr := os.ReadDir(n.dir); derr == nil {
		for _, e := range ents {
			id, ok := strings.CutSuffix(e.Name(), ".json")
			if ok && !keep[id] {
				_ = os.Remove(filepath.Join(n.dir, e.Name()))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		n.log.Error("adopting egress sessions", "err", err)
	}
	return nil
}

// decisionJSON is one decision as the API shows it. A row may stand for
// several decisions (Count; First and Last set when it does).
type decisionJSON struct {
	Time       time.Time  `json:"time"`
	Mode       string     `json:"mode"`
	Host       string     `json:"host"`
	Port       uint16     `json:"port"`
	Addr       string     `json:"addr,omitempty"`
	Outcome    string     `json:"outcome"`
	Reason     string     `json:"reason"`
	BytesUp    int64      `json:"bytes_up"`
	BytesDown  int64      `json:"bytes_down"`
	DurationMS int64      `json:"duration_ms"`
	Count      int        `json:"count"`
	First      *time.Time `json:"first,omitempty"`
	Last       *time.Time `json:"last,omitempty"`
	Summary    bool       `json:"summary,omitempty"`
}

// egressTrail serves the egress audit trail from the store: the decisions
// of live and ended sessions, kept for egress.audit_retention. It
// implements api.EgressLog. Safe for concurrent use.
type egressTrail struct {
	st *store.Store
	w  *store.EgressWriter // nil when egress is off: nothing is queued
}

// EgressDecisions returns the session's latest limit decisions, oldest
// first (an empty list for a session without any).
func (t *egressTrail) EgressDecisions(ctx context.Context, sessionID string, limit int) (any, error) {
	// The caller's latest decisions count; a client hanging up must not
	// abort the write of rows already taken off the queue.
	if t.w != nil {
		t.w.Flush(context.WithoutCancel(ctx))
	}
	rows, err := t.st.EgressDecisions(ctx, sessionID, limit)
	if err != nil {
		return nil, err
	}
	out := make([]decisionJSON, 0, len(rows))
	for _, r := range rows {
		d := decisionJSON{Time: r.Time, Mode: r.Mode, Host: r.Host, Port: uint16(r.Port), Addr: r.Addr, Outcome: r.Outcome,
			Reason: r.Reason, BytesUp: r.BytesUp, BytesDown: r.BytesDown, DurationMS: r.DurationMS, Count: max(r.Count, 1), Summary: r.Summary}
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

// maxAuditText bounds the host and reason kept per stored decision: the
// host of a CONNECT is whatever the sandbox sent, and the trail is kept
// for weeks.
const maxAuditText = 512

// egressRow is d as the store keeps it. The key id is filled in by the
// store from the session's row.
func egressRow(d egress.Decision) store.EgressRow {
	r := store.EgressRow{SessionID: d.Session, Time: d.Time, Mode: string(d.Mode), Host: clipText(d.Host, maxAuditText), Port: int(d.Port),
		Outcome: string(d.Outcome), Reason: clipText(d.Reason, maxAuditText), BytesUp: d.BytesUp, BytesDown: d.BytesDown,
		DurationMS: d.Duration.Milliseconds(), Count: max(d.Count, 1), Summary: d.Summary}
	if !d.Last.IsZero() {
		r.Last = d.Last
	}
	if d.Addr.IsValid() {
		r.Addr = d.Addr.String()
	}
	return r
}

// clipText cuts s to at most n bytes of valid UTF-8.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
