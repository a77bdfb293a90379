package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// SessionSlots counts plan session slots (Plan.MaxSessions). serve passes
// the store (store.Store), which is exact across every node sharing it:
// a slot follows its session's row there, so it is given back whenever
// the session ends, for any reason and on any node, and kept while the
// session is hibernated. Implementations are safe for concurrent use.
type SessionSlots interface {
	// ReserveSessionSlot takes one of keyID's max slots, pending under
	// slotID, for node (the API passes "": the store names the node its
	// handle acts for); false means the key has max already.
	ReserveSessionSlot(ctx context.Context, keyID, slotID, node string, max int) (bool, error)
	// BindSessionSlot binds the pending slot slotID to the session just
	// made, sessionID: it is held from then on while the session lives.
	BindSessionSlot(ctx context.Context, keyID, slotID, sessionID string) error
	// ReleaseSessionSlot gives back the pending slot slotID (the session
	// was not made).
	ReleaseSessionSlot(ctx context.Context, slotID string) error
}

// RateTokens is the per-key token bucket behind Plan.RequestsPerMinute.
// serve passes the store's bucket (one per key, shared by every node)
// when the store is PostgreSQL, and leaves it nil, the in-memory bucket,
// on the SQLite file (one node). Implementations are safe for concurrent
// use.
type RateTokens interface {
	// TakeRateToken takes a token from keyID's bucket of perMinute
	// tokens, refilled at perMinute a minute, at now; refused, it says
	// how long until the next token.
	TakeRateToken(ctx context.Context, keyID string, perMinute int, now time.Time) (bool, time.Duration, error)
}

// quotaRetryAfter is the Retry-After of a refused session create.
const quotaRetryAfter = 10 * time.Second

// takeSlot reserves a session slot of p's plan for a session about to be
// made (a create or a fork) and returns it, or the 429 quota_exceeded.
//
// The slot must exist before the sandbox does, but the session's id does
// not: the executor chooses it (a warm sandbox's id becomes the id of the
// session that takes it), so the API cannot name the session up front
// without the executor taking ids from outside. The slot is therefore
// reserved under a provisional id ("pending_" and 16 random bytes) and
// bound to the session's id once the executor has made it (slot.bind).
// Between the two the reservation counts by itself; if this node dies in
// between, the store stops counting it after store.PendingSlotTTL.
func (s *Server) takeSlot(ctx context.Context, p *Principal) (*slot, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	sl := &slot{s: s, key: p.KeyID, id: "pending_" + hex.EncodeToString(b[:])}
	ok, err := s.slots.ReserveSessionSlot(ctx, p.KeyID, sl.id, "", p.Plan.MaxSessions)
	if err != nil {
		return nil, err
	}
	if !ok {
		e := apiErr(http.StatusTooManyRequests, "quota_exceeded", "plan %s allows %d concurrent sessions; delete one first", p.Plan.Name, p.Plan.MaxSessions)
		e.RetryAfter = quotaRetryAfter
		return nil, e
	}
	return sl, nil
}

// slot is one reservation of takeSlot: bind it to the session made, or
// let done give it back. Deferred done releases a slot never bound,
// whether the create failed, panicked or was cancelled. It belongs to one
// request and is not safe for concurrent use.
type slot struct {
	s     *Server
	key   string
	id    string
	bound bool
}

// bind binds the slot to sess. A failure is logged, not returned: the
// session exists, and its reservation still counts for a while.
func (sl *slot) bind(ctx context.Context, sess sandbox.Session) {
	sl.bound = true
	if err := sl.s.slots.BindSessionSlot(context.WithoutCancel(ctx), sl.key, sl.id, sess.ID); err != nil {
		sl.s.log.Error("binding session slot", "request_id", requestID(ctx), "session", sess.ID, "err", err)
	}
}

