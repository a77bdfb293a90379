package guest

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const staleName = StagingPrefix + "0123456789abcdef"

func TestIsStagingName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want bool
	}{
		{staleName, true},
		{newStagingName([8]byte{0xff, 0, 1, 2, 3, 4, 5, 6}), true},
		{StagingPrefix, false},
		{StagingPrefix + "0123456789abcde", false},   // short
		{StagingPrefix + "0123456789abcdef0", false}, // long
		{StagingPrefix + "0123456789ABCDEF", false},  // upper case
		{StagingPrefix + "0123456789abcdeg", false},
		{StagingPrefix + "0123456789abcd/f", false},
		{StagingPrefix + "0123456789abcd\x00f", false},
		{"x" + staleName, false},
		{".sbx-upload_0123456789abcdef", false},
		{"sbx-upload-0123456789abcdef", false},
		{staleName + ".keep", false},
		{"", false},
	}
	for _, tc := range tests {
		if got := IsStagingName(tc.name); got != tc.want {
			t.Errorf("IsStagingName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzIsStagingName(f *testing.F) {
	f.Add(staleName)
	f.Add(StagingPrefix + "zz")
	f.Add("a/" + staleName)
	f.Fuzz(func(t *testing.T, name string) {
		if !IsStagingName(name) {
			return
		}
		if len(name) != len(StagingPrefix)+stagingHexLen || !strings.HasPrefix(name, StagingPrefix) || strings.ContainsAny(name, "/\x00") {
			t.Fatalf("%q taken for a staging name", name)
		}
		if strings.Trim(name[len(StagingPrefix):], "0123456789abcdef") != "" {
			t.Fatalf("%q taken for a staging name", name)
		}
	})
}

func write(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// TestSweepStaging: stale staging files anywhere under the home go; what
// only looks like one, and anything reached through a symlink, stays.
func TestSweepStaging(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	home := filepath.Join(base, "home")
	outside := filepath.Join(base, "outside")
	write(t, filepath.Join(home, staleName), 1<<20)
	write(t, filepath.Join(home, "a", "b", "c", staleName), 4096)
	write(t, filepath.Join(outside, staleName), 10)
	keep := []string{
		filepath.Join(home, "data.csv"),
		filepath.Join(home, StagingPrefix+"notmine"),
		filepath.Join(home, staleName+".bak"),
		filepath.Join(home, "a", StagingPrefix+"0123456789ABCDEF"),
		filepath.Join(outside, staleName),
	}
	for _, p := range keep[:4] {
		write(t, p, 10)
	}
	// A staging name that is a directory or a symlink is not a staging
	// file; a symlinked directory is not descended into.
	dirNamed := filepath.Join(home, "d", StagingPrefix+"fedcba9876543210")
	write(t, filepath.Join(dirNamed, "inside"), 10)
	linkNamed := filepath.Join(home, "l", StagingPrefix+"00000000000000aa")
	if err := os.MkdirAll(filepath.Dir(linkNamed), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, staleName), linkNamed); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(home, "escape")); err != nil {
		t.Fatal(err)
	}
	keep = append(keep, dirNamed, filepath.Join(dirNamed, "inside"), linkNamed)

	res, err := SweepStaging(home, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 2 || !res.Complete || res.Bytes < 1<<20 {
		t.Fatalf("sweep: %+v, want 2 files, at least 1 MiB, complete", res)
	}
	for _, p := range []string{filepath.Join(home, staleName), filepath.Join(home, "a", "b", "c", staleName)} {
		if exists(p) {
			t.Errorf("%s is still there", p)
		}
	}
	for _, p := range keep {
		if !exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
	// Nothing left: a second sweep removes nothing.
	if res, err := SweepStaging(home, time.Time{}); err != nil || res.Files != 0 || !res.Complete {
		t.Fatalf("second sweep: %+v %v", res, err)
	}
}

func TestSweepStagingHostileRoots(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	real := filepath.Join(base, "real")
	write(t, filepath.Join(real, staleName), 10)
	if err := os.Symlink(real, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		root string
	}{
		{"root is a symlink", filepath.Join(base, "link")},
		{"root is missing", filepath.Join(base, "missing")},
		{"root is a file", filepath.Join(real, staleName)},
	}
	for _, tc := range tests {
		if _, err := SweepStaging(tc.root, time.Time{}); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if !exists(filepath.Join(real, staleName)) {
		t.Fatal("a sweep through a symlinked root removed a file")
	}
}

// TestSweepStagingBudget: a sweep past its deadline stops and says so.
func TestSweepStagingBudget(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	write(t, filepath.Join(home, "x", staleName), 10)
	res, err := SweepStaging(home, time.Now().Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if res.Complete || res.Files != 0 {
		t.Fatalf("sweep past its deadline: %+v, want incomplete, nothing removed", res)
	}
}

// TestSweepStagingDepth: directories deeper than the bound are left, and
// the sweep says it did not look at everything.
func TestSweepStagingDepth(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	deep := home
	for i := 0; i < sweepMaxDepth+2; i++ {
		deep = filepath.Join(deep, "d")
	}
	write(t, filepath.Join(deep, staleName), 10)
	write(t, filepath.Join(home, "d", staleName), 10)
	res, err := SweepStaging(home, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Complete || res.Files != 1 {
		t.Fatalf("deep sweep: %+v, want one file removed and incomplete", res)
	}
}

// TestUploadStopsWhenHostGoes: an upload whose host end of the channel
// closes part way (the server was killed) stops and removes its staging
// file, instead of waiting for frames that never come.
func TestUploadStopsWhenHostGoes(t *testing.T) {
	r, w, home := agentPair(t)
	go func() { _, _ = io.Copy(io.Discard, r) }() // credits, as a host reads them
	openStream(t, w, FileOpen{Stream: 1, Op: "put", Path: "/home/sandbox/big", Max: 1 << 20, UID: 1000, GID: 1000})
	_ = WriteStreamFrame(w, FrameFileData, 1, make([]byte, 4096))
	staged := func() int {
		ents, _ := os.ReadDir(home)
		n := 0
		for _, ent := range ents {
			if IsStagingName(ent.Name()) {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for staged() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no staging file for the upload")
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.(interface{ Close() error }).Close()
	for staged() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the staging file stayed after the host went")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if exists(filepath.Join(home, "big")) {
		t.Fatal("a cut upload was committed")
	}
}

// TestSweepHomeRunsAsTheOwner: the guest's sweep acts as the home's owner
// (pid 1 lacks CAP_DAC_OVERRIDE in the sandbox): it removes the owner's
// staging files, and cannot remove one in a folder only root may write.
func TestSweepHomeRunsAsTheOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch a thread's user")
	}
	home := t.TempDir()
	for _, p := range []string{filepath.Dir(home), home} { // the user must reach it
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(home, "u", staleName), 10)
	write(t, filepath.Join(home, "rootonly", staleName), 10)
	for _, p := range []string{home, filepath.Join(home, "u"), filepath.Join(home, "u", staleName), filepath.Join(home, "rootonly", staleName)} {
		if err := os.Chown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	h := newHost()
	h.homeRoot, h.anyPID = home, true
	res, err := h.sweepHome(time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 1 || exists(filepath.Join(home, "u", staleName)) {
		t.Fatalf("sweep as the owner: %+v", res)
	}
	if !exists(filepath.Join(home, "rootonly", staleName)) {
		t.Fatal("the sweep removed a file from a folder only root may write: it did not act as the owner")
	}
}
