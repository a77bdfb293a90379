package mirror

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/golden")

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", "golden", name)
	if *update {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("reading golden %s (run with -update): %v", p, err)
	}
	if string(want) != got {
		t.Errorf("%s differs from golden:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestGoldenIndexOutput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m.now = func() time.Time { return fixed }
	for _, f := range []string{"testdata/wheels/wheel-0.43.0-py3-none-any.whl", "testdata/wheels/example-21.12-py3-none-any.whl"} {
		if _, err := m.AddFile(ctx, f, nil); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile("testdata/npm/is-number-7.0.0.tgz")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddNPMTarball(ctx, data, "testdata", nil); err != nil {
		t.Fatal(err)
	}
	srv := serveMirror(t, m)
	host := strings.TrimPrefix(srv.URL, "http://")
	norm := func(s string) string { return strings.ReplaceAll(s, host, "HOST") }
	golden(t, "simple-root.html", get(t, srv.URL+"/mirror/pypi/simple/", "text/html").body)
	golden(t, "simple-wheel.html", get(t, srv.URL+"/mirror/pypi/simple/wheel/", "text/html").body)
	golden(t, "simple-wheel.json", get(t, srv.URL+"/mirror/pypi/simple/wheel/", simpleJSON).body)
	golden(t, "packument-is-number.json", norm(get(t, srv.URL+"/mirror/npm/is-number", "application/json").body))
	golden(t, "packument-is-number.abbrev.json", norm(get(t, srv.URL+"/mirror/npm/is-number", npmAbbreviated).body))
}
