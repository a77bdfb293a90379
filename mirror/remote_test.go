package mirror

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// TestRemoteHandler forwards to a live mirror service keeping the Host,
// and answers 502 mirror_unavailable in the JSON envelope when it is gone.
func TestRemoteHandler(t *testing.T) {
	t.Parallel()
	var gotHost string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotHost = r.Host
		_, _ = io.WriteString(w, "simple "+r.URL.Path)
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	h := RemoteHandler(target, slog.New(slog.NewTextHandler(io.Discard, nil)))
	req := httptest.NewRequest("GET", "http://api.example:8080/mirror/pypi/simple/", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 || rec.Body.String() != "simple /mirror/pypi/simple/" || gotHost != "api.example:8080" {
		t.Errorf("forwarded: %d %q host %q", rec.Code, rec.Body.String(), gotHost)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := url.Parse("http://" + ln.Addr().String())
	ln.Close()
	rec = httptest.NewRecorder()
	RemoteHandler(dead, slog.New(slog.NewTextHandler(io.Discard, nil))).ServeHTTP(rec, httptest.NewRequest("GET", "/mirror/npm/x", nil))
	want := `{"error":{"code":"mirror_unavailable","message":"the mirror service does not answer; try again later"}}` + "\n"
	if rec.Code != http.StatusBadGateway || rec.Body.String() != want || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("mirror gone: %d %q", rec.Code, rec.Body.String())
	}
}
