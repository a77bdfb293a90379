package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
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

// Class is the kind of an egress decision, from a fixed set: set where the
// decision is made (as smokescreen's ipType), read by metrics as a label.
// Reason is free text (it names hosts, addresses and errors) and is never
// parsed back.
type Class string

// Classes of decisions.
const (
	ClassAllowed         Class = "allowed"
	ClassNotAllowed      Class = "not_allowed"      // host or address not in allowed_domains
	ClassDenied          Class = "denied"           // matched a denied entry
	ClassNetworkDisabled Class = "network_disabled" // the session has no network
	ClassForbiddenAddr   Class = "forbidden_address"
	ClassUnresolvable    Class = "unresolvable" // NXDOMAIN or no addresses
	ClassResolverFailure Class = "resolver_failure"
	ClassSNIMismatch     Class = "sni_mismatch"
	ClassNoSNI           Class = "no_sni"
	ClassNotTLS          Class = "not_tls"
	ClassTunnelLimit     Class = "tunnel_limit"
	ClassPendingLimit    Class = "pending_limit"
	ClassAuditCap        Class = "audit_cap" // a summary record
	ClassPlainHTTP       Class = "plain_http"
	ClassUnknownSession  Class = "unknown_session" // no session owns the source address
	ClassStopped         Class = "stopped"         // the proxy is stopping
	ClassDialFailed      Class = "dial_failed"
	ClassError           Class = "error"        // something else failed
	ClassBadTarget       Class = "bad_target"   // a malformed or refused target
	ClassUpstreamTLS     Class = "upstream_tls" // the proxy's own TLS to the upstream failed (credentials)
	ClassClientTLS       Class = "client_tls"   // the sandbox refused the proxy's certificate (credentials)
)

// Classes lists every Class (for metrics that pre-declare their labels
// and for tests).
var Classes = [...]Class{ClassAllowed, ClassNotAllowed, ClassDenied, ClassNetworkDisabled, ClassForbiddenAddr, ClassUnresolvable,
	ClassResolverFailure, ClassSNIMismatch, ClassNoSNI, ClassNotTLS, ClassTunnelLimit, ClassPendingLimit, ClassAuditCap,
	ClassPlainHTTP, ClassUnknownSession, ClassStopped, ClassDialFailed, ClassError, ClassBadTarget, ClassUpstreamTLS, ClassClientTLS}

// sessionErrClass classes a refusal by the error of Proxy.sessionOf or
// Proxy.acquire.
func sessionErrClass(err error) Class {
	switch {
	case errors.Is(err, ErrUnknownSession), errors.Is(err, ErrWrongSourceAddr):
		return ClassUnknownSession
	case errors.Is(err, ErrStopped):
		return ClassStopped
	case errors.Is(err, ErrTooManyTunnels):
		return ClassTunnelLimit
	}
	return ClassBadTarget
}

// Decision is one audited egress decision. For allowed tunnels it is
// recorded when the tunnel closes, with the byte counts and duration.
//
// What the audit keeps (Options.OnDecision, the log) is bounded per
// session (see auditor): besides single decisions it then holds records
// that stand for several, with Count > 1.
type Decision struct {
	Time    time.Time  `json:"time"`
	Session string     `json:"session"`
	Mode    Mode       `json:"mode"`
	Host    string     `json:"host"`
	Port    uint16     `json:"port"`
	Addr    netip.Addr `json:"addr,omitzero"` // address dialled or refused
	Outcome Outcome    `json:"outcome"`
	Reason  string     `json:"reason"`
	Class   Class      `json:"-"` // set with Outcome
	// Rule is the session's entry that decided (`allowed_domains "x"`,
	// `denied "y"`), empty when none did; AddrClass is the class of Addr
	// as the policy saw it. Both come from the policy's typed decision.
	Rule      string           `json:"rule,omitempty"`
	AddrClass policy.AddrClass `json:"addr_class,omitempty"`
	BytesUp   int64            `json:"bytes_up"`   // sandbox to upstream
	BytesDown int64            `json:"bytes_down"` // upstream to sandbox
	Duration  time.Duration    `json:"duration"`
	// Credential is set when the proxy terminated the connection's TLS
	// to add a session credential (its value is never recorded).
	Credential bool `json:"credential,omitempty"`
	// Count is how many decisions the record stands for: 0 or 1 for a
	// single one. An aggregate (Summary false) is Count repeats of the
	// same refusal (mode, host, port, address, outcome and reason) after
	// the first, which has a record of its own; a summary (Summary true)
	// is Count decisions of its mode and outcome over the per-minute cap,
	// with the sums of their bytes and durations and no host. Time and
	// First are the first of them, Last the last.
	Count   int       `json:"count,omitempty"`
	First   time.Time `json:"first,omitzero"`
	Last    time.Time `json:"last,omitzero"`
	Summary bool      `json:"summary,omitempty"`
}

