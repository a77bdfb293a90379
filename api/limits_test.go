package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// TestExecuteTimeoutStaysUnderPlanCap checks the timeout each execute
// route hands the executor: a call without one gets the executor's default
// only while that is within the plan's cap, and the cap otherwise.
func TestExecuteTimeoutStaysUnderPlanCap(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		plan           string
		defaultTimeout time.Duration // api.Config.DefaultTimeout
		timeout        string        // the JSON field, "" for none
		status         int
		want           time.Duration
	}{
		{name: "default under the cap", plan: "PRO", defaultTimeout: 30 * time.Second, status: 200, want: 30 * time.Second},
		{name: "default over the cap", plan: "BASIC", defaultTimeout: 60 * time.Second, status: 200, want: 30 * time.Second},
		{name: "default equal to the cap", plan: "BASIC", defaultTimeout: 30 * time.Second, status: 200, want: 30 * time.Second},
		{name: "default unknown", plan: "PRO", status: 200, want: 120 * time.Second},
		{name: "default over every cap", plan: "MEGA", defaultTimeout: time.Hour, status: 200, want: 300 * time.Second},
		{name: "explicit within the cap", plan: "PRO", defaultTimeout: 30 * time.Second, timeout: "90", status: 200, want: 90 * time.Second},
		{name: "explicit at the cap", plan: "BASIC", defaultTimeout: 10 * time.Second, timeout: "30", status: 200, want: 30 * time.Second},
		{name: "explicit over the cap, a bigger plan allows it", plan: "BASIC", defaultTimeout: 10 * time.Second, timeout: "30.5", status: 403},
		{name: "explicit over every plan's cap", plan: "BASIC", defaultTimeout: 10 * time.Second, timeout: "300.5", status: 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, sb := newFakeServerWith(t, func(c *Config) { c.DefaultTimeout = tc.defaultTimeout })
			h := map[string]string{"X-API-Key": "key-" + tc.plan}
			field := ""
			if tc.timeout != "" {
				field = `,"timeout":` + tc.timeout
			}
			paths := map[string]string{"/v1/execute": `{"language":"python3","code":"print(1)"` + field + `}`}
			if tc.plan != "BASIC" {
				rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, h)
				if rec.Code != 201 {
					t.Fatalf("session: %d %s", rec.Code, rec.Body)
				}
				id := strings.Split(strings.Split(rec.Body.String(), `"id":"`)[1], `"`)[0]
				paths["/v1/sessions/"+id+"/execute"] = `{"code":"print(1)"` + field + `}`
			}
			for path, body := range paths {
				before := len(sb.execs)
				rec := send(t, srv, "POST", path, body, h)
				if rec.Code != tc.status {
					t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
				}
				if tc.status != 200 {
					if len(sb.execs) != before {
						t.Fatalf("%s: a refused call reached the sandboxes", path)
					}
					continue
				}
				if got := sb.lastExec(t).Timeout; got != tc.want {
					t.Errorf("%s: executor got timeout %v, want %v", path, got, tc.want)
				}
			}
		})
	}
}