// done gives back a slot that was never bound.
func (sl *slot) done(ctx context.Context) {
	if sl.bound {
		return
	}
	if err := sl.s.slots.ReleaseSessionSlot(context.WithoutCancel(ctx), sl.id); err != nil {
		sl.s.log.Error("releasing session slot", "request_id", requestID(ctx), "slot", sl.id, "err", err)
	}
}

// takeRateToken applies p's plan rate: nil, or the 429 rate_limited with
// its Retry-After.
func (s *Server) takeRateToken(ctx context.Context, p *Principal) error {
	tctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	ok, wait, err := s.rate.TakeRateToken(tctx, p.KeyID, p.Plan.RequestsPerMinute, time.Now())
	if errors.Is(err, store.ErrUnavailable) {
		// The shared bucket's store is away: this node's own bucket
		// applies the plan meanwhile (per node, not per cluster).
		ok, wait, err = s.outageRate.TakeRateToken(ctx, p.KeyID, p.Plan.RequestsPerMinute, time.Now())
	}
	if err != nil {
		return fmt.Errorf("applying the rate limit: %w", err)
	}
	if !ok {
		e := apiErr(http.StatusTooManyRequests, "rate_limited", "plan %s allows %d requests per minute", p.Plan.Name, p.Plan.RequestsPerMinute)
		e.RetryAfter = wait
		return e
	}
	return nil
}

// rateLimiter is the in-memory RateTokens: a token bucket per key, in
// this process alone. The zero value is ready to use; it is safe for
// concurrent use.
type rateLimiter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
}

var _ RateTokens = (*rateLimiter)(nil)

type bucket struct {
	tokens float64
	last   time.Time
}

// TakeRateToken takes a token for key at perMinute, or says how long to
// wait. It never fails.
func (rl *rateLimiter) TakeRateToken(_ context.Context, key string, perMinute int, now time.Time) (bool, time.Duration, error) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.buckets == nil {
		rl.buckets = map[string]*bucket{}
	}
	b, ok := rl.buckets[key]
	capacity := float64(perMinute)
	if !ok {
		b = &bucket{tokens: capacity, last: now}
		rl.buckets[key] = b
	}
	rate := capacity / 60 // tokens per second
	b.tokens = math.Min(capacity, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0, nil
	}
	wait := time.Duration((1 - b.tokens) / rate * float64(time.Second))
	return false, wait, nil
}

// localSlots is the SessionSlots of a server given none: it counts the
// sessions Sandboxes holds for the key (CountSessions, this process's
// alone) plus the creates in flight, so it is exact on one node only.
// Build it with newLocalSlots (the zero value has no Sandboxes); it is
// safe for concurrent use.
type localSlots struct {
	sb       Sandboxes
	mu       sync.Mutex
	inFlight map[string]int    // by key
	pending  map[string]string // key by slot id
}

var _ SessionSlots = (*localSlots)(nil)

func newLocalSlots(sb Sandboxes) *localSlots {
	return &localSlots{sb: sb, inFlight: map[string]int{}, pending: map[string]string{}}
}

// ReserveSessionSlot takes a slot if live + in flight < max. Sessions
// are counted under the lock, so each is counted at least once.
func (q *localSlots) ReserveSessionSlot(_ context.Context, key, slotID, _ string, max int) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.pending[slotID]; ok {
		return true, nil
	}
	if q.sb.CountSessions(key)+q.inFlight[key] >= max {
		return false, nil
	}
	q.inFlight[key]++
	q.pending[slotID] = key
	return true, nil
}

// BindSessionSlot ends the reservation: the session made is counted by
// CountSessions from now on.
func (q *localSlots) BindSessionSlot(ctx context.Context, _, slotID, _ string) error {
	return q.ReleaseSessionSlot(ctx, slotID)
}

func (q *localSlots) ReleaseSessionSlot(_ context.Context, slotID string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	key, ok := q.pending[slotID]
	if !ok {
		return nil
	}
	delete(q.pending, slotID)
	if q.inFlight[key]--; q.inFlight[key] <= 0 {
		delete(q.inFlight, key)
	}
	return nil
}
