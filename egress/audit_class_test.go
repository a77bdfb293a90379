package egress

import (
	"errors"
	"fmt"
	"testing"
)

// The decision classes are a fixed, bounded set of metric labels; the
// hostile-case tables (TestConnectHostile, TestPendingLimit, ...) check
// that each real decision carries the class of where it was made.
func TestClassesAreBounded(t *testing.T) {
	seen := map[Class]bool{}
	for _, c := range Classes {
		if c == "" || seen[c] {
			t.Errorf("class %q empty or listed twice", c)
		}
		seen[c] = true
	}
	cases := []struct {
		err  error
		want Class
	}{
		{ErrUnknownSession, ClassUnknownSession},
		{ErrWrongSourceAddr, ClassUnknownSession},
		{fmt.Errorf("accepting: %w", ErrWrongSourceAddr), ClassUnknownSession},
		{ErrStopped, ClassStopped},
		{ErrTooManyTunnels, ClassTunnelLimit},
		{errors.New("something else"), ClassBadTarget},
	}
	for _, c := range cases {
		if got := sessionErrClass(c.err); got != c.want || !seen[got] {
			t.Errorf("sessionErrClass(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
