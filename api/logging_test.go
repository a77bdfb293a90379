package api

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// TestLogsCarryRequestIDsNotKeys runs the sample requests and checks the
// JSON log: one request line per API call with its request id (the one
// sent back in X-Request-Id), and no API key anywhere.
func TestLogsCarryRequestIDsNotKeys(t *testing.T) {
	plans, err := LoadPlans(configs.Plans)
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.LogBuffer
	srv := New(Config{MaxBodyBytes: 1 << 20, MaxCodeBytes: 1 << 16, MaxStdinBytes: 1 << 16,
		MaxIdleTTL: time.Hour}, Deps{Sandboxes: newFakeSandboxes(), Keys: fakeKeys{}, Plans: plans,
		Log:   slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Usage: fakeUsage{}, EgressLog: fakeEgressLog{}, Packages: fakePackages{}, Installer: fakeInstaller{}, Gate: &fakeGate{}})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	ids := map[string]bool{}
	runExchanges(t, ts, func(x exchange, _ []byte, resp *http.Response, _ []byte) {
		if strings.HasPrefix(resp.Request.URL.Path, "/v1/") {
			ids[resp.Header.Get("X-Request-Id")] = true
		}
	})
	// A client's own request id is kept.
	req, _ := http.NewRequest("GET", ts.URL+"/v1/runtimes", nil)
	req.Header.Set("X-Request-Id", "client-chosen-42")
	req.Header.Set("Authorization", "Bearer key-MEGA")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Request-Id") != "client-chosen-42" {
		t.Errorf("X-Request-Id = %q", resp.Header.Get("X-Request-Id"))
	}
	ids["client-chosen-42"] = true

	text := logs.String()
	for _, secret := range []string{"key-PRO", "key-BASIC", "key-ULTRA", "key-MEGA", HashKey("key-PRO")} {
		if strings.Contains(text, secret) {
			t.Errorf("the log holds the key %q", secret)
		}
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		rid, _ := rec["request_id"].(string)
		if rid == "" {
			t.Errorf("log line without request_id: %s", line)
			continue
		}
		if rec["msg"] == "request" {
			seen[rid] = true
		}
	}
	for id := range ids {
		if !seen[id] {
			t.Errorf("no request line for request id %s", id)
		}
	}
}
