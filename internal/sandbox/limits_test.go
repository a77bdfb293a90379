package sandbox

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCheckEnv(t *testing.T) {
	t.Parallel()
	many := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("V%d", i)] = "x"
		}
		return m
	}
	cases := []struct {
		name string
		env  map[string]string
		ok   bool
	}{
		{name: "none", ok: true},
		{name: "plain", env: map[string]string{"A": "1", "_b2": ""}, ok: true},
		{name: "at the count cap", env: many(MaxEnvVars), ok: true},
		{name: "over the count cap", env: many(MaxEnvVars + 1)},
		{name: "name at its cap", env: map[string]string{"A" + strings.Repeat("b", MaxEnvNameBytes-1): ""}, ok: true},
		{name: "name over its cap", env: map[string]string{"A" + strings.Repeat("b", MaxEnvNameBytes): ""}},
		{name: "a 4 MB name", env: map[string]string{strings.Repeat("A", 4<<20): ""}},
		{name: "empty name", env: map[string]string{"": "x"}},
		{name: "leading digit", env: map[string]string{"1A": "x"}},
		{name: "equals sign", env: map[string]string{"A=B": "x"}},
		{name: "NUL in a name", env: map[string]string{"A\x00": "x"}},
		{name: "newline in a name", env: map[string]string{"A\n": "x"}},
		{name: "unicode name", env: map[string]string{"Ä": "x"}},
		{name: "reserved PATH", env: map[string]string{"PATH": "/evil"}},
		{name: "reserved, other case", env: map[string]string{"ld_preload": "/x.so"}},
		{name: "NUL in a value", env: map[string]string{"A": "x\x00y"}},
		{name: "size at the cap", env: map[string]string{"A": strings.Repeat("x", MaxEnvBytes-1)}, ok: true},
		{name: "size over the cap", env: map[string]string{"A": strings.Repeat("x", MaxEnvBytes)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckEnv(tc.env)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckEnv: %v, want ok %v", err, tc.ok)
			}
			if err != nil && (!errors.Is(err, ErrInvalid) || len(err.Error()) > 300) {
				t.Fatalf("CheckEnv: %.400v (%d bytes), want a short ErrInvalid", err, len(err.Error()))
			}
		})
	}
}

func TestQuote(t *testing.T) {
	t.Parallel()
	if got := Quote("abc"); got != `"abc"` {
		t.Fatalf("Quote(abc) = %s", got)
	}
	long := strings.Repeat("é", 1000)
	got := Quote(long)
	if len(got) > 2*MaxErrorEcho+40 || !strings.HasSuffix(got, "... (2000 bytes)") {
		t.Fatalf("Quote of 2000 bytes = %s", got)
	}
}
