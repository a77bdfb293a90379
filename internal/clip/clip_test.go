package clip

import (
	"strings"
	"testing"
)

func TestClip(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", LastLineMax+10)
	tests := []struct {
		name, got, want string
	}{
		{name: "tail of a short string", got: Tail("abc", 5), want: "abc"},
		{name: "tail cuts the front", got: Tail("abcdef", 2), want: "ef"},
		{name: "last line", got: LastLine("one\ntwo\n\n"), want: "two"},
		{name: "single line", got: LastLine("  only  "), want: "only"},
		{name: "empty", got: LastLine(""), want: ""},
		{name: "long last line keeps its end", got: LastLine("a\n" + long), want: long[10:]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.got != tc.want {
				t.Fatalf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}