// note records the rule and address class of a policy decision.
func (d *Decision) note(pd policy.Decision) {
	d.Rule, d.AddrClass = pd.Rule.String(), pd.Class
}

// ring keeps the last n decisions of a session. Guarded by auditor.mu.
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

// auditWindow is the period of the per-session audit cap.
const auditWindow = time.Minute

// ReasonAuditCap starts the reason of a summary record (Decision.Summary).
const ReasonAuditCap = "audit cap reached"

// repeatKey is what makes two refusals "the same" for aggregation.
type repeatKey struct {
	mode    Mode
	host    string
	port    uint16
	addr    netip.Addr
	outcome Outcome
	reason  string
}

func repeatKeyOf(d Decision) repeatKey {
	return repeatKey{d.Mode, d.Host, d.Port, d.Addr, d.Outcome, d.Reason}
}

type summaryKey struct {
	mode    Mode
	outcome Outcome
}

// sessionAudit is one session's audit state: its ring of recent
// decisions (every one) and the current window of the cap. Guarded by
// auditor.mu.
type sessionAudit struct {
	ring    *ring
	start   time.Time // of the window; zero: none open
	kept    int       // records kept individually in the window
	repeats map[repeatKey]*Decision
	over    map[summaryKey]*Decision
	timer   *time.Timer // closes a window that holds something pending
}

// auditor logs, keeps and passes on decisions, bounded per session and
// window of auditWindow: at most perWindow decisions are kept (logged and
// passed to sink) individually; a refusal identical to one kept in the
// window only counts towards that one's aggregate; anything past the cap
// only counts towards a summary per mode and outcome. Aggregates and
// summaries are kept when the window closes (at its end, when the session
// is dropped, or at flushAll). So a window keeps at most 2*perWindow+9
// records and log lines. The ring (Proxy.Decisions) and observe see every
// decision. Safe for concurrent use.
type auditor struct {
	log       *slog.Logger
	sink      func(Decision) // the kept records
	observe   func(Decision) // every decision (metrics)
	keep      int            // ring size
	perWindow int            // records kept individually per window
	window    time.Duration  // auditWindow unless testing
	now       func() time.Time

	mu   sync.Mutex
	byID map[string]*sessionAudit
}

func newAuditor(log *slog.Logger, opts Options, keep, perWindow int) *auditor {
	return &auditor{log: log, sink: opts.OnDecision, observe: opts.Observe, keep: keep, perWindow: perWindow,
		window: auditWindow, now: time.Now, byID: map[string]*sessionAudit{}}
}

// MaxAuditText bounds the host and reason of a decision as the audit
// keeps it (ring, log, OnDecision): a CONNECT's host is whatever the
// sandbox sent, up to the request size limit.
const MaxAuditText = 512

// ClipText cuts s to at most n bytes of valid UTF-8.
func ClipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

func (a *auditor) record(d Decision) {
	if a.observe != nil {
		a.observe(d)
	}
	d.Host, d.Reason = ClipText(d.Host, MaxAuditText), ClipText(d.Reason, MaxAuditText)
	var out []Decision
	a.mu.Lock()
	s := a.byID[d.Session]
	if s == nil {
		// Not a live session (a tunnel of a removed one closing, a
		// connection no session owns): nothing to bound it by, and rare.
		a.mu.Unlock()
		a.emit(d)
		return
	}
	s.ring.add(d)
	now := a.now()
	if !s.start.IsZero() && now.Sub(s.start) >= a.window {
		out = a.closeWindow(s)
	}
	if s.start.IsZero() {
		s.start = now
	}
	keepIt := false
	switch k := repeatKeyOf(d); {
	case d.Outcome != OutcomeAllow && s.repeats[k] != nil:
		agg := s.repeats[k]
		if agg.Count == 0 {
			agg.Time, agg.First = d.Time, d.Time
		}
		agg.Count++
		agg.Last = d.Time
		a.arm(d.Session, s, now)
	case s.kept < a.perWindow:
		s.kept++
		keepIt = true
		if d.Outcome != OutcomeAllow {
			if s.repeats == nil {
				s.repeats = map[repeatKey]*Decision{}
			}
			agg := d
			agg.Count, agg.BytesUp, agg.BytesDown, agg.Duration = 0, 0, 0, 0
			s.repeats[k] = &agg
		}
	default:
		sk := summaryKey{d.Mode, d.Outcome}
		if s.over == nil {
			s.over = map[summaryKey]*Decision{}
		}
		sum := s.over[sk]
		if sum == nil {
			sum = &Decision{Time: d.Time, First: d.Time, Session: d.Session, Mode: d.Mode, Outcome: d.Outcome, Class: ClassAuditCap, Summary: true}
			s.over[sk] = sum
		}
		sum.Count++
		sum.Last = d.Time
		sum.BytesUp += d.BytesUp
		sum.BytesDown += d.BytesDown
		sum.Duration += d.Duration
		a.arm(d.Session, s, now)
	}
	a.mu.Unlock()
	for _, r := range out {
		a.emit(r)
	}
	if keepIt {
		a.emit(d)
	}
}

