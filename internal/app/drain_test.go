package app

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestDrainGate(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	tests := []struct {
		method, path string
		refused      bool
	}{
		{"POST", "/v1/sessions", true},
		{"POST", "/v1/execute", true},
		{"POST", "/v1/sessions/sess_x/execute", true},
		{"POST", "/v1/sessions/sess_x/install", true},
		{"PUT", "/v1/sessions/sess_x/files", true},
		{"PATCH", "/v1/sessions/sess_x/network", true},
		{"POST", "/mcp", true},
		{"GET", "/v1/sessions", false},
		{"GET", "/v1/sessions/sess_x/files", false},
		{"DELETE", "/v1/sessions/sess_x", false},
		{"GET", "/readyz", false},
		{"GET", "/healthz", false},
		{"GET", "/metrics", false},
		{"GET", "/mirror/pypi/simple/", false},
		{"POST", "/mirror/npm/-/v1/login", false},
		{"GET", "/mcp", false},
	}
	d := &drainGate{next: ok}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if rec.Code != http.StatusTeapot {
			t.Errorf("before drain: %s %s = %d, want passed through", tt.method, tt.path, rec.Code)
		}
	}
	d.start()
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if !tt.refused {
			if rec.Code != http.StatusTeapot {
				t.Errorf("draining: %s %s = %d, want passed through", tt.method, tt.path, rec.Code)
			}
			continue
		}
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" ||
			json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error.Code != "draining" {
			t.Errorf("draining: %s %s = %d %q (Retry-After %q), want 503 draining", tt.method, tt.path, rec.Code, rec.Body.String(), rec.Header().Get("Retry-After"))
		}
	}
}

// TestDrainGateOnClusterNode: a cluster node keeps serving calls on the
// sessions it still holds (the cluster handler in front sent the others
// away) until the hand-over; creates and stateless calls are refused.
func TestDrainGateOnClusterNode(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	d := &drainGate{next: ok, ownSessions: true}
	d.start()
	for _, tt := range []struct {
		method, path string
		refused      bool
	}{
		{"POST", "/v1/sessions/sess_x/execute", false},
		{"PUT", "/v1/sessions/sess_x/files", false},
		{"PATCH", "/v1/sessions/sess_x/network", false},
		{"POST", "/v1/sessions/sess_x/install", false},
		{"POST", "/v1/sessions", true},
		{"POST", "/v1/sessions/", true},
		{"POST", "/v1/execute", true},
		{"POST", "/mcp", true},
	} {
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if refused := rec.Code == http.StatusServiceUnavailable; refused != tt.refused || (!refused && rec.Code != http.StatusTeapot) {
			t.Errorf("draining cluster node: %s %s = %d, want refused %v", tt.method, tt.path, rec.Code, tt.refused)
		}
	}
}
