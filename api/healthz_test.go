package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/buildinfo"
)

// TestHealthzNamesTheBuild: /healthz carries the build the CLI hands the
// server (version, revision, times, runsc), in the documented shape.
func TestHealthzNamesTheBuild(t *testing.T) {
	want := buildinfo.Info{Version: "v1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567", CommitTime: "2026-12-01T10:00:00Z",
		BuildTime: "2026-12-01T11:00:00Z", GoVersion: "go1.26.8", Runsc: "v0.0.0-20260905035102-160fafc42237"}
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.Build = &want })
	ts := httptest.NewServer(srv)
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var got struct {
		Status string         `json:"status"`
		Build  buildinfo.Info `json:"build"`
	}
	if err := json.Unmarshal(body, &got); err != nil || got.Status != "ok" || got.Build != want {
		t.Fatalf("healthz = %s (%v), want build %+v", body, err, want)
	}
	doc := loadOpenAPI(t)
	if err := newSchemaValidator(t, doc).validate(map[string]any{"$ref": "#/components/schemas/Health"}, body); err != nil {
		t.Errorf("healthz does not match the Health schema: %v\n%s", err, body)
	}
}
