package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
)

func send(t *testing.T, h http.Handler, method, path, body string, headers map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestKeyHeaders(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServer(t)
	cases := []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"rapidapi header", map[string]string{"X-RapidAPI-Key": "key-PRO"}, 200},
		{"bearer", map[string]string{"Authorization": "Bearer key-PRO"}, 200},
		{"bearer lower case scheme", map[string]string{"Authorization": "bearer key-PRO"}, 200},
		{"x-api-key", map[string]string{"X-API-Key": "key-PRO"}, 200},
		{"none", nil, 401},
		{"unknown", map[string]string{"X-RapidAPI-Key": "key-NOPE"}, 401},
		{"basic auth is not a key", map[string]string{"Authorization": "Basic a2V5LVBSTzo="}, 401},
		{"overlong key", map[string]string{"X-API-Key": strings.Repeat("k", 5000)}, 401},
		{"rapidapi wins over a bad bearer", map[string]string{"X-RapidAPI-Key": "key-PRO", "Authorization": "Bearer nope"}, 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := send(t, srv, "GET", "/v1/sessions", "", tc.headers)
			if rec.Code != tc.status {
				t.Fatalf("got %d %s", rec.Code, rec.Body)
			}
			if tc.status == 401 && !strings.Contains(rec.Body.String(), `"code":"unauthenticated"`) {
				t.Fatalf("401 without the JSON error: %s", rec.Body)
			}
		})
	}
}

