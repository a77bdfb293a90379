package executor

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// UpdateSessionNetwork replaces owner's session's network request with n
// (checked by the caller against the plan) and returns the session and
// the request it had before. The store's row holds n before anything else
// changes, so a restart, a resume and a takeover by another node use it.
//
// A running session whose sandbox has its network attached gets the new
// policy at once (Network.Update: the next connection, and open tunnels to
// hosts n does not allow are closed); disabling keeps the attachment and
// refuses every connection. A running session started without network
// cannot get it (ErrNetworkNotAttached). A hibernated session is not
// resumed: its next resume attaches the network n asks for. It waits for a
// resume, hibernation or end in progress, not for a running execute.
func (ns *Networks) UpdateSessionNetwork(ctx context.Context, owner, id string, n sandbox.NetworkRequest) (Session, sandbox.NetworkRequest, error) {
	ns.mu.Lock()
	s := ns.s.lookup(id)
	ok := s != nil && s.owner == owner
	ns.mu.Unlock()
	if !ok {
		return Session{}, sandbox.NetworkRequest{}, ErrNotFound
	}
	if n.Enabled && ns.net == nil {
		return Session{}, sandbox.NetworkRequest{}, ErrNoNetwork
	}
	s.life.Lock()
	defer s.life.Unlock()
	ns.mu.Lock()
	st, gone, attached, before := s.state, s.gone, s.netAttached, s.network
	ns.mu.Unlock()
	if gone {
		return Session{}, before, ns.node.goneErr(ctx, s)
	}
	live := false
	switch st {
	case StateRunning:
		if n.Enabled && !attached {
			return Session{}, before, fmt.Errorf("session %s: %w", id, sandbox.ErrNetworkNotAttached)
		}
		live = attached
	case StateHibernated:
	default:
		return Session{}, before, fmt.Errorf("%w: %s", ErrBadState, st)
	}
	// Not cut short by the caller from here on: the row and the proxy
	// must end up agreeing.
	ctx = context.WithoutCancel(ctx)
	if err := ns.store.SetSessionNetwork(ctx, id, string(n.JSON())); err != nil {
		return Session{}, before, ns.node.notOwner(ctx, s, err)
	}
	if live {
		if err := ns.net.Update(ctx, id, n); err != nil {
			if rerr := ns.store.SetSessionNetwork(ctx, id, string(before.JSON())); rerr != nil {
				err = errors.Join(err, fmt.Errorf("restoring the stored network: %w", rerr))
			}
			return Session{}, before, fmt.Errorf("updating network of session %s: %w", id, err)
		}
	}
	ns.mu.Lock()
	s.network = n
	snap := s.snapshot()
	ns.mu.Unlock()
	ns.log.InfoContext(ctx, "session network changed", "session", id, "state", st, "enabled", n.Enabled,
		"allowed_domains", len(n.AllowedDomains), "enabled_before", before.Enabled, "allowed_domains_before", len(before.AllowedDomains))
	return snap, before, nil
}

// networkHeld reports whether s may hold a network on this host: it asks
// for one, or its sandbox was started with one that a change disabled
// since (the attachment stays until the sandbox goes).
func (ns *Networks) networkHeld(s *session) bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return s.network.Enabled || s.netAttached
}
