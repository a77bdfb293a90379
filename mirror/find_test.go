package mirror

import (
	"reflect"
	"testing"
)

func TestSplitRemoveSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mgr           Manager
		in            string
		name, version string
	}{
		{Pip, "requests", "requests", ""},
		{Pip, "requests==2.31.0", "requests", "2.31.0"},
		{Pip, "a==", "a", ""},
		{NPM, "left-pad", "left-pad", ""},
		{NPM, "left-pad@1.3.0", "left-pad", "1.3.0"},
		{NPM, "@scope/pkg", "@scope/pkg", ""},
		{NPM, "@scope/pkg@2.0.0", "@scope/pkg", "2.0.0"},
		{NPM, "x==1", "x==1", ""},
	}
	for _, tt := range tests {
		if n, v := SplitRemoveSpec(tt.mgr, tt.in); n != tt.name || v != tt.version {
			t.Errorf("%s %q: %q %q, want %q %q", tt.mgr, tt.in, n, v, tt.name, tt.version)
		}
	}
}

func TestParseStatus(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{"admitted": true, "REFUSED": true, "quarantined": true, "removed": true, "": false, "pending": false, "admitted ": false} {
		if _, ok := ParseStatus(in); ok != want {
			t.Errorf("ParseStatus(%q) ok = %t", in, ok)
		}
	}
}

// TestFind filters a real catalogue by manager, status and part of a name.
func TestFind(t *testing.T) {
	m := newTestMirror(t, true)
	ctx := t.Context()
	for _, spec := range []wheelSpec{{name: "alpha_one", version: "1.0"}, {name: "beta", version: "2.0"}} {
		fn, data := buildWheel(t, spec)
		if _, err := m.AddWheel(ctx, fn, data, "test", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Remove(ctx, Pip, "beta", "2.0"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		f    Filter
		want int
	}{
		{"all", Filter{}, 2},
		{"pip", Filter{Manager: Pip}, 2},
		{"npm", Filter{Manager: NPM}, 0},
		{"removed", Filter{Status: StatusRemoved}, 1},
		{"name part, any case", Filter{Name: "ALPHA"}, 1},
		{"name and status", Filter{Name: "alpha", Status: StatusRemoved}, 0},
	}
	for _, tt := range tests {
		got, err := m.Find(ctx, tt.f)
		if err != nil || got == nil || len(got) != tt.want {
			t.Errorf("%s: %d artifacts (%v), want %d", tt.name, len(got), err, tt.want)
		}
	}
	counts, err := m.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []Count{{Manager: Pip, Status: StatusAdmitted, N: 1}, {Manager: Pip, Status: StatusRemoved, N: 1}}
	if !reflect.DeepEqual(counts, want) {
		t.Errorf("Counts = %+v, want %+v", counts, want)
	}
}
