package executor

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// execOK runs code in session id and fails the test on an error (a 413
// "the files do not fit" was what a full /tmp once gave every call).
func execOK(t *testing.T, e *Executor, id, code, want string) Result {
	t.Helper()
	r, err := e.Execute(context.Background(), "k1", id, ExecRequest{Code: code, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("execute %q: %v", firstLine(code), err)
	}
	if want != "" && !strings.Contains(r.Stdout, want) {
		t.Fatalf("execute %q: stdout %q lacks %q (status %s, stderr %q)", firstLine(code), r.Stdout, want, r.Status, r.Stderr)
	}
	return r
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// A program that fills the session's /tmp (or uses up its inodes) must
// not brick the session: the next call is staged where the user cannot
// write, and it can free the space.
func TestFullTmpDoesNotBrickSession(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	tests := []struct {
		name  string
		lang  string
		fill  string // leaves /tmp full, printing "full"
		alive string // prints "alive" with /tmp still full
		free  string // frees /tmp, printing "freed"
	}{
		{
			name:  "bash dd until ENOSPC",
			lang:  "bash",
			fill:  "dd if=/dev/zero of=/tmp/keep bs=1M 2>&1 | grep -q 'No space left' && echo full",
			alive: "echo alive",
			free:  "rm -rf /tmp/keep && echo freed",
		},
		{
			name: "python that fails with ENOSPC",
			lang: "python3",
			fill: `print("full", flush=True)
with open("/tmp/keep", "wb") as f:
    while True:
        f.write(b"\0" * (1 << 20))`,
			alive: "print('alive')",
			free:  "import os; os.remove('/tmp/keep'); print('freed')",
		},
		{
			name: "python that uses up the inodes of /tmp",
			lang: "python3",
			fill: `import os
os.mkdir("/tmp/many")
n = 0
try:
    while n < 20000:
        open("/tmp/many/%d" % n, "w").close()
        n += 1
    with open("/tmp/keep", "wb") as f:
        while True:
            f.write(b"\0" * (1 << 20))
except OSError as e:
    print("full", n, e)`,
			alive: "print('alive')",
			free:  "import shutil, os; shutil.rmtree('/tmp/many'); os.remove('/tmp/keep'); print('freed')",
		},
		{
			// gcc writes its temporary files to $TMPDIR: the compile step
			// must not need the user's /tmp.
			name: "c compile after a full tmp",
			lang: "c",
			fill: `#include <stdio.h>
int main(void) {
	static char buf[1 << 20];
	FILE *f = fopen("/tmp/keep", "wb");
	while (f && fwrite(buf, 1, sizeof buf, f) == sizeof buf && fflush(f) == 0) {}
	puts("full");
	return 0;
}`,
			alive: `#include <stdio.h>
int main(void) { puts("alive"); return 0; }`,
			free: `#include <stdio.h>
int main(void) { if (remove("/tmp/keep") == 0) puts("freed"); return 0; }`,
		},
		{
			// go build keeps its work folder in $TMPDIR.
			name:  "go build after a full tmp",
			lang:  "go",
			fill:  "package main\nimport (\"fmt\"; \"os\")\nfunc main() { f, _ := os.Create(\"/tmp/keep\"); b := make([]byte, 1<<20); for { if _, err := f.Write(b); err != nil { fmt.Println(\"full\", err); return } } }",
			alive: "package main\nimport \"fmt\"\nfunc main() { fmt.Println(\"alive\") }",
			free:  "package main\nimport (\"fmt\"; \"os\")\nfunc main() { if os.Remove(\"/tmp/keep\") == nil { fmt.Println(\"freed\") } }",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustSession(t, e, tc.lang)
			defer e.DeleteSession(context.Background(), "k1", s.ID)
			r := execOK(t, e, s.ID, tc.fill, "full")
			t.Logf("fill: status %s, stdout %q", r.Status, r.Stdout)
			execOK(t, e, s.ID, tc.alive, "alive")
			// An upload into the home does not need /tmp either.
			if _, err := e.files.PutFile(context.Background(), "k1", s.ID, "up.txt", strings.NewReader("uploaded"), 8); err != nil {
				t.Fatalf("upload with /tmp full: %v", err)
			}
			if _, b, err := getFile(e, s.ID, "up.txt"); err != nil || string(b) != "uploaded" {
				t.Fatalf("download with /tmp full: %q %v", b, err)
			}
			execOK(t, e, s.ID, tc.free, "freed")
			execOK(t, e, s.ID, tc.alive, "alive")
		})
	}
}

// With both the home and /tmp full, a call still runs, an upload fails
// with a clear error (not a half-written file), and freeing space heals.
func TestFullHomeAndTmp(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	execOK(t, e, s.ID, `cat /dev/zero > /home/sandbox/fill 2>/dev/null || echo home-full; cat /dev/zero > /tmp/keep 2>/dev/null || echo tmp-full`, "home-full\ntmp-full")
	execOK(t, e, s.ID, "echo alive", "alive")
	big := bytes.Repeat([]byte("u"), 1<<20)
	if _, err := e.files.PutFile(context.Background(), "k1", s.ID, "up.bin", bytes.NewReader(big), int64(len(big))); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("upload into a full home: %v, want ErrTooLarge", err)
	}
	execOK(t, e, s.ID, "rm /home/sandbox/fill /tmp/keep && echo freed", "freed")
	if _, err := e.files.PutFile(context.Background(), "k1", s.ID, "up.bin", bytes.NewReader(big), int64(len(big))); err != nil {
		t.Fatalf("upload after freeing: %v", err)
	}
	execOK(t, e, s.ID, "wc -c < /home/sandbox/up.bin", strconv.Itoa(len(big)))
}