// TestPlanTable checks what each default plan gets: session, network and
// allowed_domains answers, concurrent sessions, the execution timeout cap,
// memory per execution and the request rate.
func TestPlanTable(t *testing.T) {
	t.Parallel()
	type want struct{ session, network, domains, sessions int }
	cases := []struct {
		plan       string
		want       want
		max        int
		maxTimeout int // seconds
		memoryMB   int64
		perMinute  int
		upgrade    string // the plan a timeout just over the cap points to
	}{
		{plan: "BASIC", want: want{403, 403, 403, 0}, max: 0, maxTimeout: 30, memoryMB: 256, perMinute: 60, upgrade: "PRO"},
		{plan: "PRO", want: want{201, 503, 403, 2}, max: 2, maxTimeout: 120, memoryMB: 512, perMinute: 300, upgrade: "ULTRA"},
		{plan: "ULTRA", want: want{201, 503, 503, 5}, max: 5, maxTimeout: 300, memoryMB: 512, perMinute: 600},
		{plan: "MEGA", want: want{201, 503, 503, 8}, max: 8, maxTimeout: 300, memoryMB: 512, perMinute: 1200},
	}
	for _, tc := range cases {
		t.Run(tc.plan, func(t *testing.T) {
			t.Parallel()
			srv, sb := newFakeServer(t)
			sb.noNetwork = true
			h := map[string]string{"X-RapidAPI-Key": "key-" + tc.plan}
			if rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3"}`, h); rec.Code != tc.want.session {
				t.Fatalf("session: %d %s", rec.Code, rec.Body)
			}
			rec := send(t, srv, "POST", "/v1/sessions", `{"language":"python3","network":{"enabled":true}}`, h)
			if rec.Code != tc.want.network {
				t.Fatalf("network: %d %s", rec.Code, rec.Body)
			}
			rec = send(t, srv, "POST", "/v1/sessions", `{"language":"python3","network":{"enabled":true,"allowed_domains":["api.example.com"]}}`, h)
			if rec.Code != tc.want.domains {
				t.Fatalf("allowed_domains: %d %s", rec.Code, rec.Body)
			}
			if rec.Code == 403 && !strings.Contains(rec.Body.String(), "has it") {
				t.Fatalf("403 does not name the plan that has it: %s", rec.Body)
			}
			// Fill the plan's concurrent sessions; the next is 429 with Retry-After.
			for i := sb.CountSessions("id-" + tc.plan); i < tc.max; i++ {
				if rec := send(t, srv, "POST", "/v1/sessions", `{"language":"bash"}`, h); rec.Code != 201 {
					t.Fatalf("session %d: %d %s", i, rec.Code, rec.Body)
				}
			}
			if tc.max > 0 {
				rec := send(t, srv, "POST", "/v1/sessions", `{"language":"bash"}`, h)
				if rec.Code != 429 || rec.Header().Get("Retry-After") == "" {
					t.Fatalf("over quota: %d %s", rec.Code, rec.Body)
				}
			}
			// Stateless execute works on every plan, with the plan's memory.
			if rec := send(t, srv, "POST", "/v1/execute", `{"language":"python3","code":"print(1)"}`, h); rec.Code != 200 {
				t.Fatalf("stateless: %d %s", rec.Code, rec.Body)
			}
			if got := sb.lastExec(t).MemoryBytes; got != tc.memoryMB<<20 {
				t.Errorf("memory per execution %d bytes, want %d MiB", got, tc.memoryMB)
			}
			// The timeout cap: at the cap is fine; just over is a 403 naming
			// the plan that allows it, or a 400 when none does.
			at := fmt.Sprintf(`{"language":"python3","code":"print(1)","timeout":%d}`, tc.maxTimeout)
			if rec := send(t, srv, "POST", "/v1/execute", at, h); rec.Code != 200 {
				t.Fatalf("timeout at the cap: %d %s", rec.Code, rec.Body)
			}
			over := fmt.Sprintf(`{"language":"python3","code":"print(1)","timeout":%d.5}`, tc.maxTimeout)
			wantCode, wantErr := 400, "invalid_request"
			if tc.upgrade != "" {
				wantCode, wantErr = 403, "plan_forbidden"
			}
			if rec := send(t, srv, "POST", "/v1/execute", over, h); rec.Code != wantCode || !strings.Contains(rec.Body.String(), `"code":"`+wantErr+`"`) ||
				!strings.Contains(rec.Body.String(), fmt.Sprintf("at most %d seconds", tc.maxTimeout)) || !strings.Contains(rec.Body.String(), tc.upgrade) {
				t.Fatalf("timeout over the cap: %d %s, want %d %s naming %q", rec.Code, rec.Body, wantCode, wantErr, tc.upgrade)
			}
			// The limits the plan reports are the ones it enforces.
			var rt struct {
				Limits struct {
					MaxTimeout int   `json:"max_timeout"`
					MemoryMB   int64 `json:"memory_mb"`
				} `json:"limits"`
			}
			rec = send(t, srv, "GET", "/v1/runtimes", "", h)
			if err := json.Unmarshal(rec.Body.Bytes(), &rt); err != nil || rt.Limits.MaxTimeout != tc.maxTimeout || rt.Limits.MemoryMB != tc.memoryMB {
				t.Errorf("runtimes limits %+v (%v), want max_timeout %d memory_mb %d", rt.Limits, err, tc.maxTimeout, tc.memoryMB)
			}

			// The request rate, on a fresh server: a full bucket of
			// perMinute requests, then 429. Tokens refill at perMinute/60
			// a second while the loop runs; allow for that.
			srv, _ = newFakeServer(t)
			start := time.Now()
			allowed := 0
			for allowed <= 2*tc.perMinute {
				rec := send(t, srv, "GET", "/v1/sessions", "", h)
				if rec.Code == 429 {
					break
				}
				if rec.Code != 200 {
					t.Fatalf("request %d: %d %s", allowed, rec.Code, rec.Body)
				}
				allowed++
			}
			refill := int(time.Since(start).Seconds()*float64(tc.perMinute)/60) + 1
			if allowed < tc.perMinute || allowed > tc.perMinute+refill {
				t.Errorf("%d requests allowed before 429, want %d (+%d refilled)", allowed, tc.perMinute, refill)
			}
		})
	}
}

