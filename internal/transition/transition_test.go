package transition

import (
	"errors"
	"testing"
)

type state string

func TestMove(t *testing.T) {
	t.Parallel()
	tab := Table[state]{"a": {"b"}, "b": {"a", "c"}}
	for _, tc := range []struct {
		name     string
		from, to state
		ok       bool
	}{
		{name: "listed", from: "a", to: "b", ok: true},
		{name: "back", from: "b", to: "a", ok: true},
		{name: "not listed", from: "a", to: "c"},
		{name: "to itself unlisted", from: "a", to: "a"},
		{name: "final state", from: "c", to: "a"},
		{name: "unknown state", from: "x", to: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.from
			err := tab.Move(&s, tc.to)
			switch {
			case tc.ok && (err != nil || s != tc.to):
				t.Fatalf("move %s -> %s: %v, state %s", tc.from, tc.to, err, s)
			case !tc.ok && (!errors.Is(err, ErrNotAllowed) || s != tc.from):
				t.Fatalf("move %s -> %s: err %v, state %s; want ErrNotAllowed and the state kept", tc.from, tc.to, err, s)
			}
			if tab.Allowed(tc.from, tc.to) != tc.ok {
				t.Fatalf("Allowed(%s, %s) != %v", tc.from, tc.to, tc.ok)
			}
		})
	}
}
