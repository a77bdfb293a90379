package mirror

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/httperr"
	"github.com/sandboxapi/sandboxapi/internal/redact"
)

// RemoteHandler forwards mirror requests to a mirror served apart
// (`sandboxapi mirror serve`, reached at target). The Host the client used
// is kept: the mirror builds the links it serves (npm tarballs) from it,
// so they lead back through here. When the mirror does not answer, the
// client gets 502 mirror_unavailable. Safe for concurrent use.
func RemoteHandler(target *url.URL, log *slog.Logger) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = r.In.Host },
		Transport: &http.Transport{
			Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			ResponseHeaderTimeout: 30 * time.Second, MaxIdleConnsPerHost: 16,
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("mirror service unreachable", "path", r.URL.Path, "err", redact.Err(err))
			httperr.Write(w, http.StatusBadGateway, httperr.Payload{Code: "mirror_unavailable",
				Message: "the mirror service does not answer; try again later"})
		},
	}
}

// StandaloneHandler is what `sandboxapi mirror serve` answers: the mirror
// under /mirror/ and GET /healthz.
func (m *Mirror) StandaloneHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/mirror/", m.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}
