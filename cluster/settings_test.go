package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/duration"
)

// TestValidatePreviousSecrets: previous secrets are each long enough,
// none is the secret, none repeats, there are at most
// MaxPreviousSecrets; every problem is reported, by position, and no
// secret is ever printed.
func TestValidatePreviousSecrets(t *testing.T) {
	t.Parallel()
	short := "short-previous-secretpw" // 23 bytes
	other := func(i int) string { return strings.Repeat(string(rune('a'+i)), MinSecretBytes) }
	for _, tc := range []struct {
		name     string
		previous []string
		want     []string // empty: valid
	}{
		{name: "none"},
		{name: "empty list", previous: []string{}},
		{name: "one", previous: []string{oldSecret}},
		{name: "as many as allowed", previous: []string{other(0), other(1), other(2), other(3)}},
		{name: "exactly the minimum", previous: []string{strings.Repeat("x", MinSecretBytes)}},
		{name: "short", previous: []string{oldSecret, short},
			want: []string{"previous_secrets[1]: must be at least 32 bytes, got 23"}},
		{name: "empty entry", previous: []string{""}, want: []string{"previous_secrets[0]: must be at least 32 bytes, got 0"}},
		{name: "equal to secret", previous: []string{newSecret}, want: []string{"previous_secrets[0]: equal to secret"}},
		{name: "duplicate", previous: []string{oldSecret, other(0), oldSecret},
			want: []string{"previous_secrets[2]: the same as previous_secrets[0]"}},
		{name: "too many", previous: []string{other(0), other(1), other(2), other(3), other(4)},
			want: []string{"previous_secrets: at most 4, got 5"}},
		{name: "everything at once", previous: []string{short, short, newSecret, other(0), other(1)},
			want: []string{"at most 4, got 5", "previous_secrets[0]: must be at least", "previous_secrets[1]: the same as previous_secrets[0]",
				"previous_secrets[2]: equal to secret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := Settings{Node: "n1", AdvertiseURL: "http://10.0.0.1:8080", Secret: newSecret, PreviousSecrets: tc.previous,
				Lease: duration.Duration(10 * time.Second)}
			err := s.Validate()
			if !wantErrors(t, err, tc.want) {
				return
			}
			for _, secret := range append([]string{s.Secret}, tc.previous...) {
				if secret != "" && strings.Contains(err.Error(), secret) {
					t.Errorf("error %q prints a secret", err)
				}
			}
		})
	}
}

// TestValidatePreviousSecretsSingleNode: a single node checks nothing of
// the cluster section, previous secrets included.
func TestValidatePreviousSecretsSingleNode(t *testing.T) {
	t.Parallel()
	if err := (Settings{PreviousSecrets: []string{"short"}}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// wantErrors checks a Validate result against want: nil when want is
// empty, else an error containing every entry. It reports whether there
// was an error to look at further.
func wantErrors(t *testing.T, err error, want []string) bool {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	return true
}
