package api

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// TestNewKey: the row stores only the secret's hash, ids and secrets have
// their prefixes and lower-case base32 bodies, and two keys differ.
func TestNewKey(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	a, secretA := NewKey("ci", "PRO", store.KindClient, now)
	b, secretB := NewKey("ops", "", store.KindAdmin, now)
	if a.Hash != HashKey(secretA) || strings.Contains(a.Hash, secretA) {
		t.Errorf("row hash %q does not hash the secret", a.Hash)
	}
	if !strings.HasPrefix(secretA, "sk_") || len(secretA) != 3+32 || !strings.HasPrefix(a.ID, "key_") || len(a.ID) != 4+16 {
		t.Errorf("secret %q id %q", secretA, a.ID)
	}
	if strings.Trim(secretA[3:], "abcdefghijklmnopqrstuvwxyz234567") != "" {
		t.Errorf("secret %q is not lower-case base32", secretA)
	}
	if a.ID == b.ID || secretA == secretB {
		t.Error("two keys are the same")
	}
	if a.Name != "ci" || a.Plan != "PRO" || a.Kind != store.KindClient || !a.CreatedAt.Equal(now) || b.Kind != store.KindAdmin {
		t.Errorf("rows %+v %+v", a, b)
	}
}
