package api

import (
	"strings"
	"testing"
	"time"
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
		{name: "explicit over the cap", plan: "BASIC", defaultTimeout: 10 * time.Second, timeout: "30.5", status: 400},
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
