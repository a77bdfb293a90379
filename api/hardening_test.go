package api

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// TestNetworkUnavailableBeforeAnythingIsTaken is issue 13 item 1 at the
// API: on a server without egress, a session with network is 503
// network_unavailable every time, decided before the plan's session slot
// (or the sandboxes) are asked for anything, even when the plan's slots
// are all taken; sessions without network still work.
func TestNetworkUnavailableBeforeAnythingIsTaken(t *testing.T) {
	t.Parallel()
	srv, sb := newFakeServer(t)
	sb.noNetwork = true
	h := map[string]string{"X-RapidAPI-Key": "key-PRO"}
	for i := range 16 {
		rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3","network":{"enabled":true}}`, h)
		var body errorBody
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != 503 || body.Error.Code != "network_unavailable" {
			t.Fatalf("request %d: %d %s, want 503 network_unavailable", i+1, rec.Code, rec.Body)
		}
	}
	sb.mu.Lock()
	creates := sb.creates
	sb.mu.Unlock()
	if creates != 0 {
		t.Fatalf("%d creates reached the sandboxes; the answer must come first", creates)
	}
	// PRO allows 2 concurrent sessions: both can still be made.
	for i := range 2 {
		if rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, h); rec.Code != 201 {
			t.Fatalf("session %d without network: %d %s", i+1, rec.Code, rec.Body)
		}
	}
	// With the plan full, the missing network is still the answer (no
	// 429 that deleting a session would not cure).
	rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3","network":{"enabled":true}}`, h)
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "network_unavailable") {
		t.Fatalf("with the plan full: %d %s", rec.Code, rec.Body)
	}
	// A BASIC key is told about its plan, not about the server.
	rec = send(t, srv, "POST", "/v1/sessions", `{"language":"python3","network":{"enabled":true}}`, map[string]string{"X-RapidAPI-Key": "key-BASIC"})
	if rec.Code != 403 {
		t.Fatalf("BASIC: %d %s", rec.Code, rec.Body)
	}
}

// TestPanicIsLoggedAndMeteredAs500 checks that a handler that panics is
// answered 500 internal and that the access log line and the meter record
// 500, not the 200 a writer that was never written to reports.
func TestPanicIsLoggedAndMeteredAs500(t *testing.T) {
	t.Parallel()
	srv, sb := newFakeServer(t)
	var logs testenv.LogBuffer
	srv.log = slog.New(slog.NewJSONHandler(&logs, nil))
	m := &recMeter{}
	srv.meter = m
	sb.createPanic = "boom"
	rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, map[string]string{"X-RapidAPI-Key": "key-PRO"})
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"internal"`) {
		t.Fatalf("reply %d %s, want 500 internal", rec.Code, rec.Body)
	}
	var access map[string]any
	panics := 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch l["msg"] {
		case "request":
			access = l
		case "panic":
			panics++
		}
	}
	if access == nil || access["status"] != float64(500) {
		t.Fatalf("access log line %v, want status 500\n%s", access, logs.String())
	}
	if panics != 1 {
		t.Fatalf("%d panic lines, want 1\n%s", panics, logs.String())
	}
	m.mu.Lock()
	rows := append([]Usage(nil), m.rows...)
	m.mu.Unlock()
	if len(rows) != 1 || rows[0].Status != 500 {
		t.Fatalf("metered %+v, want one row with status 500", rows)
	}
	// The plan's in-flight slot went back with the panic.
	sb.createPanic = nil
	for i := range 2 {
		if rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, map[string]string{"X-RapidAPI-Key": "key-PRO"}); rec.Code != 201 {
			t.Fatalf("session %d after the panic: %d %s", i+1, rec.Code, rec.Body)
		}
	}
}
