package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeBuild makes a rootfs build folder: a tree with files and the
// versions file.
func fakeBuild(t *testing.T, files []string, versions string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range append(files, "bin/sh") {
		p := filepath.Join(dir, "rootfs", f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"versions.json": versions, ".complete": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCheckRuntimes(t *testing.T) {
	node := func(v string, eol time.Time) Runtime {
		return Runtime{Language: "javascript", Version: v, Path: []string{"/opt/node/" + v + "/bin", "/usr/bin"}, Programs: []string{"node"}, EOL: eol}
	}
	later := time.Now().AddDate(1, 0, 0)
	both := `{"javascript": {"24": "24.22.3", "22": "22.23.5"}}`
	files := []string{"opt/node/24/bin/node", "opt/node/22/bin/node"}
	cases := []struct {
		name     string
		files    []string
		versions string
		rts      []Runtime
		status   Status
		detail   string
	}{
		{"all there, all supported", files, both, []Runtime{node("24", later), node("22", later)}, OK, "2 versions"},
		{"one past end of life", files, both, []Runtime{node("24", later), node("22", time.Now().AddDate(0, -1, 0))}, Warn, "javascript 22 22.23.5"},
		{"a version the rootfs lacks", files, `{"javascript": {"24": "24.22.3"}}`, []Runtime{node("24", later), node("22", later)}, Fail, "javascript 22"},
		{"a command the rootfs lacks", files[:1], both, []Runtime{node("24", later), node("22", later)}, Fail, "javascript 22: node"},
		{"a rootfs of one version per language", files, `{"javascript": "20.19.2"}`, []Runtime{node("24", later)}, Fail, "versions per language"},
		{"no runtimes file", files, both, nil, Fail, "no runtimes file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{Rootfs: fakeBuild(t, tc.files, tc.versions), Runtimes: tc.rts}
			r := checkRuntimes(context.Background(), cfg)
			if r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("%s %q, want %s with %q", r.Status, r.Detail, tc.status, tc.detail)
			}
			if r.Status != OK && r.Fix == "" {
				t.Fatal("no fix")
			}
		})
	}
}

func TestPastEOLCountsTheLastDay(t *testing.T) {
	eol := time.Date(2027, 4, 30, 0, 0, 0, 0, time.UTC)
	rs := []Runtime{{Language: "javascript", Version: "22", EOL: eol}, {Language: "bash", Version: "5.2"}}
	have := map[string]map[string]string{"javascript": {"22": "22.23.5"}}
	if p := PastEOL(rs, have, eol.Add(23*time.Hour)); len(p) != 0 {
		t.Errorf("on its last day: %v", p)
	}
	if p := PastEOL(rs, have, eol.Add(25*time.Hour)); len(p) != 1 || !strings.Contains(p[0], "22.23.5 (end of life 2027-04-30)") {
		t.Errorf("the day after: %v", p)
	}
}
