package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// Executor is what a node needs from the executor of its process.
type Executor interface {
	// Has reports whether the executor serves session id now (in memory).
	Has(id string) bool
	// Adopt takes in a session whose row says this node owns it but that
	// is not in memory (after a claim, or after a fence of our own). It
	// fails with sandbox.ErrSessionLost when the session's home is gone,
	// sandbox.ErrSessionMoved when another node owns it by now.
	Adopt(ctx context.Context, id string) (sandbox.Session, error)
	// EndOrphan ends session id, whose row this node has just claimed
	// from a node that is gone (its lease ran out, or it handed the
	// session over and nobody called it since) and which was idle past
	// its TTL: as the executor's reaper ends an idle session (row ended
	// with reason, plan slot freed, home image removed). A session whose
	// home image is gone is ended as Adopt ends it ("sandbox lost").
	// ErrSessionMoved: another node owns it by now.
	EndOrphan(ctx context.Context, id, reason string) error
	// Fence stops using every session at once (kill, unmount, forget)
	// without writing their state: the node's lease is lost.
	Fence(ctx context.Context) error
	// HoldUntil arms the executor's dead man's switch: if t passes
	// without a newer HoldUntil (the process is stopped, frozen or paused
	// and cannot fence itself), its fence process kills its sandboxes and
	// unmounts its homes. The node calls it after each registration and
	// renewal with lease end - lease/8: after its own fence (at lease end
	// - lease/4), before another node may claim.
	HoldUntil(t time.Time)
	// Capacity and Free are the sandboxes the executor may run, and those
	// it could still start.
	Capacity() int
	Free() int
}

// Observer gets the cluster's measurements; every method must be quick.
type Observer interface {
	// ClusterForward counts one call forwarded to another node, by
	// outcome (see Outcome).
	ClusterForward(outcome string)
	// ClusterTakeover counts one session this node claimed, by what its
	// previous owner did ("expired": its lease ran out; "handover": it
	// drained and released it), or "swept": an orphan idle past its TTL
	// that this node claimed to end it (sweep).
	ClusterTakeover(from string)
}

// Outcome is how a forward ended, chosen where it ends.
type Outcome string

// Outcomes of a forward.
const (
	OutcomeOK          Outcome = "ok"          // the owner answered (any status)
	OutcomeUnreachable Outcome = "unreachable" // no connection to the owner
	OutcomeFailed      Outcome = "failed"      // the connection failed before a reply
	// OutcomeRefused: the node refused this node's signature (401
	// bad_node_signature): their cluster.secret differ, or their clocks
	// are more than MaxSkew apart. Its API saw nothing.
	OutcomeRefused Outcome = "refused"
)

// Deps is what New needs besides the settings. Store and Executor are
// required; the rest is optional.
type Deps struct {
	// Store is the shared store, acting for this node
	// (store.ForNode(Settings.Node)).
	Store    *store.Store
	Executor Executor
	// Log gets the node's lines; nil logs nothing.
	Log *slog.Logger
	// Observer gets forwards and takeovers; nil observes nothing.
	Observer Observer
	// Now is the node's clock; nil is time.Now.
	Now func() time.Time
	// Caller is the API's key resolution: a call for a session is taken
	// over, adopted or forwarded only for the key that owns it; any other
	// call (no such key, another key's session) is the local API's to
	// refuse (401, 404), as on one node, without moving the session or
	// naming its node. Nil: every call is taken as the owner's.
	Caller CallerFunc
	// Transport carries forwarded calls; nil is a transport of the node's
	// own that ignores proxy settings from the environment, speaks TLS 1.2
	// or later to https nodes and trusts Settings.CAFile (when set)
	// instead of the system roots. A Transport given here is used as it
	// is: CAFile is then only checked, never applied.
	Transport http.RoundTripper
}

// Node is this process as a member of a cluster: a lifecycle component
// (Start registers and keeps the lease, Stop gives it up) and the Handler
// in front of the API. Build it with New; it is safe for concurrent use.
type Node struct {
	s     Settings
	st    *store.Store
	ex    Executor
	log   *slog.Logger
	obs   Observer
	now   func() time.Time
	sig   *signer
	trans http.RoundTripper
	// caller is the API's key resolution (Deps.Caller); nil: none.
	caller CallerFunc
	lease  time.Duration
	// proxyLog takes the forwarding proxy's own lines, at debug level: a
	// reply cut short, the one it writes under a server, is logged by the
	// forward with its request id (replyBody).
	proxyLog *log.Logger

	renewMu sync.Mutex // one renewal or registration at a time

	mu         sync.Mutex
	epoch      int64     // 0: not registered
	validUntil time.Time // by our clock: sessions may be used before it
	draining   bool
	placed     map[string]placement // creates sent to other nodes since their last renewal
	refused    map[string]time.Time // nodes that refused this node's signature or whose certificate did not verify, until when no create goes there

	stop chan struct{}
	done chan struct{}
}

