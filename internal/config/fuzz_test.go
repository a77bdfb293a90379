package config

import "testing"

// FuzzParseSize checks the size parser never panics and never returns a
// negative size without an error.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"64MiB", "1G", "0", "-1", "1.5GiB", "9999999999999999999TiB", "", "k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}
