package mcp

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestDecodeError reads error replies, the API's envelope and hostile or
// foreign ones, into the tool's error.
func TestDecodeError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		status     int
		body       string
		retryAfter string
		wantCode   string
		wantMsg    string
		wantDetail string
		wantRID    string
		wantRetry  time.Duration
	}{
		{name: "envelope", status: 429, body: `{"error":{"code":"rate_limited","message":"slow down","request_id":"r1"}}`, retryAfter: "7",
			wantCode: "rate_limited", wantMsg: "slow down", wantRID: "r1", wantRetry: 7 * time.Second},
		{name: "envelope with details", status: 422, body: `{"error":{"code":"packages_rejected","message":"m","details":{"packages":[{"package":"x"}]}}}`,
			wantCode: "packages_rejected", wantMsg: "m", wantDetail: `{"packages":[{"package":"x"}]}`},
		{name: "long details cut", status: 422, body: `{"error":{"code":"c","message":"m","details":"` + strings.Repeat("d", 3000) + `"}}`,
			wantCode: "c", wantMsg: "m", wantDetail: `"` + strings.Repeat("d", maxDetailsBytes-1)},
		{name: "envelope without a code", status: 400, body: `{"error":{"message":"m"}}`, wantCode: "bad_request", wantMsg: `{"error":{"message":"m"}}`},
		{name: "code of the wrong type", status: 400, body: `{"error":{"code":5}}`, wantCode: "bad_request", wantMsg: `{"error":{"code":5}}`},
		{name: "error as a string", status: 502, body: `{"error":"upstream"}`, wantCode: "bad_gateway", wantMsg: `{"error":"upstream"}`},
		{name: "html page", status: 503, body: "<html>down</html>", wantCode: "service_unavailable", wantMsg: "<html>down</html>"},
		{name: "long body cut", status: 500, body: strings.Repeat("x", 1000), wantCode: "internal_server_error", wantMsg: strings.Repeat("x", 300)},
		{name: "cut inside a rune", status: 500, body: strings.Repeat("x", 299) + "é", wantCode: "internal_server_error", wantMsg: strings.Repeat("x", 299)},
		{name: "status without a name", status: 599, body: "", wantCode: "http_599"},
		{name: "negative retry", status: 503, body: "x", retryAfter: "-5", wantCode: "service_unavailable", wantMsg: "x"},
		{name: "retry as a date", status: 503, body: "x", retryAfter: "Wed, 21 Oct 2026 07:28:00 GMT", wantCode: "service_unavailable", wantMsg: "x"},
		{name: "retry over int64", status: 503, body: "x", retryAfter: "99999999999999999999", wantCode: "service_unavailable", wantMsg: "x"},
		{name: "retry that would overflow", status: 503, body: "x", retryAfter: "9223372036854775807", wantCode: "service_unavailable", wantMsg: "x", wantRetry: maxRetryAfter},
		{name: "retry with spaces", status: 503, body: "x", retryAfter: " 3 ", wantCode: "service_unavailable", wantMsg: "x", wantRetry: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tt.retryAfter != "" {
				h.Set("Retry-After", tt.retryAfter)
			}
			e := decodeError(apiReply{status: tt.status, header: h, body: []byte(tt.body)})
			if e.Status != tt.status || e.Code != tt.wantCode || e.Message != tt.wantMsg || e.RequestID != tt.wantRID || e.RetryAfter != tt.wantRetry || e.Details != tt.wantDetail {
				t.Errorf("got %+v, want code %q message %q request %q retry %v details %q", e, tt.wantCode, tt.wantMsg, tt.wantRID, tt.wantRetry, tt.wantDetail)
			}
		})
	}
}

// FuzzDecodeError: whatever a server answers, the tool's error has a
// code, a bounded valid message from a foreign body, a Retry-After in
// [0, maxRetryAfter], and the envelope mcp writes for it (errorJSON) reads
// back as the same error.
func FuzzDecodeError(f *testing.F) {
	f.Add(429, []byte(`{"error":{"code":"rate_limited","message":"m","request_id":"r"}}`), "7")
	f.Add(502, []byte("<html>"), "-1")
	f.Add(599, []byte{0xff, 0xfe}, "9223372036854775807")
	f.Add(400, []byte(`{"error":{"code":"x","details":[1,{"a":null}]}}`), "")
	f.Fuzz(func(t *testing.T, status int, body []byte, retry string) {
		status = 100 + abs(status)%900
		h := http.Header{}
		h.Set("Retry-After", retry)
		e := decodeError(apiReply{status: status, header: h, body: body})
		if e.Code == "" || e.Status != status || e.RetryAfter < 0 || e.RetryAfter > maxRetryAfter {
			t.Fatalf("decoded %+v", e)
		}
		_ = e.Error()
		back := decodeError(apiReply{status: status, header: http.Header{}, body: errorJSON(e)})
		if !utf8.ValidString(e.Code) || !utf8.ValidString(e.Message) || !utf8.ValidString(e.RequestID) {
			return // JSON replaces invalid bytes; the envelope's own text is what it is
		}
		if back.Code != e.Code || back.Message != e.Message || back.RequestID != e.RequestID {
			t.Fatalf("errorJSON(%+v) read back as %+v", e, back)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		if n == -n { // the smallest int
			return 0
		}
		return -n
	}
	return n
}