// arm schedules the close of s's window, once it holds something that
// is not kept yet. Callers hold a.mu.
func (a *auditor) arm(id string, s *sessionAudit, now time.Time) {
	if s.timer != nil {
		return
	}
	start := s.start
	s.timer = time.AfterFunc(s.start.Add(a.window).Sub(now), func() {
		a.mu.Lock()
		var out []Decision
		if cur := a.byID[id]; cur == s && s.start.Equal(start) {
			out = a.closeWindow(s)
		}
		a.mu.Unlock()
		for _, r := range out {
			a.emit(r)
		}
	})
}

// closeWindow ends s's window and returns its aggregates and summaries,
// oldest first. Callers hold a.mu.
func (a *auditor) closeWindow(s *sessionAudit) []Decision {
	var out []Decision
	for _, agg := range s.repeats {
		if agg.Count > 0 {
			out = append(out, *agg)
		}
	}
	for _, sum := range s.over {
		sum.Reason = fmt.Sprintf("%s: %d %s decisions past %d records in %s not kept one by one",
			ReasonAuditCap, sum.Count, sum.Outcome, a.perWindow, a.window)
		out = append(out, *sum)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	if s.timer != nil {
		s.timer.Stop()
	}
	*s = sessionAudit{ring: s.ring}
	return out
}

// emit logs one kept record and passes it to the sink.
func (a *auditor) emit(d Decision) {
	level := slog.LevelInfo
	switch d.Outcome {
	case OutcomeDeny:
		level = slog.LevelWarn
	case OutcomeError:
		level = slog.LevelError
	}
	msg := "egress decision"
	switch {
	case d.Summary:
		msg = "egress decisions over the audit cap"
	case d.Count > 1 || (d.Count == 1 && !d.Last.IsZero()):
		msg = "egress decision repeated"
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
	if d.Rule != "" {
		attrs = append(attrs, slog.String("rule", d.Rule))
	}
	if d.AddrClass != "" {
		attrs = append(attrs, slog.String("addr_class", string(d.AddrClass)))
	}
	if d.Addr.IsValid() {
		attrs = append(attrs, slog.String("addr", d.Addr.String()))
	}
	if d.Credential {
		attrs = append(attrs, slog.Bool("credential", true))
	}
	if !d.Last.IsZero() {
		attrs = append(attrs, slog.Int("count", d.Count), slog.Time("first", d.First), slog.Time("last", d.Last))
	}
	a.log.LogAttrs(context.Background(), level, msg, attrs...)
	if a.sink != nil {
		a.sink(d)
	}
}

func (a *auditor) open(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byID[id] == nil {
		a.byID[id] = &sessionAudit{ring: &ring{buf: make([]Decision, a.keep)}}
	}
}

// drop forgets the session after keeping what its window still holds.
func (a *auditor) drop(id string) {
	a.mu.Lock()
	var out []Decision
	if s := a.byID[id]; s != nil {
		out = a.closeWindow(s)
		delete(a.byID, id)
	}
	a.mu.Unlock()
	for _, r := range out {
		a.emit(r)
	}
}

// flushAll keeps what every open window holds (at Stop).
func (a *auditor) flushAll() {
	a.mu.Lock()
	var out []Decision
	for _, s := range a.byID {
		out = append(out, a.closeWindow(s)...)
	}
	a.mu.Unlock()
	for _, r := range out {
		a.emit(r)
	}
}

func (a *auditor) list(id string) []Decision {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.byID[id]; s != nil {
		return s.ring.list()
	}
	return nil
}