// The staging area is the guest's: the user cannot write to it, move it
// or remove it; and what a program leaves in its own work folder (even
// in folders it locked) is gone before the next call, so filling the
// area through it does not carry over.
func TestStagingAreaIsTheGuests(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	r := execOK(t, e, s.ID, `touch /tmp/.sbx/x 2>/dev/null || echo no-write
mkdir /tmp/.sbx/y 2>/dev/null || echo no-mkdir
mv /tmp/.sbx /tmp/moved 2>/dev/null || echo no-move
rm -rf /tmp/.sbx 2>/dev/null; test -d /tmp/.sbx && echo still-there
ls /tmp/.sbx >/dev/null 2>&1 || echo no-list
echo staged-in="$(dirname "$0")"`, "")
	for _, want := range []string{"no-write", "no-mkdir", "no-move", "still-there", "no-list", "staged-in=/tmp/.sbx/"} {
		if !strings.Contains(r.Stdout, want) {
			t.Fatalf("stdout %q lacks %q (stderr %q)", r.Stdout, want, r.Stderr)
		}
	}
	// Fill the staging area through the work folder, behind a folder the
	// guest cannot read, three times over: each call starts with it empty.
	for i := range 3 {
		execOK(t, e, s.ID, `d=$(dirname "$0"); mkdir -p "$d/lock/deeper"
dd if=/dev/zero of="$d/lock/deeper/fill" bs=1M 2>&1 | grep -q 'No space left' && echo full
chmod 0 "$d/lock/deeper" "$d/lock"; chmod 500 "$d"`, "full")
		r := execOK(t, e, s.ID, `df -k /tmp/.sbx | awk 'NR==2 {print "used=" $3}'`, "used=")
		used, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(r.Stdout), "used=")))
		if err != nil || used > 1024 {
			t.Fatalf("round %d: the staging area holds %q KiB after the filling call", i, r.Stdout)
		}
	}
	// Plain calls leave nothing either: the folder root, this call's
	// folder and its code file are all the inodes in use, however many
	// calls ran before (each call once left its folder behind).
	for range 5 {
		execOK(t, e, s.ID, "echo hi", "hi")
	}
	r = execOK(t, e, s.ID, `df -i /tmp/.sbx | awk 'NR==2 {print "inodes=" $3}'`, "inodes=")
	if got := strings.TrimSpace(r.Stdout); got != "inodes=3" {
		t.Fatalf("staging area after 6 calls: %s, want inodes=3", got)
	}
}
