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
func (e *Executor) UpdateSessionNetwork(ctx context.Context, owner, id string, n sandbox.NetworkRequest) (Session, sandbox.NetworkRequest, error) {
	e.mu.Lock()
	s, ok := e.sessions[id]
	if ok && s.owner != owner {
		ok = false
	}
	e.mu.Unlock()
	if !ok {
		return Session{}, sandbox.NetworkRequest{}, ErrNotFound
	}
	if n.Enabled && e.net == nil {
		return Session{}, sandbox.NetworkRequest{}, ErrNoNetwork
	}
	s.life.Lock()
	defer s.life.Unlock()
	e.mu.Lock()
	st, gone, attached, before := s.state, s.gone, s.netAttached, s.network
	e.mu.Unlock()
	if gone {
		return Session{}, before, e.node.goneErr(ctx, s)
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
	if err := e.store.SetSessionNetwork(ctx, id, string(n.JSON())); err != nil {
		return Session{}, before, e.node.notOwner(ctx, s, err)
	}
	if live {
		if err := e.net.Update(ctx, id, n); err != nil {
			if rerr := e.store.SetSessionNetwork(ctx, id, string(before.JSON())); rerr != nil {
				err = errors.Join(err, fmt.Errorf("restoring the stored network: %w", rerr))
			}
			return Session{}, before, fmt.Errorf("updating network of session %s: %w", id, err)
		}
	}
	e.mu.Lock()
	s.network = n
	snap := s.snapshot()
	e.mu.Unlock()
	e.log.InfoContext(ctx, "session network changed", "session", id, "state", st, "enabled", n.Enabled,
		"allowed_domains", len(n.AllowedDomains), "enabled_before", before.Enabled, "allowed_domains_before", len(before.AllowedDomains))
	return snap, before, nil
}

// networkHeld reports whether s may hold a network on this host: it asks
// for one, or its sandbox was started with one that a change disabled
// since (the attachment stays until the sandbox goes).
func (e *Executor) networkHeld(s *session) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return s.network.Enabled || s.netAttached
}
