package cli

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/urfave/cli/v2"
)

// readyServer is a server on a random loopback port that answers /readyz
// as serve does and counts the probes it got.
func readyServer(t *testing.T) (addr string, hits *atomic.Int64) {
	t.Helper()
	hits = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || r.URL.Query().Get("refresh") != "1" {
			http.NotFound(w, r)
			return
		}
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ready","checks":[{"name":"osv","status":"pass","detail":"fine"}]}`))
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), hits
}

// TestClientCommandsFindTheServer: `readiness check` reaches a server on a
// random loopback port through every way serve is told its address
// (SANDBOXAPI_LISTEN, --listen, the config file's listen, a wildcard
// listen) and through --url / SANDBOXAPI_URL; never the default port.
func TestClientCommandsFindTheServer(t *testing.T) {
	addr, hits := readyServer(t)
	_, port, _ := net.SplitHostPort(addr)
	cfgFile := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(cfgFile, []byte("version: v1\nlisten: "+addr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  map[string]string
		args []string
	}{
		{name: "SANDBOXAPI_LISTEN", env: map[string]string{"SANDBOXAPI_LISTEN": addr}},
		{name: "--listen", args: []string{"--listen", addr}},
		{name: "--listen after the flags it shares", args: []string{"--json", "--listen=" + addr}},
		{name: "wildcard listen", env: map[string]string{"SANDBOXAPI_LISTEN": "0.0.0.0:" + port}},
		{name: "empty host", args: []string{"--listen", ":" + port}},
		{name: "config file", args: []string{"--config", cfgFile}},
		{name: "SANDBOXAPI_CONFIG", env: map[string]string{"SANDBOXAPI_CONFIG": cfgFile}},
		{name: "--listen beats the config", args: []string{"--config", cfgFile, "--listen", addr}},
		{name: "--url", args: []string{"--url", "http://" + addr + "/"}},
		{name: "SANDBOXAPI_URL", env: map[string]string{"SANDBOXAPI_URL": "http://" + addr}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			before := hits.Load()
			code, out, errOut := runCLI(t, append([]string{"readiness", "check", "--data-dir", t.TempDir()}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s%s", code, out, errOut)
			}
			if hits.Load() != before+1 {
				t.Fatalf("the server on %s got no probe:\n%s%s", addr, out, errOut)
			}
		})
	}
	t.Run("a bad --url is refused", func(t *testing.T) {
		code, _, errOut := runCLI(t, "readiness", "check", "--url", "ftp://"+addr)
		if code == 0 || !strings.Contains(errOut, "--url") {
			t.Fatalf("exit %d: %s", code, errOut)
		}
	})
}

// TestMCPUsesServerURL: `sandboxapi mcp` forwards to the address it is
// given the same ways (it serves stdio, so the flags are checked through
// the same resolution its action uses).
func TestMCPUsesServerURL(t *testing.T) {
	cmd := mcpCommand()
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{name: "default", want: "http://127.0.0.1:8080"},
		{name: "SANDBOXAPI_LISTEN", env: map[string]string{"SANDBOXAPI_LISTEN": "127.0.0.1:18099"}, want: "http://127.0.0.1:18099"},
		{name: "--listen", args: []string{"--listen", "[::1]:18098"}, want: "http://[::1]:18098"},
		{name: "SANDBOXAPI_URL", env: map[string]string{"SANDBOXAPI_URL": "https://api.example.com/"}, want: "https://api.example.com"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var got string
			app := &cli.App{Commands: []*cli.Command{{Name: "mcp", Flags: cmd.Flags, Action: func(c *cli.Context) error {
				var err error
				got, err = serverURL(c)
				return err
			}}}, ExitErrHandler: func(*cli.Context, error) {}}
			if err := app.RunContext(context.Background(), append([]string{"sandboxapi", "mcp", "--data-dir", t.TempDir()}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("server URL %q, want %q", got, tc.want)
			}
		})
	}
}