// TestExecuteCarriesPlanMemory checks that both execute routes hand the
// executor the caller's plan memory, in bytes.
func TestExecuteCarriesPlanMemory(t *testing.T) {
	t.Parallel()
	srv, sb := newFakeServer(t)
	for _, plan := range []string{"BASIC", "PRO", "ULTRA", "MEGA"} {
		t.Run(plan, func(t *testing.T) {
			pl, _ := srv.plans.Get(plan)
			want := pl.MemoryMB << 20
			if want == 0 {
				t.Fatalf("plan %s has no memory_mb: the test would prove nothing", plan)
			}
			h := map[string]string{"X-API-Key": "key-" + plan}
			rec := send(t, srv, "POST", "/v1/execute", `{"language":"python3","code":"print(1)"}`, h)
			if rec.Code != 200 {
				t.Fatalf("stateless: %d %s", rec.Code, rec.Body)
			}
			if got := sb.lastExec(t).MemoryBytes; got != want {
				t.Errorf("stateless: executor got memory %d, want %d", got, want)
			}
			if !pl.Sessions {
				return
			}
			rec = send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, h)
			if rec.Code != 201 {
				t.Fatalf("session: %d %s", rec.Code, rec.Body)
			}
			id := strings.Split(strings.Split(rec.Body.String(), `"id":"`)[1], `"`)[0]
			if rec := send(t, srv, "POST", "/v1/sessions/"+id+"/execute", `{"code":"print(1)"}`, h); rec.Code != 200 {
				t.Fatalf("session execute: %d %s", rec.Code, rec.Body)
			}
			if got := sb.lastExec(t).MemoryBytes; got != want {
				t.Errorf("session: executor got memory %d, want %d", got, want)
			}
		})
	}
}

// TestLoadPlansRejectsBadMemory checks the bounds of memory_mb.
func TestLoadPlansRejectsBadMemory(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		memory string
		ok     bool
	}{
		{name: "executor default", memory: "0", ok: true},
		{name: "typical", memory: "512", ok: true},
		{name: "bound", memory: "1048576", ok: true},
		{name: "negative", memory: "-1", ok: false},
		{name: "overflows bytes", memory: "9007199254740993", ok: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := "version: v1\nplans:\n  BASIC:\n    max_timeout: 30s\n    requests_per_minute: 60\n    memory_mb: " + tc.memory + "\n"
			_, err := LoadPlans([]byte(doc))
			if (err == nil) != tc.ok {
				t.Fatalf("memory_mb %s: err = %v, want ok %v", tc.memory, err, tc.ok)
			}
		})
	}
}

// TestHostCapacityAnswers503 checks the reply when the executor has no
// sandbox left: 503, code no_capacity, Retry-After, the JSON error body,
// on every route that starts a sandbox, streamed or not.
func TestHostCapacityAnswers503(t *testing.T) {
	t.Parallel()
	full := fmt.Errorf("starting sandbox: %w", sandbox.ErrCapacity)
	cases := []struct {
		name, path, body string
		session          bool // path holds {sid}, a session made before the host fills
	}{
		{name: "stateless execute", path: "/v1/execute", body: `{"language":"python3","code":"print(1)"}`},
		{name: "stateless stream", path: "/v1/execute", body: `{"language":"python3","code":"print(1)","stream":true}`},
		{name: "session create", path: "/v1/sessions", body: `{"language":"python3"}`},
		{name: "session execute", path: "/v1/sessions/{sid}/execute", body: `{"code":"print(1)"}`, session: true},
		{name: "session stream", path: "/v1/sessions/{sid}/execute", body: `{"code":"print(1)","stream":true}`, session: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, sb := newFakeServer(t)
			h := map[string]string{"X-API-Key": "key-PRO"}
			path := tc.path
			if tc.session {
				rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, h)
				if rec.Code != 201 {
					t.Fatalf("session: %d %s", rec.Code, rec.Body)
				}
				path = strings.ReplaceAll(path, "{sid}", strings.Split(strings.Split(rec.Body.String(), `"id":"`)[1], `"`)[0])
			}
			sb.mu.Lock()
			sb.execErr, sb.createErr = full, full
			sb.mu.Unlock()
			rec := send(t, srv, "POST", path, tc.body, h)
			if rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503: %s", rec.Code, rec.Body)
			}
			if ra := rec.Header().Get("Retry-After"); ra == "" || strings.Trim(ra, "0123456789") != "" || ra == "0" {
				t.Errorf("Retry-After %q, want a positive number of seconds", ra)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var body errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body: %v: %s", err, rec.Body)
			}
			if body.Error.Code != "no_capacity" || body.Error.RequestID == "" {
				t.Errorf("error body %+v, want code no_capacity and a request id", body.Error)
			}
		})
	}
}