func TestGatewayMode(t *testing.T) {
	t.Parallel()
	plans, _ := LoadPlans(configs.Plans)
	srv := New(Config{MaxBodyBytes: 1 << 20, MaxCodeBytes: 1 << 16, MaxStdinBytes: 1 << 16, MaxIdleTTL: time.Hour,
		Gateway: GatewayConfig{Secret: "s3cret"}}, Deps{Sandboxes: newFakeSandboxes(), Keys: fakeKeys{}, Plans: plans, Log: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	cases := []struct {
		name    string
		headers map[string]string
		status  int
		code    string
	}{
		{"no secret, valid key", map[string]string{"X-RapidAPI-Key": "key-PRO"}, 401, "unauthenticated"},
		{"wrong secret", map[string]string{"X-RapidAPI-Proxy-Secret": "nope", "X-RapidAPI-User": "u", "X-RapidAPI-Subscription": "PRO"}, 401, "unauthenticated"},
		{"secret without user", map[string]string{"X-RapidAPI-Proxy-Secret": "s3cret", "X-RapidAPI-Subscription": "PRO"}, 401, "unauthenticated"},
		{"secret, unknown plan", map[string]string{"X-RapidAPI-Proxy-Secret": "s3cret", "X-RapidAPI-User": "u", "X-RapidAPI-Subscription": "GOLD"}, 403, "unknown_plan"},
		{"secret, user, plan", map[string]string{"X-RapidAPI-Proxy-Secret": "s3cret", "X-RapidAPI-User": "u", "X-RapidAPI-Subscription": "pro"}, 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := send(t, srv, "GET", "/v1/sessions", "", tc.headers)
			if rec.Code != tc.status {
				t.Fatalf("got %d %s", rec.Code, rec.Body)
			}
			if tc.status < 400 {
				return
			}
			// A refusal is the JSON error body, and never echoes the secrets.
			var body errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("refusal is not the JSON error body (%v): %s", err, rec.Body)
			}
			if body.Error.Code != tc.code || body.Error.Message == "" || body.Error.RequestID == "" {
				t.Fatalf("error %+v, want code %s with a message and request id", body.Error, tc.code)
			}
			for _, secret := range []string{"s3cret", "nope", "key-PRO"} {
				if strings.Contains(rec.Body.String(), secret) {
					t.Fatalf("refusal echoes %q: %s", secret, rec.Body)
				}
			}
		})
	}
}

func TestRateLimitAnswers429WithRetryAfter(t *testing.T) {
	t.Parallel()
	srv, _ := newFakeServer(t)
	h := map[string]string{"X-RapidAPI-Key": "key-BASIC"} // 60 per minute
	var last *httptest.ResponseRecorder
	for i := 0; i < 61; i++ {
		last = send(t, srv, "GET", "/v1/runtimes", "", h)
	}
	if last.Code != 429 || last.Header().Get("Retry-After") == "" || !strings.Contains(last.Body.String(), "rate_limited") {
		t.Fatalf("61st request: %d %v %s", last.Code, last.Header(), last.Body)
	}
	// Another key is not affected.
	if rec := send(t, srv, "GET", "/v1/runtimes", "", map[string]string{"X-RapidAPI-Key": "key-PRO"}); rec.Code != 200 {
		t.Fatalf("other key: %d", rec.Code)
	}
}

func TestQuotaReservationIsAtomic(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	live := 0
	q := newLocalSlots(countSessions{f: func() int { mu.Lock(); defer mu.Unlock(); return live }})
	ctx := context.Background()
	var wg sync.WaitGroup
	granted := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slot := fmt.Sprintf("pending_%d", i)
			if ok, _ := q.ReserveSessionSlot(ctx, "k", slot, "", 3); ok {
				mu.Lock()
				live++
				granted++
				mu.Unlock()
				_ = q.BindSessionSlot(ctx, "k", slot, fmt.Sprintf("sess_%d", i))
			}
		}()
	}
	wg.Wait()
	if granted != 3 {
		t.Fatalf("granted %d, want 3", granted)
	}
}

// countSessions is a Sandboxes with CountSessions alone (the others are
// promoted from the nil embedded interface and panic).
type countSessions struct {
	Sandboxes
	f func() int
}

func (c countSessions) CountSessions(string) int { return c.f() }
