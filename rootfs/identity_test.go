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

// TestSandboxHoldsNoHostIdentity runs a stateless call on real runsc and
// reads the identity files a program sees: none may carry the build
// host's name, resolvers or machine-id (debootstrap copies the host's
// /etc/hostname and /etc/resolv.conf into the tree it builds).
func TestSandboxHoldsNoHostIdentity(t *testing.T) {
	bin := testenv.Runsc(t)
	rfs, versions, err := executor.FindRootfs(os.Getenv("SANDBOXAPI_ROOTFS"), "")
	if err != nil {
		testenv.Skip(t, "%v", err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
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
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Stop(context.Background()); err != nil {
			t.Errorf("stopping executor: %v", err)
		}
	}()

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
