package guest

import (
	"os"
	"path/filepath"
	"testing"
)

// A command is found on the request's PATH (its last one), first folder
// first, never in a relative folder, and only as an executable file.
func TestLookPathUsesTheRequestsPath(t *testing.T) {
	dir := t.TempDir()
	mk := func(p string, mode os.FileMode) string {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	n22 := mk("node22/bin/node", 0o755)
	n26 := mk("node26/bin/node", 0o755)
	mk("plain/bin/node", 0o644)
	if err := os.Mkdir(filepath.Join(dir, "isdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "isdir", "node"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, cmd string
		env       []string
		want      string
	}{
		{"first folder first", "node", []string{"PATH=" + dir + "/node22/bin:" + dir + "/node26/bin"}, n22},
		{"the last PATH counts", "node", []string{"PATH=" + dir + "/node22/bin", "PATH=" + dir + "/node26/bin"}, n26},
		{"not executable is skipped", "node", []string{"PATH=" + dir + "/plain/bin:" + dir + "/node26/bin"}, n26},
		{"a folder is skipped", "node", []string{"PATH=" + dir + "/isdir:" + dir + "/node22/bin"}, n22},
		{"relative folders are skipped", "node", []string{"PATH=node22/bin:" + dir + "/node26/bin"}, n26},
		{"not found comes back as it is", "node", []string{"PATH=" + dir + "/nothing"}, "node"},
		{"no PATH", "node", nil, "node"},
		{"a path is kept", "./main", []string{"PATH=" + dir + "/node22/bin"}, "./main"},
		{"an absolute path is kept", "/tmp/x/main", []string{"PATH=" + dir + "/node22/bin"}, "/tmp/x/main"},
		{"empty", "", []string{"PATH=" + dir + "/node22/bin"}, ""},
	}
	for _, tc := range cases {
		if got := lookPath(tc.cmd, tc.env); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// FuzzLookPath: whatever the name and PATH, the answer is the name itself
// or an absolute, executable file of that name in one of PATH's absolute
// folders; never a panic.
func FuzzLookPath(f *testing.F) {
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "node"), nil, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Add("node", dir)
	f.Add("node", "rel:"+dir)
	f.Add("../node", dir)
	f.Add("", "")
	f.Add("node", "::"+dir+"/..//")
	f.Fuzz(func(t *testing.T, name, path string) {
		got := lookPath(name, []string{"PATH=" + path})
		if got == name {
			return
		}
		if !filepath.IsAbs(got) || filepath.Base(got) != name {
			t.Fatalf("lookPath(%q, %q) = %q", name, path, got)
		}
		fi, err := os.Stat(got)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			t.Fatalf("lookPath(%q, %q) = %q, not an executable file", name, path, got)
		}
	})
}
