package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Sessions is session networking as one service: each session with
// network gets its netns, veth and nftables chain (Network) and its proxy
// listeners with its policy (Proxy). The session's network request is
// recorded under a state folder so that a restarted server serves the
// sessions it adopts again (Reconcile). It implements the executor's
// Network. Safe for concurrent use; use NewSessions.
type Sessions struct {
	cfg   Config
	net   *Network
	proxy *Proxy
	dir   string
	log   *slog.Logger
	open  Opener // nil: sessions with credentials are refused
	ca    *CA    // nil: no CA, the sandbox trusts the system's roots only
}

// NewSessions makes the sandbox network and the proxy (with opts) for
// cfg and creates dir, the folder of the sessions' state files. It changes
// nothing else on the host until Attach or Reconcile; Stop stops the
// proxy.
func NewSessions(cfg Config, opts Options, dir string) (*Sessions, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	proxy, err := NewProxy(cfg, opts)
	if err != nil {
		return nil, err
	}
	nw, err := NewNetwork(cfg, logger)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating egress state folder: %w", err)
	}
	return &Sessions{cfg: cfg, net: nw, proxy: proxy, dir: dir, log: logger, open: opts.Credentials, ca: opts.CA}, nil
}

// Stop closes every session's proxy listeners and tunnels (see
// Proxy.Stop). The sessions' networks and state files stay, so that a
// restarted server adopts the sessions still alive.
func (s *Sessions) Stop(ctx context.Context) error { return s.proxy.Stop(ctx) }

// Network is the netns, veth and nftables layer of the sessions (for the
// firewall checks).
func (s *Sessions) Network() *Network { return s.net }

// Config is the configuration the sessions were made with.
func (s *Sessions) Config() Config { return s.cfg }

// Health reports a live session whose proxy listeners stopped serving.
func (s *Sessions) Health() error { return s.proxy.Health() }

// ErrBadSessionID is returned by Attach for an id that cannot name a state
// file.
var ErrBadSessionID = errors.New("bad session id")

func (s *Sessions) stateFile(id string) string { return filepath.Join(s.dir, id+".json") }

// policyFor builds the proxy policy of a session's network request.
func policyFor(req sandbox.NetworkRequest) (policy.Policy, error) {
	pol, err := policy.New(policy.Rules{Enabled: req.Enabled, Allowed: req.AllowedDomains, Denied: req.Denied})
	if err != nil {
		return policy.Policy{}, fmt.Errorf("building egress policy: %w", err)
	}
	return pol, nil
}

