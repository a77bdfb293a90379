package guest

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// removeWork takes away whatever a program left in its work folder: the
// staging area is only as large as one call needs, so a folder left
// behind would fill it across calls. (On the host the test runs with the
// host's rights; the sandbox test in the executor package covers a guest
// without CAP_DAC_OVERRIDE.)
func TestRemoveWork(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		build func(t *testing.T, dir string)
	}{
		{name: "empty folder", build: func(t *testing.T, dir string) {}},
		{name: "files and folders", build: func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "main.py"), 0o644)
			mustMkdir(t, filepath.Join(dir, "a", "b", "c"))
			mustWrite(t, filepath.Join(dir, "a", "b", "c", "d"), 0o600)
			mustWrite(t, filepath.Join(dir, "a", "e"), 0o644)
		}},
		{name: "folders without any permission", build: func(t *testing.T, dir string) {
			mustMkdir(t, filepath.Join(dir, "locked", "inner"))
			mustWrite(t, filepath.Join(dir, "locked", "inner", "f"), 0o000)
			chmod(t, filepath.Join(dir, "locked", "inner"), 0o000)
			chmod(t, filepath.Join(dir, "locked"), 0o000)
			chmod(t, dir, 0o500)
		}},
		{name: "sticky and read-only folders", build: func(t *testing.T, dir string) {
			mustMkdir(t, filepath.Join(dir, "s"))
			mustWrite(t, filepath.Join(dir, "s", "f"), 0o444)
			chmod(t, filepath.Join(dir, "s"), 0o1555)
		}},
		{name: "links out of the folder are not followed", build: func(t *testing.T, dir string) {
			if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(outside, "keep"), filepath.Join(dir, "f")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "special files", build: func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "many entries in one folder", build: func(t *testing.T, dir string) {
			for i := range 3000 {
				mustWrite(t, filepath.Join(dir, "f"+strconv.Itoa(i)), 0o644)
			}
		}},
		{name: "nesting deeper than PATH_MAX", build: func(t *testing.T, dir string) {
			// Made with relative mkdirs, as a program would: no path to
			// the bottom fits in PATH_MAX.
			name := strings.Repeat("d", 200)
			script := "cd " + dir + " && for i in $(seq 40); do mkdir " + name + " && cd " + name + " || exit 1; done && touch bottom && chmod 0 ."
			if out, err := exec.Command("bash", "-c", script).CombinedOutput(); err != nil {
				t.Fatalf("making the tree: %v %s", err, out)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "x1")
			mustMkdir(t, dir)
			tc.build(t, dir)
			if err := removeWork(dir); err != nil {
				t.Fatalf("removeWork: %v", err)
			}
			if ents, _ := os.ReadDir(root); len(ents) != 0 {
				t.Fatalf("left behind: %v", ents)
			}
			if b, err := os.ReadFile(filepath.Join(outside, "keep")); err != nil || string(b) != "x" {
				t.Fatalf("a file outside the folder changed: %q %v", b, err)
			}
		})
	}
	if err := removeWork(filepath.Join(t.TempDir(), "gone")); err != nil {
		t.Fatalf("a folder that is gone already: %v", err)
	}
}

// The compile step writes its temporary files into the work folder, which
// is in the staging area: a /tmp that the user filled must not fail every
// later compile of the session (gcc and go build write to $TMPDIR).
func TestCompileTempFilesGoToTheWorkFolder(t *testing.T) {
	h := newHost()
	h.workRoot = t.TempDir()
	f := &fakeSpawn{kills: installFakeKills(t, h), steps: []step{{d: 1}, {d: 1}}}
	var envs [][]string
	spawn := func(cmd *exec.Cmd, in io.Reader, out, errw io.Writer, onStart func(int)) (syscall.WaitStatus, error) {
		envs = append(envs, cmd.Env)
		return f.spawn(cmd, in, out, errw, onStart)
	}
	req := &Request{
		Files:   []File{{Path: "main.c", Content: []byte("int main(){}")}},
		Compile: []string{"cc", "{dir}/main.c"}, Argv: []string{"{dir}/main"},
		Env: []string{"PATH=/bin", "TMPDIR=/tmp", "LANG=C"}, TimeoutMS: 5000,
		UID: os.Getuid(), GID: os.Getgid(),
	}
	res := h.serveRequest(req, spawn, strings.NewReader(""), io.Discard, io.Discard)
	if res.Status != "ok" || len(envs) != 2 {
		t.Fatalf("result %+v after %d steps", res, len(envs))
	}
	dir := strings.TrimSuffix(f.spawned[1][0], "/main")
	if !strings.HasPrefix(dir, h.workRoot+"/") {
		t.Fatalf("work folder %q is not under %s", dir, h.workRoot)
	}
	if want := []string{"PATH=/bin", "LANG=C", "TMPDIR=" + dir}; !slices.Equal(envs[0], want) {
		t.Fatalf("compile env %q, want %q", envs[0], want)
	}
	// The program itself keeps the caller's TMPDIR.
	if !slices.Equal(envs[1], req.Env) {
		t.Fatalf("run env %q, want %q", envs[1], req.Env)
	}
	if ents, _ := os.ReadDir(h.workRoot); len(ents) != 0 {
		t.Fatalf("work folder left behind: %v", ents)
	}
}

func mustWrite(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	chmod(t, p, mode)
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := syscall.Chmod(p, uint32(mode)); err != nil {
		t.Fatal(err)
	}
}
