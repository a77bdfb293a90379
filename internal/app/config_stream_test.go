package app

import (
	"strings"
	"testing"
	"time"
)

// TestStreamHeartbeat checks server.stream_heartbeat: 5 s by default,
// any duration from 1s to 5m, anything else an error naming the key.
func TestStreamHeartbeat(t *testing.T) {
	def, err := ParseConfig(nil, "empty")
	if err != nil {
		t.Fatal(err)
	}
	if got := def.Server.StreamHeartbeat.D(); got != 5*time.Second {
		t.Errorf("default stream_heartbeat %v, want 5s", got)
	}
	for _, tc := range []struct {
		val  string
		want time.Duration // 0: rejected
	}{
		{"1s", time.Second},
		{"20s", 20 * time.Second},
		{"5m", 5 * time.Minute},
		{"0s", 0},
		{"500ms", 0},
		{"-15s", 0}, // refused when decoded: "duration is negative"
		{"6m", 0},
	} {
		c, err := ParseConfig([]byte("version: v1\nserver:\n  stream_heartbeat: "+tc.val+"\n"), "test")
		switch {
		case tc.want == 0 && (err == nil || !strings.Contains(err.Error(), "stream_heartbeat") && !strings.Contains(err.Error(), "negative")):
			t.Errorf("stream_heartbeat %s: err %v, want an error naming server.stream_heartbeat", tc.val, err)
		case tc.want != 0 && err != nil:
			t.Errorf("stream_heartbeat %s: %v", tc.val, err)
		case tc.want != 0 && c.Server.StreamHeartbeat.D() != tc.want:
			t.Errorf("stream_heartbeat %s: %v", tc.val, c.Server.StreamHeartbeat.D())
		}
	}
}
