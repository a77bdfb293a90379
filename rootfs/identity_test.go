package rootfs_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

// startExecutor starts an executor on real runsc and this checkout's
// rootfs, stopped when t ends.
func startExecutor(t *testing.T) *executor.Executor {
	t.Helper()
	bin := testenv.Runsc(t)
	rfs, versions, err := executor.FindRootfs(os.Getenv("SANDBOXAPI_ROOTFS"), "")
	if err != nil {
		testenv.Skip(t, "%v", err)
	}
	dir := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(dir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rts, err := executor.LoadRuntimes(configs.Runtimes, versions)
	if err != nil {
		t.Fatal(err)
	}
	e, err := executor.New(executor.Config{
		Runsc: bin, Platform: "systrap", Rootfs: rfs, VersionsFile: versions, DataDir: dir,
		GuestBinary: testenv.Guest(t), MaxSandboxes: 2, HomeBytes: 64 << 20, MemoryBytes: 256 << 20,
		Pids: 128, CPUs: 1, TmpBytes: 32 << 20, DefaultTimeout: 20 * time.Second, MaxTimeout: time.Minute,
		CompileTimeout: time.Minute, MaxOutputBytes: 64 << 10, DefaultIdleTTL: time.Minute, MaxIdleTTL: time.Hour,
		ReapInterval: time.Second,
	}, rts, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(context.Background()); err != nil {
			t.Errorf("stopping executor: %v", err)
		}
	})

	return e
}

// TestLoginShellStartsNoProgram: a login shell (how E2B's SDK runs every
// command) gets the runtimes on its PATH from /etc/profile without
// starting a program: with no PATH to find one, Debian's /etc/profile
// would fail on `id` (and its run-parts would find nothing).
func TestLoginShellStartsNoProgram(t *testing.T) {
	e := startExecutor(t)
	code := `env -i PATH=/nonexistent HOME=/home/sandbox /bin/bash -l -c 'echo "PATH=$PATH"; for c in node go python3 java; do command -v "$c" >/dev/null || echo "missing $c"; done'`
	res, err := e.ExecuteStateless(context.Background(), "k1", sandbox.ExecRequest{Language: "bash", Code: code})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != executor.StatusOK || res.Stderr != "" {
		t.Fatalf("login shell: status %s, stderr %q, stdout %q", res.Status, res.Stderr, res.Stdout)
	}
	if strings.Contains(res.Stdout, "missing") || !strings.Contains(res.Stdout, ":/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games") {
		t.Fatalf("login shell's PATH and runtimes: %q", res.Stdout)
	}
}

// TestSandboxHoldsNoHostIdentity runs a stateless call on real runsc and
// reads the identity files a program sees: none may carry the build
// host's name, resolvers or machine-id (debootstrap copies the host's
// /etc/hostname and /etc/resolv.conf into the tree it builds).
func TestSandboxHoldsNoHostIdentity(t *testing.T) {
	e := startExecutor(t)
	ctx := context.Background()
	files := []string{"/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/etc/machine-id", "/var/lib/dbus/machine-id", "/etc/mailname"}
	code := "for f in " + strings.Join(files, " ") + "; do echo \"== $f\"; cat \"$f\" 2>/dev/null; done; echo \"== uname\"; uname -n"
	res, err := e.ExecuteStateless(ctx, "k1", sandbox.ExecRequest{Language: "bash", Code: code})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != executor.StatusOK {
		t.Fatalf("reading identity files: %+v", res)
	}
	got := sections(res.Stdout)
	t.Logf("sandbox identity files:\n%s", res.Stdout)

	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	var secrets []string
	if host != "sandbox" && host != "localhost" {
		secrets = append(secrets, host)
		if short, _, _ := strings.Cut(host, "."); short != host {
			secrets = append(secrets, short)
		}
	}
	secrets = append(secrets, hostNameservers(t)...)
	if b, err := os.ReadFile("/etc/machine-id"); err == nil && strings.TrimSpace(string(b)) != "" {
		secrets = append(secrets, strings.TrimSpace(string(b)))
	}
	if len(secrets) == 0 {
		t.Fatal("the host has no name, resolver or machine-id to compare against")
	}
	for name, body := range got {
		for _, w := range words(body) {
			for _, s := range secrets {
				if w == s {
					t.Errorf("%s in the sandbox holds the host's %q:\n%s", name, s, body)
				}
			}
		}
	}
	// What the rootfs says instead: its own name, no resolver, no id.
	if strings.TrimSpace(got["/etc/hostname"]) != "sandbox" || strings.TrimSpace(got["uname"]) != "sandbox" {
		t.Errorf("hostname %q, uname -n %q: want sandbox", got["/etc/hostname"], got["uname"])
	}
	if strings.TrimSpace(got["/etc/resolv.conf"]) != "" || strings.TrimSpace(got["/etc/machine-id"]) != "" {
		t.Errorf("resolv.conf %q and machine-id %q: want both empty outside network sessions", got["/etc/resolv.conf"], got["/etc/machine-id"])
	}
	if !strings.Contains(got["/etc/hosts"], "localhost") || !strings.Contains(got["/etc/hosts"], "sandbox") {
		t.Errorf("/etc/hosts %q: want the localhost lines and the sandbox's name", got["/etc/hosts"])
	}
}

// sections splits "== name\nbody" blocks into name -> body.
func sections(out string) map[string]string {
	m := map[string]string{}
	var cur string
	for _, line := range strings.SplitAfter(out, "\n") {
		if name, ok := strings.CutPrefix(line, "== "); ok {
			cur = strings.TrimSpace(name)
			m[cur] = ""
			continue
		}
		m[cur] += line
	}
	return m
}

// words splits s on white space and the separators of the files read.
func words(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == ','
	})
}

// hostNameservers are the resolvers the host's /etc/resolv.conf names.
func hostNameservers(t *testing.T) []string {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "nameserver" {
			out = append(out, fs[1])
		}
		if len(fs) >= 2 && (fs[0] == "search" || fs[0] == "domain") {
			out = append(out, fs[1:]...)
		}
	}
	return out
}
