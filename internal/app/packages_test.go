package app

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/store"
)

// TestMirrorPackagesCheck runs the adapter over a real mirror (SQLite,
// OSV import, real wheel and npm tarball from the mirror's test data).
func TestMirrorPackagesCheck(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := mirror.DefaultConfig()
	cfg.StoreDir = filepath.Join(dir, "mirror")
	m, err := mirror.New(ctx, cfg, st.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	td := filepath.Join(testenv.ModuleRoot(), "mirror", "testdata")
	if _, err := m.ImportOSV(ctx, filepath.Join(td, "osv")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"wheels/wheel-0.43.0-py3-none-any.whl", "wheels/example-21.12-py3-none-any.whl", "npm/is-number-7.0.0.tgz"} {
		if _, err := m.AddFile(ctx, filepath.Join(td, f), nil); err != nil {
			t.Fatalf("adding %s: %v", f, err)
		}
	}
	if _, err := m.Remove(ctx, mirror.Pip, "example", "21.12"); err != nil {
		t.Fatal(err)
	}
	p := mirrorPackages{m}

	cases := []struct {
		name    string
		manager string
		spec    string
		want    api.PackageVerdict
	}{
		{"newest admitted", "pip", "wheel", api.PackageVerdict{Name: "wheel", Version: "0.43.0", Available: true, Status: "admitted", OSV: "clean", Install: "wheel==0.43.0", Versions: []string{"0.43.0"}}},
		{"pinned, PEP 503 name", "pip", "Wheel==0.43.0", api.PackageVerdict{Name: "wheel", Version: "0.43.0", Available: true, Status: "admitted", OSV: "clean", Install: "wheel==0.43.0", Versions: []string{"0.43.0"}}},
		{"unknown version", "pip", "wheel==9.9", api.PackageVerdict{Name: "wheel", Version: "9.9", Status: "not_found", OSV: "unknown", Versions: []string{"0.43.0"}}},
		{"removed", "pip", "example==21.12", api.PackageVerdict{Name: "example", Version: "21.12", Status: "removed", OSV: "clean", Versions: []string{}}},
		{"unknown", "pip", "numpy", api.PackageVerdict{Name: "numpy", Status: "not_found", OSV: "unknown", Versions: []string{}}},
		{"range is invalid", "pip", "wheel>=1", api.PackageVerdict{Status: "invalid", OSV: "unknown", Versions: []string{}}},
		{"npm pinned", "npm", "is-number@7.0.0", api.PackageVerdict{Name: "is-number", Version: "7.0.0", Available: true, Status: "admitted", OSV: "clean", Install: "is-number@7.0.0", Versions: []string{"7.0.0"}}},
		{"npm scoped unknown", "npm", "@scope/thing", api.PackageVerdict{Name: "@scope/thing", Status: "not_found", OSV: "unknown", Versions: []string{}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.Check(ctx, tc.manager, []string{tc.spec})
			if err != nil {
				t.Fatal(err)
			}
			g := got[0]
			w := tc.want
			if g.Spec != tc.spec || g.Name != w.Name || g.Version != w.Version || g.Available != w.Available || g.Status != w.Status ||
				g.OSV != w.OSV || g.Install != w.Install || !slices.Equal(g.Versions, w.Versions) {
				t.Fatalf("got %+v, want %+v", g, w)
			}
			if !g.Available && len(g.Reasons) == 0 {
				t.Fatalf("no reasons for %+v", g)
			}
		})
	}
}

// TestMirrorPackagesCheckStripped: check_packages (POST /v1/packages/check)
// says what a package needs with it, and that the mirror serves it as
// published (nothing stripped).
func TestMirrorPackagesCheckStripped(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := mirror.DefaultConfig()
	cfg.StoreDir = filepath.Join(dir, "mirror")
	m, err := mirror.New(ctx, cfg, st.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	td := filepath.Join(testenv.ModuleRoot(), "mirror", "testdata")
	if _, err := m.ImportOSV(ctx, filepath.Join(td, "osv")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"npm/is-number-7.0.0.tgz", "npm/debug-4.3.7.tgz"} {
		if _, err := m.AddFile(ctx, filepath.Join(td, f), nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := mirrorPackages{m}.Check(ctx, "npm", []string{"debug@4.3.7", "is-number"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0].Stripped) != 0 || got[0].Dependencies["ms"] != "^2.1.3" {
		t.Errorf("debug: stripped %v, dependencies %v", got[0].Stripped, got[0].Dependencies)
	}
	if len(got[1].Stripped) != 0 || got[1].Dependencies != nil {
		t.Errorf("is-number (served as published): stripped %v, dependencies %v", got[1].Stripped, got[1].Dependencies)
	}
}
