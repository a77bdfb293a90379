package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
)

// FuzzRequestJSON sends arbitrary bodies to every JSON endpoint of a Server
// over the fakes: whatever the body, the answer is a 2xx or a 4xx/503 with
// a well-formed error document, never a 500 (a panic) or a malformed reply.
func FuzzRequestJSON(f *testing.F) {
	seeds := []struct {
		route int
		body  string
	}{
		{0, `{"language":"python3","code":"print(1)"}`},
		{0, `{"language":"bash","code":"echo hi","stdin":"x","timeout":2.5,"files":[{"path":"a.txt","content":"hi"}]}`},
		{0, `{"language":"python3","code":"x","timeout":-1}`},
		{0, `{"language":"python3","code":"x","timeout":1e309}`},
		{0, `{"language":"python3","code":"x","files":[{"path":"../../etc/passwd","content":"x"}]}`},
		{1, `{"language":"python3","idle_ttl":60,"network":{"enabled":true,"allowed_domains":["*.example.com","api.example.com"]}}`},
		{1, `{"language":"bash","network":{"enabled":true,"allowed_domains":["*"]}}`},
		{1, `{"language":"python3","idle_ttl":"forever"}`},
		{2, `{"code":"print(2)","env":{"A":"b"},"stream":false}`},
		{2, `{"code":"sleep","timeout":0.001}`},
		{2, `{"code":"x","env":{"PATH":"/evil","LD_PRELOAD":"x"}}`},
		{3, `{"manager":"pip","packages":["requests==2.32.3"]}`},
		{3, `{"manager":"npm","packages":["left-pad@1.3.0","../x@1"]}`},
		{0, `{"language":"python3","code":"x"} {"again":1}`},
		{0, `{"language":"python3","code":"x","unknown":1}`},
		{0, `[]`},
		{0, ``},
		{1, `{"language":"python3"`},
		{2, "\x00\xff"},
	}
	for _, s := range seeds {
		f.Add(s.route, s.body)
	}
	plans, err := LoadPlans(configs.Plans)
	if err != nil {
		f.Fatal(err)
	}
	srv := New(Config{MaxBodyBytes: 1 << 20, MaxCodeBytes: 1 << 16, MaxStdinBytes: 1 << 16,
		MaxIdleTTL: time.Hour}, Deps{Sandboxes: newFakeSandboxes(), Keys: fakeKeys{}, Plans: plans,
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	key := map[string]string{"Authorization": "Bearer key-MEGA"}
	// One session to aim the per-session routes at.
	rec := doFuzz(srv, "POST", "/v1/sessions", `{"language":"python3"}`, key)
	var sess struct{ ID string }
	if err := json.Unmarshal(rec.Body.Bytes(), &sess); err != nil || sess.ID == "" {
		f.Fatalf("creating the target session: %d %s", rec.Code, rec.Body)
	}
	routes := []string{"/v1/execute", "/v1/sessions", "/v1/sessions/" + sess.ID + "/execute", "/v1/sessions/" + sess.ID + "/install"}
	f.Fuzz(func(t *testing.T, route int, body string) {
		if route < 0 {
			route = -route
		}
		path := routes[route%len(routes)]
		rec := doFuzz(srv, "POST", path, body, key)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("POST %s %q: status %d: %s", path, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 {
			var doc struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.Error.Code == "" {
				t.Fatalf("POST %s %q: status %d with a malformed error document: %s", path, body, rec.Code, rec.Body)
			}
		}
		// Sessions the fuzzer made are deleted so the plan limit does not
		// turn every later input into a 429.
		if path == "/v1/sessions" && rec.Code == http.StatusCreated {
			var s struct{ ID string }
			if json.Unmarshal(rec.Body.Bytes(), &s) == nil && s.ID != "" && s.ID != sess.ID {
				doFuzz(srv, "DELETE", "/v1/sessions/"+s.ID, "", key)
			}
		}
	})
}

func doFuzz(h http.Handler, method, path, body string, headers map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// FuzzLoadPlans checks that any plans.yaml either loads into a table whose
// plans all resolve, or fails with an error; never a panic.
func FuzzLoadPlans(f *testing.F) {
	f.Add(string(configs.Plans))
	f.Add("version: v1\nplans: {}\n")
	f.Add("version: v1\nplans:\n  X:\n    sessions: true\n    max_concurrent_sessions: -1\n")
	f.Add("version: v2\n")
	f.Add("plans: [1, 2]\n")
	f.Add("version: v1\nplans:\n  A: &a {sessions: true}\n  B: *a\n")
	f.Fuzz(func(t *testing.T, data string) {
		p, err := LoadPlans([]byte(data))
		if err != nil {
			return
		}
		if p == nil {
			t.Fatal("nil plans without an error")
		}
	})
}