// New builds the node of settings s (which must be valid and enabled).
func New(s Settings, d Deps) (*Node, error) {
	if !s.Enabled() {
		return nil, errors.New("cluster: no node name")
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if d.Store == nil || d.Executor == nil {
		return nil, errors.New("cluster: Store and Executor are required")
	}
	if d.Store.Node() != s.Node {
		return nil, fmt.Errorf("cluster: the store handle acts for node %q, not %q", d.Store.Node(), s.Node)
	}
	n := &Node{s: s, st: d.Store, ex: d.Executor, log: d.Log, obs: d.Observer, now: d.Now, trans: d.Transport, caller: d.Caller,
		lease: s.Lease.D(), sig: newSigner(s.Secret, s.PreviousSecrets, s.Node), placed: map[string]placement{}, refused: map[string]time.Time{}}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	n.proxyLog = slog.NewLogLogger(n.log.With("component", "cluster-proxy").Handler(), slog.LevelDebug)
	if n.now == nil {
		n.now = time.Now
	}
	if n.trans == nil {
		tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
		if s.CAFile != "" {
			pool, err := loadCAFile(s.CAFile)
			if err != nil {
				return nil, fmt.Errorf("cluster: ca_file: %w", err)
			}
			tlsConf.RootCAs = pool
		}
		n.trans = &http.Transport{
			Proxy:                 nil, // never HTTP_PROXY from the environment
			DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			TLSClientConfig:       tlsConf,
			TLSHandshakeTimeout:   5 * time.Second,
			ExpectContinueTimeout: time.Second,
			ForceAttemptHTTP2:     false,
		}
	}
	return n, nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.s.Node }

// Epoch is the incarnation the node registered last (0 before Start or
// while it registers again after losing its lease).
func (n *Node) Epoch() int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.epoch
}

// Start registers the node (a new epoch) and, in the background until
// Stop, keeps renewing its lease and sweeps orphaned idle sessions (see
// sweep).
func (n *Node) Start(ctx context.Context) error {
	if err := n.register(ctx); err != nil {
		return err
	}
	n.stop, n.done = make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); n.loop() }()
	go func() { defer wg.Done(); n.sweepLoop() }()
	go func() { wg.Wait(); close(n.done) }()
	return nil
}

// Stop ends the renewals, the sweeps and the lease (ExpireNode): called after the
// executor's Stop handed the sessions over, so other nodes may claim at
// once whatever is left.
func (n *Node) Stop(ctx context.Context) error {
	if n.stop != nil {
		close(n.stop)
		<-n.done
	}
	n.renewMu.Lock()
	defer n.renewMu.Unlock()
	n.mu.Lock()
	epoch := n.epoch
	n.epoch, n.validUntil = 0, time.Time{}
	n.mu.Unlock()
	if epoch == 0 {
		return nil
	}
	if err := n.st.ExpireNode(ctx, n.s.Node, epoch); err != nil {
		return err
	}
	n.log.Info("cluster node left", "node", n.s.Node, "epoch", epoch)
	return nil
}

// Drain marks the node draining at once (one renewal with draining set):
// new sessions are placed elsewhere and other nodes wait for its sessions
// to be handed over. Called when shutdown begins.
func (n *Node) Drain() {
	n.mu.Lock()
	n.draining = true
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), n.lease/4)
	defer cancel()
	if err := n.renew(ctx); err != nil {
		n.log.Warn("cluster drain: renewing the lease", "err", err)
	}
}

func (n *Node) isDraining() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.draining
}

// register records a new incarnation of the node.
func (n *Node) register(ctx context.Context) error {
	n.renewMu.Lock()
	defer n.renewMu.Unlock()
	now := n.now()
	n.mu.Lock()
	draining := n.draining
	n.mu.Unlock()
	row, err := n.st.RegisterNode(ctx, store.NodeRow{Name: n.s.Node, URL: n.s.AdvertiseURL, Capacity: n.ex.Capacity(), Free: n.ex.Free(),
		Draining: draining, StartedAt: now, RenewedAt: now, LeaseUntil: now.Add(n.lease)})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.epoch, n.validUntil = row.Epoch, now.Add(n.lease-n.lease/4)
	n.mu.Unlock()
	n.ex.HoldUntil(n.holdUntil(now))
	n.log.Info("cluster node registered", "node", n.s.Node, "epoch", row.Epoch, "url", n.s.AdvertiseURL, "lease", n.lease.String())
	return nil
}