// Attach creates the session's netns and veth, opens its proxy listeners
// with the session's policy, records the request and returns what the
// sandbox needs. On error nothing is left behind.
func (s *Sessions) Attach(ctx context.Context, id string, req sandbox.NetworkRequest) (_ *sandbox.NetworkAttachment, err error) {
	if strings.ContainsAny(id, `/\`) || id == "" || id[0] == '.' {
		return nil, fmt.Errorf("attaching network: %w %q", ErrBadSessionID, id)
	}
	pol, err := policyFor(req)
	if err != nil {
		return nil, err
	}
	creds, err := OpenCredentials(s.open, req)
	if err != nil {
		return nil, err
	}
	att, err := s.net.Setup(ctx, id)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.net.Teardown(context.WithoutCancel(ctx), id)
		}
	}()
	if _, err := s.proxy.AddSession(ctx, Session{ID: id, HostAddr: att.HostAddr, SandboxAddr: att.SandboxAddr, Policy: pol, Credentials: creds}); err != nil {
		return nil, err
	}
	if err := os.WriteFile(s.stateFile(id), req.JSON(), 0o600); err != nil {
		_ = s.proxy.RemoveSession(context.WithoutCancel(ctx), id)
		return nil, fmt.Errorf("recording egress session: %w", err)
	}
	out := &sandbox.NetworkAttachment{NetnsPath: att.NetnsPath, Env: SandboxProxyEnv(att, s.cfg.ConnectPort), ResolvConf: att.ResolvConf()}
	if s.ca != nil {
		out.CACert = string(s.ca.CertPEM())
		out.Env = append(out.Env, SandboxCAEnv()...)
	}
	return out, nil
}

// SandboxCABundle is where the executor mounts the sandbox's trust store
// (the rootfs's system bundle plus the proxy's CA) over the system one.
const SandboxCABundle = "/etc/ssl/certs/ca-certificates.crt"

// SandboxCAEnv points the usual TLS clients at SandboxCABundle: OpenSSL
// and Go (SSL_CERT_FILE), curl, Python requests and Node, which ships its
// own roots and adds these.
func SandboxCAEnv() []string {
	return []string{
		"SSL_CERT_FILE=" + SandboxCABundle,
		"CURL_CA_BUNDLE=" + SandboxCABundle,
		"REQUESTS_CA_BUNDLE=" + SandboxCABundle,
		"NODE_EXTRA_CA_CERTS=" + SandboxCABundle,
	}
}

// SetCredentials opens the credentials of req and gives them to the live
// session id's proxy: connections opened from then on use them. It is the
// one place a running session's credentials change (a new network
// request for it); the caller records req (its state file: see Attach).
func (s *Sessions) SetCredentials(id string, req sandbox.NetworkRequest) error {
	creds, err := OpenCredentials(s.open, req)
	if err != nil {
		return err
	}
	return s.proxy.SetCredentials(id, creds)
}

// Update replaces the network request of a session Attach served, while
// its sandbox runs: the state file records the new request first (so a
// restarted server serves it), then the proxy holds every new connection
// to it and closes the open tunnels it no longer allows (Proxy.SetPolicy).
// A request with network disabled keeps the session's namespace and
// listeners, refusing everything; a later Update may enable it again. A
// request that builds no policy, or a session not served here
// (ErrUnknownSession), changes nothing.
func (s *Sessions) Update(ctx context.Context, id string, req sandbox.NetworkRequest) error {
	if strings.ContainsAny(id, `/\`) || id == "" || id[0] == '.' {
		return fmt.Errorf("updating network: %w %q", ErrBadSessionID, id)
	}
	pol, err := policyFor(req)
	if err != nil {
		return err
	}
	creds, err := OpenCredentials(s.open, req)
	if err != nil {
		return err
	}
	file := s.stateFile(id)
	old, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("updating network of session %s: %w", id, ErrUnknownSession)
	} else if err != nil {
		return fmt.Errorf("updating network of session %s: reading its record: %w", id, err)
	}
	if err := writeFileAtomic(file, req.JSON(), 0o600); err != nil {
		return fmt.Errorf("updating network of session %s: writing its record: %w", id, err)
	}
	// Credentials first: a connection the new policy allows must not be
	// terminated with the old ones (SetPolicy closes those it refuses).
	err = s.proxy.SetCredentials(id, creds)
	closed := 0
	if err == nil {
		closed, err = s.proxy.SetPolicy(id, pol)
	}
	if err != nil {
		if rerr := writeFileAtomic(file, old, 0o600); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return err
	}
	s.log.InfoContext(ctx, "egress policy changed", "session", id, "enabled", req.Enabled,
		"allowed_domains", len(req.AllowedDomains), "denied", len(req.Denied),
		"credentials", len(req.Credentials), "tunnels_closed", closed)
	return nil
}

// SandboxProxyEnv is Attachment.ProxyEnv plus what pip, npm and plain-HTTP
// clients read. Plain HTTP goes to the proxy too, which refuses it with a
// clear 403 instead of a silent timeout.
func SandboxProxyEnv(att *Attachment, port uint16) []string {
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

// Detach closes the session's proxy listeners and removes its network and
// state file. Unknown ids are fine.
func (s *Sessions) Detach(ctx context.Context, id string) error {
	var errs []error
	if err := s.proxy.RemoveSession(ctx, id); err != nil && !errors.Is(err, ErrUnknownSession) {
		errs = append(errs, err)
	}
	if err := s.net.Teardown(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(s.stateFile(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing egress session record: %w", err))
	}
	return errors.Join(errs...)
}

// Reconcile removes the networks and state files of sessions not in live
// and serves the live ones again (after a restart the proxy starts
// empty). A live session whose network cannot be served again stays
// without egress (fail closed) and is logged; that does not fail the call.
func (s *Sessions) Reconcile(ctx context.Context, live []string) error {
	if err := s.net.Reconcile(ctx, live); err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, id := range live {
		keep[id] = true
	}
	var errs []error
	for _, id := range live {
		raw, rerr := os.ReadFile(s.stateFile(id))
		if rerr != nil {
			continue // a session without network
		}
		att, ok := s.net.Attachment(id)
		if !ok {
			errs = append(errs, fmt.Errorf("adopting network of session %s: network missing", id))
			continue
		}
		req, perr := sandbox.ParseNetworkRequest(raw)
		if perr != nil {
			errs = append(errs, fmt.Errorf("adopting network of session %s: decoding network request: %w", id, perr))
			continue
		}
		pol, perr := policyFor(req)
		if perr != nil {
			errs = append(errs, fmt.Errorf("adopting network of session %s: %w", id, perr))
			continue
		}
		creds, perr := OpenCredentials(s.open, req)
		if perr != nil {
			errs = append(errs, fmt.Errorf("adopting network of session %s: %w", id, perr))
			continue
		}
		_, aerr := s.proxy.AddSession(ctx, Session{ID: id, HostAddr: att.HostAddr, SandboxAddr: att.SandboxAddr, Policy: pol, Credentials: creds})
		if aerr != nil && !errors.Is(aerr, ErrSessionExists) {
			errs = append(errs, fmt.Errorf("adopting network of session %s: %w", id, aerr))
			continue
		}
		s.log.Info("egress session adopted", "session", id)
	}
	if ents, derr := os.ReadDir(s.dir); derr == nil {
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".json.tmp") { // an Update cut short
				_ = os.Remove(filepath.Join(s.dir, e.Name()))
				continue
			}
			id, ok := strings.CutSuffix(e.Name(), ".json")
			if ok && !keep[id] {
				_ = os.Remove(filepath.Join(s.dir, e.Name()))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.log.Error("adopting egress sessions", "err", err)
	}
	return nil
}

// NewServiceNetwork makes a Network whose sandboxes reach one port (TCP
// and UDP) on their host address and nothing else, in its own pool, table
// and name prefix: the installers' network, which serves the mirror. It
// removes the leftovers of sandboxes cut short (Reconcile with none live).
func NewServiceNetwork(ctx context.Context, pool, table, prefix string, port uint16, logger *slog.Logger) (*Network, error) {
	ec := DefaultConfig()
	ec.ConnectPort, ec.TransparentPort, ec.DNSPort = port, port, port
	ec.Resolvers = []string{"127.0.0.1"} // unused: these sandboxes resolve nothing
	ec.Network.Pool, ec.Network.Table, ec.Network.Prefix = pool, table, prefix
	nw, err := NewNetwork(ec, logger)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := nw.Reconcile(rctx, nil); err != nil {
		return nil, err
	}
	return nw, nil
}
