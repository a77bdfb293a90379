package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// The operator's commands on a real store: keys create prints the secret
// last, list shows the key without it, revoke marks it, and usage shows
// every key's totals with their columns.
func TestKeysAndUsageCommands(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		var out, errw bytes.Buffer
		if code := Run(t.Context(), append(append([]string{"sandboxapi"}, args...), "--data-dir", dir), &out, &errw); code != 0 {
			t.Fatalf("sandboxapi %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errw.String())
		}
		return out.String()
	}
	created := strings.TrimSpace(run("keys", "create", "--plan", "PRO", "--name", "ops-test"))
	lines := strings.Split(created, "\n")
	secret := lines[len(lines)-1]
	if !strings.HasPrefix(secret, "sk_") {
		t.Fatalf("keys create's last line %q is not the secret", secret)
	}
	list := run("keys", "list")
	if !strings.Contains(list, "ops-test") || !strings.Contains(list, "PRO") || strings.Contains(list, secret) {
		t.Fatalf("keys list:\n%s", list)
	}

	st, err := store.Open(t.Context(), filepath.Join(dir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := st.ListKeys(t.Context())
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys in the store: %v %v", keys, err)
	}
	id := keys[0].ID
	now := time.Now()
	if err := st.InsertUsage(t.Context(), []store.UsageRow{
		{KeyID: id, Route: "POST /v1/execute", Status: 200, DurationMS: 120, BytesIn: 40, BytesOut: 180, ExecMS: 90, At: now},
		{KeyID: id, Route: "POST /v1/execute", Status: 429, DurationMS: 3, BytesIn: 40, BytesOut: 90, At: now},
		{KeyID: "key_other", Route: "GET /v1/sessions", Status: 200, DurationMS: 7, BytesOut: 12, At: now},
	}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	usage := run("usage")
	if !strings.Contains(usage, "DURATION_MS") {
		t.Fatalf("usage has no duration column:\n%s", usage)
	}
	var mine, other string
	for _, l := range strings.Split(usage, "\n") {
		switch {
		case strings.Contains(l, id):
			mine = strings.Join(strings.Fields(l), " ")
		case strings.Contains(l, "key_other"):
			other = strings.Join(strings.Fields(l), " ")
		}
	}
	if !strings.HasSuffix(mine, "POST /v1/execute 2 1 80 270 90 123") {
		t.Errorf("usage row of the key = %q, want 2 requests, 1 error, 80/270 bytes, 90 exec ms, 123 ms", mine)
	}
	if !strings.HasSuffix(other, "GET /v1/sessions 1 0 0 12 0 7") {
		t.Errorf("usage row of the other key = %q", other)
	}

	run("keys", "revoke", id) // the flag after the id, as operators type it
	if list := run("keys", "list"); !strings.Contains(strings.ToLower(list), "revoked") {
		t.Errorf("keys list after revoke does not say revoked:\n%s", list)
	}
}
