package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// Network gives a session that asked for network its own network namespace
// whose only reachable addresses are the egress proxy and its DNS. The
// composition root gives one over package egress to New (WithNetwork);
// without one, sessions with network are refused.
type Network interface {
	// Attach prepares the namespace for session id with the session's
	// network request.
	Attach(ctx context.Context, id string, network sandbox.NetworkRequest) (*Attachment, error)
	// Update replaces the network request of a session Attach served
	// (its sandbox runs): new connections are held to it at once, and
	// open ones it no longer allows are closed.
	Update(ctx context.Context, id string, network sandbox.NetworkRequest) error
	// Detach removes everything Attach made; unknown ids are fine.
	Detach(ctx context.Context, id string) error
	// Reconcile removes namespaces, links and rules of sessions not in live.
	Reconcile(ctx context.Context, live []string) error
}

// Attachment is what a sandbox needs to use its network.
type Attachment = sandbox.NetworkAttachment

// ErrNoNetwork is returned when a session asks for network and the server
// has no egress configured.
var ErrNoNetwork = sandbox.ErrNoNetwork

// Networks is the session service's network role: it attaches a
// session's network through the Network provider, records the attachment
// beside the bundle, and changes a session's network request
// (UpdateSessionNetwork). It reaches sessions only through netSessions.
// Get it from Executor.Networks; with a nil provider (egress off) sessions
// with network are refused. It is safe for concurrent use.
type Networks struct {
	s      netSessions
	net    Network     // nil: sessions with network are refused
	rootfs string      // the rootfs whose CA bundle a sandbox's extends
	mu     *sync.Mutex // the session service's lock (Executor.mu)
	store  *store.Store
	log    *slog.Logger
	node   *Node // the cluster role's ownership checks; set by New once it is made
}

// netSessions is what Networks needs of the session service.
type netSessions interface {
	// lookup is the table's session id, nil if none. mu held.
	lookup(id string) *session
	fault(step createStep, id string) error
}

// Networks returns the executor's network role.
func (e *Executor) Networks() *Networks { return e.nets }

// NetworkAvailable reports whether sessions with network can be made: a
// network provider is installed (egress is on).
func (ns *Networks) NetworkAvailable() bool { return ns.net != nil }

// Network returns the network provider (nil when egress is off).
func (ns *Networks) Network() Network { return ns.net }

// storedNetwork reads a session's network request from its store row;
// one that cannot be read is a session without network.
func storedNetwork(raw string) sandbox.NetworkRequest {
	n, err := sandbox.ParseNetworkRequest([]byte(raw))
	if err != nil {
		return sandbox.NetworkRequest{}
	}
	return n
}

func attachmentFile(dir string) string { return filepath.Join(dir, "network.json") }
func resolvFile(dir string) string     { return filepath.Join(dir, "resolv.conf") }
func caBundleFile(dir string) string   { return filepath.Join(dir, "ca-certificates.crt") }

// systemCABundle is the trust store of the rootfs, which the sandbox's
// bundle extends.
const systemCABundle = "etc/ssl/certs/ca-certificates.crt"

// writeCABundle writes the sandbox's trust store beside the bundle: the
// rootfs's system bundle plus the egress proxy's CA certificate (only the
// certificate: its key never leaves the proxy's folder).
func (ns *Networks) writeCABundle(dir, caPEM string) error {
	sys, err := os.ReadFile(filepath.Join(ns.rootfs, systemCABundle))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("reading the rootfs's CA bundle: %w", err)
	}
	b := append(sys, '\n')
	b = append(b, caPEM...)
	tmp := caBundleFile(dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("writing CA bundle: %w", err)
	}
	if err := os.Rename(tmp, caBundleFile(dir)); err != nil {
		return fmt.Errorf("writing CA bundle: %w", err)
	}
	return nil
}

// attach sets up the session's network and records the attachment beside
// the bundle, so a restarted server can adopt the session with it.
func (ns *Networks) attach(ctx context.Context, id, dir string, req sandbox.NetworkRequest) (*Attachment, error) {
	if ns.net == nil {
		return nil, ErrNoNetwork
	}
	att, err := ns.net.Attach(ctx, id, req)
	if err != nil {
		return nil, fmt.Errorf("attaching network: %w", err)
	}
	if err := ns.s.fault(stepNetwork, id); err != nil {
		return att, err
	}
	b, _ := json.Marshal(att)
	if err := os.WriteFile(attachmentFile(dir), b, 0o600); err != nil {
		return att, fmt.Errorf("recording network: %w", err)
	}
	if err := os.WriteFile(resolvFile(dir), []byte(att.ResolvConf), 0o644); err != nil {
		return att, fmt.Errorf("writing resolv.conf: %w", err)
	}
	if att.CACert != "" {
		if err := ns.writeCABundle(dir, att.CACert); err != nil {
			return att, err
		}
	} else if err := os.Remove(caBundleFile(dir)); err != nil && !os.IsNotExist(err) {
		return att, fmt.Errorf("removing CA bundle: %w", err)
	}
	if err := ns.s.fault(stepNetworkRecord, id); err != nil {
		return att, err
	}
	return att, nil
}

// loadAttachment reads a recorded attachment (nil when the session has none).
func loadAttachment(dir string) *Attachment {
	b, err := os.ReadFile(attachmentFile(dir))
	if err != nil {
		return nil
	}
	var att Attachment
	if json.Unmarshal(b, &att) != nil {
		return nil
	}
	return &att
}
