package mirror

import (
	"errors"
	"strings"
	"testing"
)

// TestParseManagerUnknown: an ecosystem the mirror does not hold is an
// UnknownManagerError (still an ErrBadSpec for callers that map it) whose
// message names it, quoted and cut short, and lists the known ones.
func TestParseManagerUnknown(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"cargo", "", "maven", "pip ", "n\x00pm", "\x1b[31mgem", strings.Repeat("x", 1000)} {
		_, err := ParseManager(in)
		var ue *UnknownManagerError
		if !errors.As(err, &ue) || !errors.Is(err, ErrBadSpec) {
			t.Fatalf("%q: %v, want an UnknownManagerError", in, err)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "unknown ecosystem ") || !strings.Contains(msg, KnownManagers) || strings.Contains(msg, "bad package spec") {
			t.Errorf("%q: message %q", in, msg)
		}
		if strings.ContainsAny(msg, "\x00\x1b") || len(msg) > 200 {
			t.Errorf("%q: message echoes the raw name: %q", in, msg)
		}
	}
	if _, err := ParseSpec(Manager("cargo"), "serde@1.0.0"); !errors.As(err, new(*UnknownManagerError)) {
		t.Errorf("ParseSpec with cargo: %v", err)
	}
}
