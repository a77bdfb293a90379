package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/executor"
)

// egressLog is the API's view of the egress audit trail, set by
// setupEgress when egress is enabled and read by wireServices.
var egressLog *egressAudit

// wireEgress serves GET /v1/sessions/{id}/egress when egress is enabled.
func wireEgress(srv *api.Server) {
	if egressLog != nil {
		srv.SetEgressLog(egressLog)
	}
}

// endedSessionsKept bounds how many ended sessions' decisions stay in memory.
const endedSessionsKept = 256

// setupEgress starts the egress proxy and sandbox networking when the
// config enables them, and installs them in the executor (before Start).
// Stale namespaces, veths and rules are reconciled when the executor
// starts (it calls Network.Reconcile with its live sessions). The returned
// func stops the proxy; the networks of sessions still alive stay, so a
// restarted server can adopt them.
func setupEgress(ctx context.Context, env *Env, ex *executor.Executor) (func(), error) {
	egressLog = nil
	ec := env.Config.Egress
	if !ec.Enabled {
		return func() {}, nil
	}
	log := env.Log.With("component", "egress")
	nw, err := egress.NewNetwork(ec.Config, log)
	if err != nil {
		return nil, err
	}
	audit := newEgressAudit(ec.DecisionsPerSession)
	proxy, err := egress.NewProxy(ec.Config, egress.Options{Logger: log, OnDecision: audit.record})
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(env.Config.DataDir, "egress")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating egress state folder: %w", err)
	}
	ex.SetNetwork(&egressNetwork{cfg: ec.Config, net: nw, proxy: proxy, audit: audit, dir: dir, log: log})
	egressLog = audit
	return func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := proxy.Stop(stopCtx); err != nil {
			log.Error("stopping egress proxy", "err", err)
		}
	}, nil
}

// egressNetwork implements executor.Network over egress.Network (netns,
// veth, nftables) and egress.Proxy (per-session listeners and policy). It
// records each session's network request under dir so that a restarted
// server can serve the sessions it adopts. Safe for concurrent use.
type egressNetwork struct {
	cfg   egress.Config
	net   *egress.Network
	proxy *egress.Proxy
	audit *egressAudit
	dir   string
	log   *slog.Logger
}

var (
	_ executor.Network = (*egressNetwork)(nil)
	_ api.EgressLog    = (*egressAudit)(nil)
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
	n.audit.open(id)
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
	n.audit.end(id)
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
		n.audit.open(id)
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

// egressAudit keeps the recent decisions of every session, fed by
// egress.Options.OnDecision, and those of the last endedSessionsKept
// ended sessions (the proxy forgets a session's decisions when it is
// removed, and tunnels closed by the removal report after that). It
// implements api.EgressLog. Safe for concurrent use; use newEgressAudit.
type egressAudit struct {
	per   int
	mu    sync.Mutex
	byID  map[string][]egress.Decision
	ended []string // oldest first
}

func newEgressAudit(per int) *egressAudit {
	if per <= 0 {
		per = 1000
	}
	return &egressAudit{per: per, byID: map[string][]egress.Decision{}}
}

func (a *egressAudit) open(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.byID[id]; !ok {
		a.byID[id] = nil
	}
}

func (a *egressAudit) end(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.byID[id]; !ok {
		return
	}
	a.ended = append(a.ended, id)
	for len(a.ended) > endedSessionsKept {
		delete(a.byID, a.ended[0])
		a.ended = a.ended[1:]
	}
}

// record must not block: it runs on the proxy's connection goroutines.
func (a *egressAudit) record(d egress.Decision) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.byID[d.Session]
	if !ok {
		return // unknown or long-gone session
	}
	l = append(l, d)
	if len(l) > 2*a.per {
		l = append([]egress.Decision(nil), l[len(l)-a.per:]...)
	}
	a.byID[d.Session] = l
}

// decisionJSON is one decision as the API shows it.
type decisionJSON struct {
	Time       time.Time `json:"time"`
	Mode       string    `json:"mode"`
	Host       string    `json:"host"`
	Port       uint16    `json:"port"`
	Addr       string    `json:"addr,omitempty"`
	Outcome    string    `json:"outcome"`
	Reason     string    `json:"reason"`
	BytesUp    int64     `json:"bytes_up"`
	BytesDown  int64     `json:"bytes_down"`
	DurationMS int64     `json:"duration_ms"`
}

// EgressDecisions returns the session's recent decisions, oldest first
// (an empty list for a session without any).
func (a *egressAudit) EgressDecisions(ctx context.Context, sessionID string) (any, error) {
	a.mu.Lock()
	l := a.byID[sessionID]
	if len(l) > a.per {
		l = l[len(l)-a.per:]
	}
	out := make([]decisionJSON, 0, len(l))
	for _, d := range l {
		j := decisionJSON{Time: d.Time.UTC(), Mode: string(d.Mode), Host: d.Host, Port: d.Port, Outcome: string(d.Outcome),
			Reason: d.Reason, BytesUp: d.BytesUp, BytesDown: d.BytesDown, DurationMS: d.Duration.Milliseconds()}
		if d.Addr.IsValid() {
			j.Addr = d.Addr.String()
		}
		out = append(out, j)
	}
	a.mu.Unlock()
	return out, nil
}
