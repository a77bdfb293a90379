package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/reqid"
)

func TestLoggerStampsRequestID(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(&buf, "debug")
	ctx := reqid.With(context.Background(), "req-42")
	log.InfoContext(ctx, "execution", "session", "sess_a")
	log.With("component", "executor").WarnContext(ctx, "slow")
	log.InfoContext(ctx, "named already", "request_id", "req-42")
	log.Info("no context")
	log.InfoContext(context.Background(), "context without id")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"req-42", "req-42", "req-42", "", ""}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines:\n%s", len(lines), buf.String())
	}
	for i, l := range lines {
		if n := strings.Count(l, `"request_id"`); n > 1 {
			t.Errorf("line %d names request_id %d times: %s", i, n, l)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %d is not JSON: %v", i, err)
		}
		got, _ := m["request_id"].(string)
		if got != want[i] {
			t.Errorf("line %d: request_id %q, want %q: %s", i, got, want[i], l)
		}
	}
}
