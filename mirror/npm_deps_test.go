package mirror

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// depsNPM is a package whose package.json lists deps under "dependencies".
func depsNPM(t testing.TB, name, version string, deps map[string]string) []byte {
	t.Helper()
	b, err := json.Marshal(deps)
	if err != nil {
		t.Fatal(err)
	}
	return plainNPM(t, name, version, `, "dependencies": `+string(b))
}

// manyDeps returns n dependencies dep-0 ... dep-(n-1), each at rng.
func manyDeps(n int, rng string) map[string]string {
	d := make(map[string]string, n)
	for i := range n {
		d[fmt.Sprintf("dep-%d", i)] = rng
	}
	return d
}

// TestSanitizeNPMDependencyLimits: hostile dependency metadata (a range of
// thousands of alternatives, thousands of dependencies) is refused at
// admission with a reason that names the limit; packages at the limits
// pass.
func TestSanitizeNPMDependencyLimits(t *testing.T) {
	t.Parallel()
	l := DefaultConfig().Limits
	hugeRange := strings.TrimSuffix(strings.Repeat("^1.0.0 || ", 3000), " || ") // ~30 KB, 3,000 alternatives
	orRange := strings.TrimSuffix(strings.Repeat("1 || ", 12000), " || ")       // ~60 KB
	tests := []struct {
		name string
		deps map[string]string
		want string // "" admits
	}{
		{name: "3000 alternatives", deps: map[string]string{"ms": hugeRange}, want: "over the limit of 256 (mirror.limits.max_range_bytes)"},
		{name: "60 KB range", deps: map[string]string{"ms": orRange}, want: "has a range of"},
		{name: "range padded with spaces", deps: map[string]string{"ms": strings.Repeat(" ", 300) + "1"}, want: "max_range_bytes"},
		{name: "20000 dependencies", deps: manyDeps(20000, "1"), want: "20000 dependencies, over the limit of 1000 (mirror.limits.max_dependencies)"},
		{name: "one over the count", deps: manyDeps(1001, "1"), want: "max_dependencies"},
		{name: "huge dependency name", deps: map[string]string{strings.Repeat("a", 70000): "1"}, want: "bad dependency"},
		{name: "at the count", deps: manyDeps(1000, "^1.0.0")},
		{name: "range of 256 bytes", deps: map[string]string{"ms": strings.Repeat("1", 250) + ".0.0 x"[:6]}},
		{name: "ordinary", deps: map[string]string{"ms": "^2.1.3", "debug": "~4 || >=5.1 <6"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := SanitizeNPM(depsNPM(t, "hostile", "1.0.0", tc.deps), l)
			if tc.want == "" {
				if err != nil || len(p.Dependencies) != len(tc.deps) {
					t.Fatalf("refused or lost dependencies: %v", err)
				}
				return
			}
			if err == nil || !IsArchiveProblem(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a refusal containing %q", err, tc.want)
			}
			if len(err.Error()) > 400 {
				t.Errorf("reason is %d bytes: the hostile input leaks into it", len(err.Error()))
			}
		})
	}
}

// TestAddNPMHostileDependenciesRefused: through the real mirror (SQLite),
// the hostile packages are stored as refused with the reason, which the
// listing shows; the catalogue gives the installer nothing to check.
func TestAddNPMHostileDependenciesRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	orRange := strings.TrimSuffix(strings.Repeat("1 || ", 12000), " || ")
	for _, tc := range []struct {
		data []byte
		want string
	}{
		{depsNPM(t, "long-range", "1.0.0", map[string]string{"ms": orRange}), "max_range_bytes"},
		{depsNPM(t, "many-deps", "1.0.0", manyDeps(20000, "^1.0.0")), "max_dependencies"},
	} {
		a, err := m.AddNPMTarball(ctx, tc.data, "test", nil)
		if err == nil || a.Status != StatusRefused {
			t.Fatalf("admitted: %+v %v", a, err)
		}
		if !strings.Contains(strings.Join(a.Reasons, "; "), tc.want) {
			t.Errorf("reasons %v, want %q", a.Reasons, tc.want)
		}
	}
	as, err := m.List(ctx, NPM)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, a := range as {
		if a.Status == StatusRefused && strings.Contains(strings.Join(a.Reasons, "; "), "mirror.limits.max_") {
			n++
		}
		if a.Status == StatusAdmitted {
			t.Errorf("admitted %s@%s", a.Name, a.Version)
		}
	}
	if n != 2 {
		t.Errorf("listing shows %d refusals with the limit, want 2: %+v", n, as)
	}
}

// FuzzNPMDependencies: whatever "dependencies" holds, dependencies()
// never panics, and what it admits is within the limits and parses (or is
// refused as a range) without panicking.
func FuzzNPMDependencies(f *testing.F) {
	f.Add(`{"ms": "^2.1.3"}`, 3, 16)
	f.Add(`{"a": "1 || 2 || 3 || 4 || 5 || 6", "b": ">= 1 <2"}`, 1, 8)
	f.Add(`{"a": "   1"}`, 5, 2)
	f.Add(`{"@s/a": "x", "b": null}`, 5, 256)
	f.Add(`[]`, 1, 1)
	f.Fuzz(func(t *testing.T, raw string, maxDeps, maxRange int) {
		l := DefaultConfig().Limits
		l.MaxDependencies = 1 + abs(maxDeps)%2000
		l.MaxRangeBytes = 1 + abs(maxRange)%MaxNPMRangeBytes
		deps, err := dependencies(map[string]json.RawMessage{"dependencies": json.RawMessage(raw)}, nil, l)
		if err != nil {
			if !IsArchiveProblem(err) {
				t.Fatalf("not a refusal: %v", err)
			}
			if len(err.Error()) > 400 {
				t.Fatalf("reason of %d bytes", len(err.Error()))
			}
			return
		}
		if len(deps) > l.MaxDependencies {
			t.Fatalf("%d dependencies admitted over %d", len(deps), l.MaxDependencies)
		}
		for name, r := range deps {
			if len(r) > l.MaxRangeBytes || !ValidName(NPM, name) {
				t.Fatalf("admitted %q: %q", name, r)
			}
			if nr, err := ParseNPMRange(r); err == nil {
				_ = nr.Contains("1.2.3")
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		if n == -n { // math.MinInt
			return 0
		}
		return -n
	}
	return n
}

// TestDependencyLimitsValidate: the limits must be set, and a range limit
// past what the range parser reads is refused.
func TestDependencyLimitsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		deps, rng int
		want      string // "" is valid
	}{
		{"defaults", 1000, 256, ""},
		{"small", 1, 1, ""},
		{"no dependencies allowed", 0, 256, "mirror.limits.max_dependencies"},
		{"negative count", -1, 256, "mirror.limits.max_dependencies"},
		{"zero range", 1000, 0, "mirror.limits.max_range_bytes"},
		{"range past the parser", 1000, MaxNPMRangeBytes + 1, "between 1 and 256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			c.Limits.MaxDependencies, c.Limits.MaxRangeBytes = tc.deps, tc.rng
			err := c.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}
