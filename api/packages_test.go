package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

func TestCheckPackagesValidates(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.Packages = fakePackages{} })
	many := make([]string, sandbox.MaxPackages+1)
	for i := range many {
		many[i] = "x"
	}
	cases := []struct {
		name   string
		key    string
		body   any
		status int
		code   string
	}{
		{name: "ok", key: "key-BASIC", body: map[string]any{"manager": "PIP", "packages": []string{"requests", "numpy==2.0"}}, status: 200},
		{name: "no key", body: map[string]any{"manager": "pip", "packages": []string{"x"}}, status: 401, code: "unauthenticated"},
		{name: "bad manager", key: "key-BASIC", body: map[string]any{"manager": "cargo", "packages": []string{"x"}}, status: 400, code: "invalid_request"},
		{name: "no packages", key: "key-BASIC", body: map[string]any{"manager": "npm", "packages": []string{}}, status: 400, code: "invalid_request"},
		{name: "too many", key: "key-BASIC", body: map[string]any{"manager": "npm", "packages": many}, status: 400, code: "invalid_request"},
		{name: "spec too long", key: "key-BASIC", body: map[string]any{"manager": "npm", "packages": []string{strings.Repeat("a", 301)}}, status: 400, code: "invalid_request"},
		{name: "unknown field", key: "key-BASIC", body: map[string]any{"manager": "npm", "packages": []string{"a"}, "x": 1}, status: 400, code: "unknown_field"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/v1/packages/check", strings.NewReader(mustJSON(tc.body)))
			if tc.key != "" {
				req.Header.Set("X-API-Key", tc.key)
			}
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			var out struct {
				Manager string           `json:"manager"`
				Results []PackageVerdict `json:"results"`
				Error   struct{ Code string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			if tc.status != http.StatusOK {
				if out.Error.Code != tc.code {
					t.Fatalf("code %q, want %q", out.Error.Code, tc.code)
				}
				return
			}
			if out.Manager != "pip" || len(out.Results) != 2 || out.Results[1].Spec != "numpy==2.0" || out.Results[0].Versions == nil {
				t.Fatalf("got %s", rec.Body)
			}
		})
	}
}
