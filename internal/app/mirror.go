package app

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/sandboxapi/sandboxapi/mirror"
)

// mirrorFront is where serve's clients, installers and readiness reach the
// mirror's files: the mirror's own handler in this process, or a forward
// to a separate `sandboxapi mirror serve` (mirror.serve_url).
type mirrorFront struct {
	handler http.Handler
	base    string // base URL readiness probes (…/mirror/pypi/simple/ under it)
}

func newMirrorFront(env *Env, mir *mirror.Mirror) (mirrorFront, error) {
	raw := env.Config.Mirror.ServeURL
	if raw == "" {
		return mirrorFront{handler: mir.Handler(), base: "http://" + LoopbackAddr(env.Config.Listen)}, nil
	}
	target, err := url.Parse(raw)
	if err != nil {
		return mirrorFront{}, fmt.Errorf("mirror.serve_url: %w", err)
	}
	rp := mirror.RemoteHandler(target, env.Log.With("component", "mirror-front"))
	return mirrorFront{handler: rp, base: strings.TrimSuffix(raw, "/")}, nil
}

// LoopbackAddr is listen as a client on this host dials it: a wildcard or
// missing host becomes 127.0.0.1.
func LoopbackAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
