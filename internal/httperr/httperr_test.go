package httperr

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Payload
		want string
	}{
		{name: "code and message", p: Payload{Code: "draining", Message: "retry shortly"},
			want: `{"error":{"code":"draining","message":"retry shortly"}}` + "\n"},
		{name: "request id and details", p: Payload{Code: "internal", Message: "x", RequestID: "r1", Details: map[string]int{"n": 1}},
			want: `{"error":{"code":"internal","message":"x","request_id":"r1","details":{"n":1}}}` + "\n"},
		{name: "html kept", p: Payload{Code: "bad", Message: "<a> & b"},
			want: `{"error":{"code":"bad","message":"<a> & b"}}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			Write(rec, http.StatusServiceUnavailable, tt.p)
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("status %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
			}
			if got := rec.Body.String(); got != tt.want {
				t.Errorf("body %q, want %q", got, tt.want)
			}
		})
	}
}