// errRenewTooLate: a renewal would start, or its answer came, once the
// node was past validUntil (lease - lease/4 by its clock). Such a renewal
// may land after the lease ran out for the other nodes, which may have
// claimed a session meanwhile: it never makes the node serve again (the
// lease loop fences and registers anew).
var errRenewTooLate = errors.New("cluster: lease renewal past lease - lease/4")

// renew extends the lease of the current epoch. Whoever calls it (the
// lease loop, Drain), it is made only while the node holds its lease by
// its own clock, and must be answered before validUntil.
func (n *Node) renew(ctx context.Context) error {
	n.renewMu.Lock()
	defer n.renewMu.Unlock()
	n.mu.Lock()
	epoch, draining, validUntil := n.epoch, n.draining, n.validUntil
	n.mu.Unlock()
	if epoch == 0 {
		return store.ErrLeaseLost
	}
	now := n.now()
	left := validUntil.Sub(now)
	if left <= 0 {
		return errRenewTooLate
	}
	ctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	if err := n.st.RenewNode(ctx, n.s.Node, epoch, now, now.Add(n.lease), n.ex.Free(), draining); err != nil {
		return err
	}
	n.mu.Lock()
	if !n.now().Before(validUntil) {
		n.mu.Unlock()
		return errRenewTooLate
	}
	renewed := n.epoch == epoch
	if renewed {
		n.validUntil = now.Add(n.lease - n.lease/4)
	}
	n.mu.Unlock()
	if renewed {
		n.ex.HoldUntil(n.holdUntil(now))
	}
	return nil
}

// holdUntil is the deadline of the executor's fence process for a lease
// sent at now (which ends at now + lease): lease/8 before its end. The
// node fences itself at lease - lease/4 (validUntil); the fence process
// fires only when the node could not (it was stopped), and is done before
// another node may claim a session.
func (n *Node) holdUntil(now time.Time) time.Time {
	return now.Add(n.lease - n.lease/8)
}

// fence gives up every session after the lease was lost (or could not be
// proved): the executor drops them without writing, and the node
// registers again as a new incarnation.
func (n *Node) fence(why error) {
	n.mu.Lock()
	epoch := n.epoch
	n.epoch, n.validUntil = 0, time.Time{}
	n.mu.Unlock()
	n.log.Error("cluster lease lost: fencing every session", "node", n.s.Node, "epoch", epoch, "err", why)
	ctx, cancel := context.WithTimeout(context.Background(), n.lease/4)
	defer cancel()
	if err := n.ex.Fence(ctx); err != nil {
		n.log.Error("cluster: fencing", "node", n.s.Node, "err", err)
	}
}

// serving reports whether the node holds its lease by its own clock, with
// lease/4 to spare: only then may it use its sessions or claim others.
func (n *Node) serving() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.epoch != 0 && n.now().Before(n.validUntil)
}

// loop renews every lease/3 (every lease/10 after a failure), fences when
// the lease is lost or cannot be renewed in time, and registers again.
func (n *Node) loop() {
	wait := n.lease / 3
	for {
		n.mu.Lock()
		epoch, validUntil := n.epoch, n.validUntil
		n.mu.Unlock()
		if epoch != 0 {
			wait = min(wait, max(validUntil.Sub(n.now()), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-n.stop:
			t.Stop()
			return
		case <-t.C:
		}
		n.sig.prune(n.now())
		// Read again: Drain may have renewed while the timer ran.
		n.mu.Lock()
		epoch, validUntil = n.epoch, n.validUntil
		n.mu.Unlock()
		if epoch == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), n.lease/3)
			err := n.register(ctx)
			cancel()
			if err != nil {
				n.log.Warn("cluster: registering again", "err", err)
				wait = n.lease / 10
				continue
			}
			wait = n.lease / 3
			continue
		}
		if !n.now().Before(validUntil) {
			n.fence(errors.New("lease not renewed in time"))
			wait = 0
			continue
		}
		ctx, cancel := context.WithDeadline(context.Background(), validUntil)
		err := n.renew(ctx)
		cancel()
		switch {
		case err == nil:
			wait = n.lease / 3
		case errors.Is(err, store.ErrLeaseLost):
			n.fence(err)
			wait = 0
		default:
			n.log.Warn("cluster: renewing the lease", "err", err)
			wait = n.lease / 10
		}
	}
}

// CallerFunc resolves the API key of a client's request to the key id
// the store records as a session's owner (false: no key the API would
// take, or it cannot say now).
type CallerFunc func(r *http.Request) (keyID string, ok bool)
