package e2b

import (
	"errors"
	"testing"
)

// TestSeal: a value opens with its secret, sandbox and purpose, and with
// nothing else; a tampered or truncated one does not open.
func TestSeal(t *testing.T) {
	t.Parallel()
	s, err := seal("sk_key", "sess1", purposeToken, []byte("e2bt_secret"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := unseal("sk_key", "sess1", purposeToken, s)
	if err != nil || string(got) != "e2bt_secret" {
		t.Fatalf("unseal = %q, %v", got, err)
	}
	flip := []byte(s)
	flip[len(flip)/2] ^= 1
	for _, tc := range []struct {
		name, secret, id, purpose, sealed string
	}{
		{"other secret", "sk_other", "sess1", purposeToken, s},
		{"other sandbox", "sk_key", "sess2", purposeToken, s},
		{"other purpose", "sk_key", "sess1", purposeKey, s},
		{"tampered", "sk_key", "sess1", purposeToken, string(flip)},
		{"truncated", "sk_key", "sess1", purposeToken, s[:8]},
		{"empty", "sk_key", "sess1", purposeToken, ""},
		{"not base64", "sk_key", "sess1", purposeToken, "!!!"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := unseal(tc.secret, tc.id, tc.purpose, tc.sealed); !errors.Is(err, errUnseal) {
				t.Fatalf("unseal = %v, want errUnseal", err)
			}
		})
	}
	tok := newAccessToken()
	if tok == newAccessToken() || !tokenMatches(tok, tokenHash(tok)) || tokenMatches(tok+"x", tokenHash(tok)) || tokenMatches("", tokenHash(tok)) {
		t.Fatal("access tokens do not match as they should")
	}
}
