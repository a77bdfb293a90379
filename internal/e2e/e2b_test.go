package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// e2bSDK is the folder holding E2B's npm package e2b (node_modules), as
// scripts/test.sh installs it, pinned; without it the test skips, or
// fails when SANDBOXAPI_REQUIRE_CLIENTS=1.
func e2bSDK(t testing.TB) string {
	dir := os.Getenv("SANDBOXAPI_E2B_SDK")
	if dir == "" {
		dir = "/var/cache/sandboxapi/testtools/e2b-2.51.0/node_modules"
	}
	if _, err := os.Stat(filepath.Join(dir, "e2b", "package.json")); err != nil {
		if os.Getenv("SANDBOXAPI_REQUIRE_CLIENTS") == "1" {
			t.Fatalf("E2B's SDK is not installed at %s (npm install e2b@2.51.0; scripts/test.sh does)", dir)
		}
		t.Skipf("E2B's SDK is not installed at %s: set SANDBOXAPI_E2B_SDK", dir)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is needed for E2B's SDK: %v", err)
	}
	return dir
}

// TestE2BSDK runs E2B's JavaScript SDK, unchanged, against the real server
// (testdata/e2b_sdk.cjs: create, files, commands and PTY
// (e2b_sdk_commands.cjs), set timeout, list, pause then connect, a wrong key, another key's sandbox, kill, the plan's quota as
// the SDK's RateLimitError), then checks what the
// adapter must keep across a restart and that its calls were metered.
func TestE2BSDK(t *testing.T) {
	sdk := e2bSDK(t)
	s := startServer(t, "")
	key, other := s.key("PRO"), s.key("PRO")
	run := "run-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + time.Now().Format("150405.000")

	t.Run("sdk", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", filepath.Join(testenv.ModuleRoot(), "internal", "e2e", "testdata", "e2b_sdk.cjs"))
		cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "E2B_API_URL="+s.url("/e2b"), "E2B_SANDBOX_URL="+s.url("/e2b/sandbox"),
			"E2B_API_KEY="+key, "OTHER_KEY="+other, "RUN="+run, "E2B_DOMAIN=invalid.example")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("E2B SDK OK")) {
			t.Fatalf("the SDK's script failed: %v\n%s\nserver log:\n%s", err, out, tail(s.logs.String(), 60))
		}
		t.Logf("%s", out)
	})

	t.Run("records survive a restart", func(t *testing.T) {
		var created struct {
			SandboxID       string `json:"sandboxID"`
			EnvdAccessToken string `json:"envdAccessToken"`
		}
		r := e2bDo(t, s, "POST", "/e2b/v2/sandboxes", key, map[string]any{"templateID": "code-interpreter-v1", "timeout": 300,
			"metadata": map[string]string{"who": "restart"}, "envVars": map[string]string{"SECRET": "x"}}, nil)
		if r.status != http.StatusCreated {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		if err := json.Unmarshal(r.body, &created); err != nil || created.SandboxID == "" || created.EnvdAccessToken == "" {
			t.Fatalf("create reply %s: %v", r.body, err)
		}
		sb := map[string]string{"E2b-Sandbox-Id": created.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": created.EnvdAccessToken,
			"Content-Type": "application/octet-stream"}
		if r := e2bDo(t, s, "POST", "/e2b/sandbox/files?path=/home/user/kept.txt", "", []byte("kept"), sb); r.status != http.StatusOK {
			t.Fatalf("upload: %d %s", r.status, r.body)
		}
		s.stop()
		s.start()
		r = e2bDo(t, s, "GET", "/e2b/sandboxes/"+created.SandboxID, key, nil, nil)
		var info struct {
			Metadata        map[string]string `json:"metadata"`
			EnvdAccessToken string            `json:"envdAccessToken"`
			TemplateID      string            `json:"templateID"`
		}
		if err := json.Unmarshal(r.body, &info); r.status != http.StatusOK || err != nil {
			t.Fatalf("info after restart: %d %s", r.status, r.body)
		}
		if info.Metadata["who"] != "restart" || info.EnvdAccessToken != created.EnvdAccessToken || info.TemplateID != "code-interpreter-v1" {
			t.Fatalf("info after restart: %s", r.body)
		}
		if r := e2bDo(t, s, "GET", "/e2b/sandbox/files?path=/home/user/kept.txt", "", nil, sb); r.status != http.StatusOK || string(r.body) != "kept" {
			t.Fatalf("download after restart: %d %q", r.status, r.body)
		}
		// The token is the sandbox's only: a wrong one, another sandbox's
		// id with it, or none is refused.
		for name, h := range map[string]map[string]string{
			"wrong token": {"E2b-Sandbox-Id": created.SandboxID, "X-Access-Token": created.EnvdAccessToken + "x"},
			"no token":    {"E2b-Sandbox-Id": created.SandboxID},
			"other id":    {"E2b-Sandbox-Id": "s_not_there", "X-Access-Token": created.EnvdAccessToken},
			"no id":       {"X-Access-Token": created.EnvdAccessToken},
		} {
			r := e2bDo(t, s, "GET", "/e2b/sandbox/files?path=/home/user/kept.txt", "", nil, h)
			if r.status == http.StatusOK || !strings.Contains(string(r.body), `"code"`) || bytes.Contains(r.body, []byte("kept")) {
				t.Errorf("%s: %d %s", name, r.status, r.body)
			}
		}
		if r := e2bDo(t, s, "DELETE", "/e2b/sandboxes/"+created.SandboxID, key, nil, nil); r.status != http.StatusNoContent {
			t.Fatalf("kill: %d %s", r.status, r.body)
		}
	})

	t.Run("errors are E2B's", func(t *testing.T) {
		for _, c := range []struct {
			method, path, key string
			body              any
			status            int
		}{
			{"GET", "/e2b/v2/sandboxes", "", nil, http.StatusUnauthorized},
			{"GET", "/e2b/v2/sandboxes", "sk_nope", nil, http.StatusUnauthorized},
			{"GET", "/e2b/sandboxes/s_missing", key, nil, http.StatusNotFound},
			{"POST", "/e2b/v2/sandboxes", key, map[string]any{"templateID": "my-custom"}, http.StatusBadRequest},
			{"POST", "/e2b/v2/sandboxes", key, map[string]any{"templateID": "base", "allow_internet_access": true}, http.StatusBadRequest},
			{"POST", "/e2b/v2/sandboxes", key, []byte("{not json"), http.StatusBadRequest},
			{"POST", "/e2b/sandboxes/s_missing/fork", key, map[string]any{}, http.StatusNotFound},
			{"GET", "/e2b/sandboxes/metrics", key, nil, http.StatusNotImplemented},
			{"GET", "/e2b/nowhere", key, nil, http.StatusNotFound},
		} {
			r := e2bDo(t, s, c.method, c.path, c.key, c.body, nil)
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(r.body, &e); r.status != c.status || err != nil || e.Code != c.status || e.Message == "" {
				t.Errorf("%s %s: %d %s, want %d in E2B's shape", c.method, c.path, r.status, r.body, c.status)
			}
		}
	})

	t.Run("calls are metered as /v1 requests", func(t *testing.T) {
		deadline := time.Now().Add(15 * time.Second)
		for {
			r := s.do("GET", "/v1/usage", key, nil)
			body := string(r.body)
			// File operations are the files API's own: none of them cost
			// an execute (no E2B call runs one while commands are not served).
			if r.status == http.StatusOK && strings.Contains(body, "POST /v1/sessions") && strings.Contains(body, "PUT /v1/sessions/{id}/files") &&
				strings.Contains(body, "GET /v1/sessions/{id}/files/stat") && strings.Contains(body, "POST /v1/sessions/{id}/files/mkdir") &&
				strings.Contains(body, "POST /v1/sessions/{id}/files/move") && strings.Contains(body, "DELETE /v1/sessions/{id}/files") &&
				strings.Contains(body, "GET /v1/sessions/{id}/files/watch") &&
				strings.Contains(body, "POST /v1/sessions/{id}/processes") && strings.Contains(body, "GET /v1/sessions/{id}/processes/{pid}/output") {
				if strings.Contains(body, "/execute") {
					t.Fatalf("E2B file calls or commands ran executes: %s", body)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("usage does not show the E2B calls: %d %s", r.status, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// TestE2BSDKCluster runs the SDK's script on a cluster of two nodes, with
// the control plane on one node and sandbox traffic on the other: the
// adapter's /v1 calls go through the cluster's handler to the session's
// owner, and its records are the shared store's.
func TestE2BSDKCluster(t *testing.T) {
	sdk := e2bSDK(t)
	c := startCluster(t, clusterOptions{nodes: 2})
	key, other := c.key(t, "PRO"), c.key(t, "PRO")
	for _, dir := range []struct{ api, sandbox int }{{0, 1}, {1, 0}} {
		t.Run(fmt.Sprintf("api on %s, sandbox traffic on %s", c.names[dir.api], c.names[dir.sandbox]), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", filepath.Join(testenv.ModuleRoot(), "internal", "e2e", "testdata", "e2b_sdk.cjs"))
			cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "E2B_API_URL="+c.url(dir.api, "/e2b"), "E2B_SANDBOX_URL="+c.url(dir.sandbox, "/e2b/sandbox"),
				"E2B_API_KEY="+key, "OTHER_KEY="+other, fmt.Sprintf("RUN=cluster-%d-%d", dir.api, time.Now().UnixNano()), "E2B_DOMAIN=invalid.example")
			out, err := cmd.CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("E2B SDK OK")) {
				c.dumpLogs(t)
				t.Fatalf("the SDK's script failed: %v\n%s", err, out)
			}
		})
	}
	// @e2b/code-interpreter too: its cells (port 49999) go through the
	// node that did not create the sandbox, to the kernel on its owner.
	t.Run(fmt.Sprintf("code interpreter, api on %s, sandbox traffic on %s", c.names[0], c.names[1]), func(t *testing.T) {
		ci := e2bCodeInterpreter(t)
		ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", filepath.Join(testenv.ModuleRoot(), "internal", "e2e", "testdata", "e2b_code_interpreter.cjs"))
		cmd.Env = append(os.Environ(), "E2B_CI_SDK="+ci, "E2B_API_URL="+c.url(0, "/e2b"), "E2B_SANDBOX_URL="+c.url(1, "/e2b/sandbox"),
			"E2B_API_KEY="+key, fmt.Sprintf("RUN=cluster-ci-%d", time.Now().UnixNano()), "E2B_DOMAIN=invalid.example")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("E2B CODE INTERPRETER OK")) {
			c.dumpLogs(t)
			t.Fatalf("the code interpreter's script failed: %v\n%s", err, out)
		}
	})
}

// e2bDo sends one request to the E2B adapter with the key in X-API-Key.
func e2bDo(t *testing.T, s *server, method, path, key string, body any, hdr map[string]string) reply {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, _ := json.Marshal(b)
		rd = bytes.NewReader(enc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, s.url(path), rd)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := s.client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// e2bCodeInterpreter is the folder holding @e2b/code-interpreter (and the
// e2b it runs on), as scripts/test.sh installs it, pinned.
func e2bCodeInterpreter(t testing.TB) string {
	dir := os.Getenv("SANDBOXAPI_E2B_CI_SDK")
	if dir == "" {
		dir = "/var/cache/sandboxapi/testtools/e2b-ci-2.8.0/node_modules"
	}
	if _, err := os.Stat(filepath.Join(dir, "@e2b", "code-interpreter", "package.json")); err != nil {
		if os.Getenv("SANDBOXAPI_REQUIRE_CLIENTS") == "1" {
			t.Fatalf("@e2b/code-interpreter is not installed at %s (npm install @e2b/code-interpreter@2.8.0 e2b@2.51.0; scripts/test.sh does)", dir)
		}
		t.Skipf("@e2b/code-interpreter is not installed at %s: set SANDBOXAPI_E2B_CI_SDK", dir)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is needed for E2B's SDK: %v", err)
	}
	return dir
}

// TestE2BCodeInterpreter runs @e2b/code-interpreter, unchanged, against
// the real server (testdata/e2b_code_interpreter.cjs): its default
// template, variables across cells, stdout callbacks, a plot as PNG, an
// exception by name, contexts, the kernel kept across pause and connect,
// a dead kernel reported, restart, kill.
func TestE2BCodeInterpreter(t *testing.T) {
	sdk := e2bCodeInterpreter(t)
	s := startServer(t, "")
	key := s.key("PRO")
	run := "run-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + time.Now().Format("150405.000")
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(testenv.ModuleRoot(), "internal", "e2e", "testdata", "e2b_code_interpreter.cjs"))
	cmd.Env = append(os.Environ(), "E2B_CI_SDK="+sdk, "E2B_API_URL="+s.url("/e2b"), "E2B_SANDBOX_URL="+s.url("/e2b/sandbox"),
		"E2B_API_KEY="+key, "RUN="+run, "E2B_DOMAIN=invalid.example")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("E2B CODE INTERPRETER OK")) {
		t.Fatalf("the SDK's script failed: %v\n%s\nserver log:\n%s", err, out, tail(s.logs.String(), 60))
	}
	t.Logf("%s", out)
	// Nothing of the sandbox is left: the kill ended its session.
	if r := s.do("GET", "/v1/sessions", key, nil); r.status != http.StatusOK || bytes.Contains(r.body, []byte(`"state":"running"`)) {
		t.Fatalf("sessions after the kill: %d %s", r.status, r.body)
	}
}

// TestE2BSDKNetwork runs E2B's SDK (testdata/e2b_sdk_network.cjs) on a
// server with egress on and the test's fake internet: create with
// allowOut (the allowed host is reached, another refused), updateNetwork
// widening then narrowing, internet access refused as the SDK's error,
// fork (files, env vars, network kept) and getMetrics.
func TestE2BSDKNetwork(t *testing.T) {
	sdk := e2bSDK(t)
	f := startFakeInternet(t)
	ee := newEgressEnv(t)
	s := startServer(t, ee.yaml(f))
	sweepAfter(t, s)
	key := s.key("ULTRA")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(testenv.ModuleRoot(), "internal", "e2e", "testdata", "e2b_sdk_network.cjs"))
	cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "E2B_API_URL="+s.url("/e2b"), "E2B_SANDBOX_URL="+s.url("/e2b/sandbox"),
		"E2B_API_KEY="+key, "PRO_KEY="+s.key("PRO"), "FAKE_CA="+string(f.caPEM), "E2B_DOMAIN=invalid.example")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("E2B NETWORK OK")) {
		t.Fatalf("the SDK's script failed: %v\n%s\nserver log:\n%s", err, out, tail(s.logs.String(), 80))
	}
	t.Logf("%s", out)
	if left := ee.leftovers(t); len(left) > 0 {
		// The server is still up: its sessions are killed, so their
		// networks must be gone once it answered.
		deadline := time.Now().Add(20 * time.Second)
		for len(left) > 0 && time.Now().Before(deadline) {
			time.Sleep(500 * time.Millisecond)
			left = ee.leftovers(t)
		}
		if len(left) > 0 {
			t.Fatalf("killed sandboxes left networks: %q", left)
		}
	}
}
