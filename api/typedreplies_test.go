package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// keyPaths lists every key of a decoded JSON value as a path ("a.b",
// "list[].c"), sorted and without repeats: the shape of a reply without
// its values.
func keyPaths(v any, prefix string, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			out[prefix+k] = true
			keyPaths(e, prefix+k+".", out)
		}
	case []any:
		for _, e := range x {
			keyPaths(e, strings.TrimSuffix(prefix, ".")+"[].", out)
		}
	}
}

// TestTypedRepliesKeepTheirKeys pins the keys of the replies that were
// map[string]any before package wire typed them (readyz both ways, the
// session list, the runtimes list, the package check, the egress log and
// the install's error details): the same keys, no more, no fewer.
func TestTypedRepliesKeepTheirKeys(t *testing.T) {
	t.Parallel()
	gate := &fakeGate{down: true}
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) {
		d.Readiness, d.EgressLog, d.Packages = fakeReadiness{}, fakeEgressLog{}, fakePackages{}
		d.Installer, d.Gate = fakeInstaller{}, gate
	})
	do := func(method, path, key, body string) (int, string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	status, body := do("POST", "/v1/sessions", "key-PRO", `{"language":"python3"}`)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	var sess struct{ ID string }
	_ = json.Unmarshal([]byte(body), &sess)
	session := "id,language,state,idle_ttl,network,network.enabled,created_at,last_used_at,expires_at"
	tests := []struct {
		name, method, path, key, body string
		status                        int
		keys                          string // comma-separated key paths
	}{
		{name: "healthz", method: "GET", path: "/healthz", status: 200, keys: "status"},
		{name: "readyz not ready", method: "GET", path: "/readyz", status: 503,
			keys: "status,draining,checks,checks[].name,checks[].status,checks[].detail,checks[].last_run,checks[].duration_ms"},
		{name: "readyz serving", method: "GET", path: "/readyz?scope=serving", status: 200,
			keys: "status,checks,checks[].name,checks[].status,checks[].detail,checks[].last_run,checks[].duration_ms"},
		{name: "session list", method: "GET", path: "/v1/sessions", key: "key-PRO", status: 200,
			keys: "sessions,sessions[]." + strings.ReplaceAll(session, ",", ",sessions[].")},
		{name: "runtimes", method: "GET", path: "/v1/runtimes", key: "key-PRO", status: 200,
			keys: "runtimes,runtimes[].language,runtimes[].aliases,runtimes[].version,runtimes[].compiled,runtimes[].versions," +
				"limits,limits.plan,limits.max_timeout,limits.memory_mb,limits.sessions,limits.max_sessions"},
		{name: "packages", method: "POST", path: "/v1/packages/check", key: "key-PRO", body: `{"manager":"pip","packages":["x"]}`, status: 200,
			keys: "manager,results,results[].spec,results[].name,results[].available,results[].status,results[].versions,results[].osv,results[].reasons"},
		{name: "egress", method: "GET", path: "/v1/sessions/" + sess.ID + "/egress", key: "key-PRO", status: 200,
			keys: "session_id,decisions,decisions[].time,decisions[].mode,decisions[].host,decisions[].port,decisions[].addr,decisions[].outcome," +
				"decisions[].reason,decisions[].bytes_up,decisions[].bytes_down,decisions[].duration_ms,decisions[].count"},
		{name: "install not ready", method: "POST", path: "/v1/sessions/" + sess.ID + "/install", key: "key-PRO", body: `{"manager":"pip","packages":["six==1"]}`, status: 503,
			keys: "error,error.code,error.message,error.request_id,error.details,error.details.checks,error.details.checks[].name,error.details.checks[].status," +
				"error.details.checks[].detail,error.details.checks[].last_run,error.details.checks[].duration_ms"},
	}
	for _, tt := range tests {
		status, body := do(tt.method, tt.path, tt.key, tt.body)
		if status != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.name, status, tt.status, body)
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Errorf("%s: %v: %s", tt.name, err, body)
			continue
		}
		got := map[string]bool{}
		keyPaths(v, "", got)
		want := strings.Split(tt.keys, ",")
		gotList := make([]string, 0, len(got))
		for k := range got {
			gotList = append(gotList, k)
		}
		slices.Sort(gotList)
		slices.Sort(want)
		if !slices.Equal(gotList, want) {
			t.Errorf("%s: keys\n%v\nwant\n%v\nbody %s", tt.name, gotList, want, body)
		}
	}
	// The install's 422 names each rejected package in details.packages.
	gate.down = false
	status, body = do("POST", "/v1/sessions/"+sess.ID+"/install", "key-PRO", `{"manager":"pip","packages":["bad==1"]}`)
	var rej struct {
		Error struct {
			Details map[string][]map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &rej); status != http.StatusUnprocessableEntity || err != nil || len(rej.Error.Details) != 1 ||
		len(rej.Error.Details["packages"]) != 1 || rej.Error.Details["packages"][0]["package"] != "bad==1" {
		t.Errorf("install rejected: %d %s", status, body)
	}
}
