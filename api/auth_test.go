package api

import (
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

// TestPlanTable checks what each default plan gets.
func TestPlanTable(t *testing.T) {
	t.Parallel()
	type want struct{ session, network, domains, sessions int }
	cases := []struct {
		plan string
		want want
		max  int
	}{
		{"BASIC", want{403, 403, 403, 0}, 0},
		{"PRO", want{201, 503, 403, 2}, 2},
		{"ULTRA", want{201, 503, 503, 5}, 5},
		{"MEGA", want{201, 503, 503, 8}, 8},
	}
	for _, tc := range cases {
		t.Run(tc.plan, func(t *testing.T) {
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
			// Stateless execute works on every plan.
			if rec := send(t, srv, "POST", "/v1/execute", `{"language":"python3","code":"print(1)"}`, h); rec.Code != 200 {
				t.Fatalf("stateless: %d %s", rec.Code, rec.Body)
			}
		})
	}
}

func TestGatewayMode(t *testing.T) {
	t.Parallel()
	plans, _ := LoadPlans(configs.Plans)
	srv := New(Config{MaxBodyBytes: 1 << 20, MaxCodeBytes: 1 << 16, MaxStdinBytes: 1 << 16, DefaultIdleTTL: time.Minute, MaxIdleTTL: time.Hour,
		Gateway: GatewayConfig{Secret: "s3cret"}}, newFakeSandboxes(), fakeKeys{}, plans, nil, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	cases := []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"no secret, valid key", map[string]string{"X-RapidAPI-Key": "key-PRO"}, 401},
		{"wrong secret", map[string]string{"X-RapidAPI-Proxy-Secret": "nope", "X-RapidAPI-User": "u", "X-RapidAPI-Subscription": "PRO"}, 401},
		{"secret without user", map[string]string{"X-RapidAPI-Proxy-Secret": "s3cret", "X-RapidAPI-Subscription": "PRO"}, 401},
		{"secret, unknown plan", map[string]string{"X-RapidAPI-Proxy-Secret": "s3cret", "X-RapidAPI-User": "u", "X-RapidAPI-Subscription": "GOLD"}, 403},
		{"secret, user, plan", map[string]string{"X-RapidAPI-Proxy-Secret": "s3cret", "X-RapidAPI-User": "u", "X-RapidAPI-Subscription": "pro"}, 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if rec := send(t, srv, "GET", "/v1/sessions", "", tc.headers); rec.Code != tc.status {
				t.Fatalf("got %d %s", rec.Code, rec.Body)
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
	q := quota{inFlight: map[string]int{}}
	var mu sync.Mutex
	live := 0
	var wg sync.WaitGroup
	granted := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if q.reserve("k", func() int { mu.Lock(); defer mu.Unlock(); return live }, 3) {
				mu.Lock()
				live++
				granted++
				mu.Unlock()
				q.release("k")
			}
		}()
	}
	wg.Wait()
	if granted != 3 {
		t.Fatalf("granted %d, want 3", granted)
	}
}
