package egress

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/egress/policy"
)

// Outcome is the result of one egress decision.
type Outcome string

// Outcomes, logged at Info (allow), Warn (deny) and Error (error: the
// connection was refused because something failed, e.g. the resolver).
const (
	OutcomeAllow Outcome = "allow"
	OutcomeDeny  Outcome = "deny"
	OutcomeError Outcome = "error"
)

// Mode says how a connection reached the proxy.
type Mode string

// Modes.
const (
	ModeConnect     Mode = "connect"
	ModeTransparent Mode = "transparent"
	ModePlainHTTP   Mode = "http"
)

// Decision is one audited egress decision. For allowed tunnels it is
// recorded when the tunnel closes, with the byte counts and duration.
type Decision struct {
	Time      time.Time     `json:"time"`
	Session   string        `json:"session"`
	Mode      Mode          `json:"mode"`
	Host      string        `json:"host"`
	Port      uint16        `json:"port"`
	Addr      netip.Addr    `json:"addr,omitzero"` // address dialled or refused
	Outcome   Outcome       `json:"outcome"`
	Reason    string        `json:"reason"`
	BytesUp   int64         `json:"bytes_up"`   // sandbox to upstream
	BytesDown int64         `json:"bytes_down"` // upstream to sandbox
	Duration  time.Duration `json:"duration"`
}

// ring keeps the last n decisions of a session. Guarded by Proxy.mu.
type ring struct {
	buf  []Decision
	next int
	full bool
}

func (r *ring) add(d Decision) {
	if len(r.buf) == 0 {
		return
	}
	r.buf[r.next] = d
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

func (r *ring) list() []Decision {
	if !r.full {
		return append([]Decision(nil), r.buf[:r.next]...)
	}
	out := make([]Decision, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

type auditor struct {
	log  *slog.Logger
	sink func(Decision)
	mu   sync.Mutex
	keep int
	byID map[string]*ring
}

func (a *auditor) record(d Decision) {
	level := slog.LevelInfo
	switch d.Outcome {
	case OutcomeDeny:
		level = slog.LevelWarn
	case OutcomeError:
		level = slog.LevelError
	}
	attrs := []slog.Attr{
		slog.String("session", d.Session),
		slog.String("mode", string(d.Mode)),
		slog.String("host", d.Host),
		slog.Int("port", int(d.Port)),
		slog.String("outcome", string(d.Outcome)),
		slog.String("reason", d.Reason),
		slog.Int64("bytes_up", d.BytesUp),
		slog.Int64("bytes_down", d.BytesDown),
		slog.Duration("duration", d.Duration),
	}
	if d.Addr.IsValid() {
		attrs = append(attrs, slog.String("addr", d.Addr.String()))
	}
	a.log.LogAttrs(context.Background(), level, "egress decision", attrs...)
	a.mu.Lock()
	r := a.byID[d.Session]
	if r != nil {
		r.add(d)
	}
	a.mu.Unlock()
	if a.sink != nil {
		a.sink(d)
	}
}

func (a *auditor) open(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byID[id] == nil {
		a.byID[id] = &ring{buf: make([]Decision, a.keep)}
	}
}

func (a *auditor) drop(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.byID, id)
}

func (a *auditor) list(id string) []Decision {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.byID[id]; r != nil {
		return r.list()
	}
	return nil
}

// ReasonClass maps a decision to a short label from a fixed set, for
// metrics: Reason is free text (it names hosts, addresses and errors) and
// would give a label per host. The handlers build reasons as one of the
// Reason constants, optionally followed by detail, so classes match on
// prefixes.
func ReasonClass(d Decision) string {
	r := d.Reason
	has := func(prefix string) bool { return strings.HasPrefix(r, prefix) }
	switch {
	case d.Outcome == OutcomeAllow:
		return "allowed"
	case r == policy.ReasonNotAllowed:
		return "not_allowed"
	case r == policy.ReasonNetworkDisabled:
		return "network_disabled"
	case has(reasonForbiddenAddr):
		return "forbidden_address"
	case has(reasonResolving):
		return "unresolvable"
	case has(reasonResolverFailure):
		return "resolver_failure"
	case has(ReasonSNIMismatch):
		return "sni_mismatch"
	case has(ReasonNoSNI):
		return "no_sni"
	case has(ReasonNotTLS):
		return "not_tls"
	case has(ReasonTunnelLimit):
		return "tunnel_limit"
	case has(ReasonPendingLimit):
		return "pending_limit"
	case d.Mode == ModePlainHTTP:
		return "plain_http"
	case r == ErrWrongSourceAddr.Error() || r == ErrUnknownSession.Error():
		return "unknown_session"
	case r == ErrStopped.Error():
		return "stopped"
	case has(reasonDialing):
		return "dial_failed"
	case d.Outcome == OutcomeError:
		return "error"
	}
	return "bad_target"
}
