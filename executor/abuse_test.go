package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// abuseEnv is what an abuse case may use besides its own result: the
// executor, the case's session and the host-side markers it must not see.
type abuseEnv struct {
	e      *Executor
	id     string // the case's session
	lang   string
	marker string // path of a host file under the host's /tmp
	secret string // its content, which must never reach a sandbox
	token  string // unique per suite run, for names a case creates
}

// again runs code in the case's session; the session must still work.
func (a *abuseEnv) again(t *testing.T, code string) Result {
	t.Helper()
	res, err := a.e.Execute(context.Background(), "k1", a.id, ExecRequest{Code: code, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("session unusable after the case: %v", err)
	}
	return res
}

// alive checks that the session still runs code after the case.
func (a *abuseEnv) alive(t *testing.T) {
	t.Helper()
	code := "echo alive"
	if a.lang == "python3" {
		code = "print('alive')"
	}
	if r := a.again(t, code); r.Stdout != "alive\n" {
		t.Fatalf("session did not survive: %+v", r)
	}
}

func hostRelease(t *testing.T) string {
	t.Helper()
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

func mustContain(t *testing.T, r Result, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(r.Stdout, s) {
			t.Errorf("output lacks %q:\n%s\nstderr: %s", s, r.Stdout, r.Stderr)
		}
	}
}

func mustNotContain(t *testing.T, r Result, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if s != "" && (strings.Contains(r.Stdout, s) || strings.Contains(r.Stderr, s)) {
			t.Errorf("output leaks %q:\n%s\nstderr: %s", s, r.Stdout, r.Stderr)
		}
	}
}

// TestAbuseCorpus runs hostile programs in real sandboxes, one fresh
// session per case, and checks that each was contained, that the session
// (where it should) still works, and that the host is unchanged afterwards.
// The files API traps (symlinks, hard links, FIFOs, sockets, devices,
// dot-dot paths) are covered by TestFileHostilePaths in files_test.go.
func TestAbuseCorpus(t *testing.T) {
	t.Parallel()
	e, cfg := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	ctx := context.Background()

	// runsc keeps one shared nsfs mount per root; a first session creates
	// it, so it belongs to the baseline.
	warm := mustSession(t, e, "bash")
	if err := e.DeleteSession(ctx, "k1", warm.ID); err != nil {
		t.Fatal(err)
	}

	tok := make([]byte, 8)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	marker := filepath.Join(os.TempDir(), "sandboxapi-abuse-"+token)
	secret := "host-secret-" + token
	if err := os.WriteFile(marker, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(marker) })
	hostID, _ := os.ReadFile("/etc/machine-id")
	hostName, _ := os.Hostname()
	release := hostRelease(t)
	hostTmpBefore, _ := filepath.Glob("/tmp/*")
	before := hostResources(t, cfg)

	cases := []struct {
		name    string
		lang    string
		code    string // {{MARKER}} and {{TOKEN}} are replaced
		env     map[string]string
		timeout time.Duration
		check   func(t *testing.T, a *abuseEnv, r Result, err error)
	}{
		{
			name: "read host files",
			lang: "bash",
			code: `cat {{MARKER}} 2>&1; ls -a /tmp; cat /etc/machine-id 2>&1; echo "host=$(hostname)"
cat /etc/shadow >/dev/null 2>&1 && echo shadow-readable || echo shadow-denied
ls /proc/1/root/tmp 2>&1; cat /proc/1/root{{MARKER}} 2>&1; echo done`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				mustContain(t, r, "shadow-denied", "done")
				mustNotContain(t, r, a.secret, strings.TrimSpace(string(hostID)))
				for _, l := range strings.Split(r.Stdout, "\n") {
					if l == filepath.Base(a.marker) {
						t.Errorf("the host's /tmp is listed in the sandbox")
					}
				}
				if strings.Contains(r.Stdout, "host="+hostName+"\n") {
					t.Errorf("sandbox sees the host name %q", hostName)
				}
			},
		},
		{
			name: "write outside the home",
			lang: "bash",
			code: `for d in / /etc /usr /usr/bin /bin /lib /var /opt /root /home; do
  if touch "$d/abuse-{{TOKEN}}" 2>/dev/null; then echo "WROTE $d"; else echo "denied $d"; fi
done
echo x > /home/sandbox/ok && echo home-ok`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				mustContain(t, r, "home-ok", "denied /etc", "denied /usr")
				if strings.Contains(r.Stdout, "WROTE") {
					t.Errorf("wrote outside the home:\n%s", r.Stdout)
				}
			},
		},
		{
			name: "tmp is private per sandbox",
			lang: "bash",
			code: `echo {{TOKEN}} > /tmp/abuse-{{TOKEN}} && cat /tmp/abuse-{{TOKEN}}`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				mustContain(t, r, a.token)
				other := mustSession(t, a.e, "bash")
				defer a.e.DeleteSession(context.Background(), "k1", other.ID)
				o := run(t, a.e, other.ID, "ls -a /tmp; cat /tmp/abuse-* 2>&1; echo end", 0)
				if strings.Contains(o.Stdout, a.token) {
					t.Errorf("another session sees this session's /tmp:\n%s", o.Stdout)
				}
				if _, err := os.Stat("/tmp/abuse-" + a.token); err == nil {
					t.Errorf("the sandbox's /tmp file appeared on the host")
				}
			},
		},
		{
			name: "kernel identity is gVisor's",
			lang: "bash",
			code: `uname -r; cat /proc/version; cat /proc/cpuinfo >/dev/null && echo cpuinfo-ok; cat /proc/meminfo | head -1`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				// gVisor reports a fixed fake release (4.4.0 in older
				// releases, 4.19.0-gvisor in the pinned one), never the host's.
				if first, _, _ := strings.Cut(r.Stdout, "\n"); first != "4.4.0" && !strings.Contains(first, "gvisor") {
					t.Errorf("uname -r is not gVisor's fake release:\n%s", r.Stdout)
				}
				mustContain(t, r, "cpuinfo-ok")
				mustNotContain(t, r, release)
			},
		},
		{
			name: "no host processes visible",
			lang: "bash",
			code: `n=0; for p in /proc/[0-9]*; do n=$((n+1)); echo "$(cat $p/comm 2>/dev/null)"; done; echo "count=$n"`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				mustNotContain(t, r, "systemd", "runsc", "sshd", "sandboxapi", "executor.test", "containerd")
				var n int
				for _, l := range strings.Split(r.Stdout, "\n") {
					if strings.HasPrefix(l, "count=") {
						n = len(l) // any count line will do; the value is checked below
						if v := strings.TrimPrefix(l, "count="); len(v) > 2 {
							t.Errorf("too many processes visible: %s", v)
						}
					}
				}
				if n == 0 {
					t.Errorf("no count line:\n%s", r.Stdout)
				}
			},
		},
		{
			name: "sys and dmi probes",
			lang: "bash",
			code: `cat /sys/class/dmi/id/product_uuid /sys/class/dmi/id/board_serial /sys/class/dmi/id/product_name 2>&1; ls /sys/class/net 2>&1; ls /sys/fs/cgroup 2>&1 | head; echo done`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				mustContain(t, r, "done")
				mustNotContain(t, r, strings.TrimSpace(string(hostID)))
				if uuid, err := os.ReadFile("/sys/class/dmi/id/product_uuid"); err == nil {
					mustNotContain(t, r, strings.TrimSpace(string(uuid)))
				}
			},
		},
		{
			name: "ptrace init and the guest",
			lang: "python3",
			code: `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, target in (("pid1", 1), ("parent", os.getppid())):
    rc = libc.ptrace(16, target, 0, 0)  # PTRACE_ATTACH
    print("attach", name, rc, os.strerror(ctypes.get_errno()) if rc else "ATTACHED")
    if rc == 0:
        libc.ptrace(17, target, 0, 0)  # PTRACE_DETACH
`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				mustContain(t, r, "attach pid1 -1", "attach parent -1")
				mustNotContain(t, r, "ATTACHED")
			},
		},
		{
			// pid 1 is the agent; its stdio is the host's channel.
			name: "agent channel out of reach",
			lang: "python3",
			code: `import os
print("fds", sorted(int(f) for f in os.listdir("/proc/self/fd")))
for fd in (0, 1, 2):
    for mode in ("rb", "wb"):
        try:
            open("/proc/1/fd/%d" % fd, mode, buffering=0).close()
            print("OPENED", fd, mode)
        except OSError as e:
            print("refused", fd, mode, e.errno)
try:
    os.kill(1, 9)
    print("KILLED pid1")
except OSError as e:
    print("kill pid1 refused", e.errno)
`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				// 0-2 are the program's own pipes; the listing adds one more.
				mustContain(t, r, "fds [0, 1, 2, 3]", "refused 1 wb", "kill pid1 refused")
				mustNotContain(t, r, "OPENED", "KILLED")
				// And the agent still serves the session.
				if got := a.again(t, "print(6*7)"); got.Stdout != "42\n" {
					t.Fatalf("agent after the probe: %+v", got)
				}
			},
		},
		{
			name: "mount",
			lang: "bash",
			code: `mkdir -p /home/sandbox/m
mount -t tmpfs none /home/sandbox/m 2>&1 && echo MOUNTED || echo mount-denied
python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.mount(b"none", b"/home/sandbox/m", b"tmpfs", 0, None)
print("syscall-mount", rc, os.strerror(ctypes.get_errno()))
rc = libc.umount2(b"/home/sandbox", 2)
print("umount-home", rc)
'`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				mustContain(t, r, "mount-denied", "syscall-mount -1", "umount-home -1")
				mustNotContain(t, r, "MOUNTED")
			},
		},
		{
			name: "raw and packet sockets",
			lang: "python3",
			code: `import socket
for name, args in (("raw", (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
                   ("packet", (socket.AF_PACKET, socket.SOCK_RAW, 0x0300))):
    try:
        socket.socket(*args).close()
        print(name, "OPENED")
    except OSError as e:
        print(name, "denied", e.errno)
try:
    s = socket.create_connection(("1.1.1.1", 80), timeout=2)
    print("tcp OPENED")
except OSError as e:
    print("tcp denied")
`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				mustContain(t, r, "raw denied", "packet denied", "tcp denied")
				mustNotContain(t, r, "OPENED")
			},
		},
		{
			name: "device nodes",
			lang: "bash",
			code: `mknod /home/sandbox/mem c 1 1 2>&1 && echo MADE || echo mknod-denied
mknod /tmp/sda b 8 0 2>&1 && echo MADE || echo mknod-tmp-denied
ls /dev; cat /dev/mem 2>&1 | head -c 100; echo; echo done`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				mustContain(t, r, "mknod-denied", "mknod-tmp-denied", "done")
				mustNotContain(t, r, "MADE")
			},
		},
		{
			name: "setuid binaries give nothing",
			lang: "bash",
			code: `grep -E '^(Uid|Gid|CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status
cp /bin/bash /home/sandbox/sh && chmod u+s /home/sandbox/sh; /home/sandbox/sh -p -c 'echo "euid=$(id -u)"'
for f in $(find /usr/bin /usr/sbin -perm -4000 -type f 2>/dev/null); do echo "suid $f"; done
su -c 'echo ROOT' root </dev/null 2>&1 | head -2; echo "id=$(id -u)"`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				if r.Status != StatusOK {
					t.Errorf("status %q: %+v", r.Status, r)
				}
				mustContain(t, r, "euid=1000", "id=1000", "CapEff:\t0000000000000000")
				mustNotContain(t, r, "ROOT\n", "euid=0")
				for _, l := range strings.Split(r.Stdout, "\n") {
					if strings.HasPrefix(l, "Uid:") && strings.Contains(l, "\t0") {
						t.Errorf("root uid in %q", l)
					}
				}
			},
		},
		{
			name: "kernel keyring",
			lang: "python3",
			code: `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
# add_key("user", "abuse", "secret", 6, KEY_SPEC_SESSION_KEYRING)
rc = libc.syscall(248, b"user", b"abuse", b"secret", 6, -3)
print("add_key", rc, os.strerror(ctypes.get_errno()) if rc < 0 else "ADDED")
# keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0)
rc = libc.syscall(250, 0, -4, 0)
print("keyctl", rc, os.strerror(ctypes.get_errno()) if rc < 0 else "GOT")
`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				mustContain(t, r, "add_key -1", "keyctl -1")
				mustNotContain(t, r, "ADDED", "GOT")
			},
		},
		{
			name: "huge argv",
			lang: "bash",
			code: `big=$(head -c 4000000 /dev/zero | tr '\0' a); /bin/true "$big" 2>&1 | head -c 200; echo "rc=${PIPESTATUS[0]}"
env BIG="$big" /bin/true 2>&1 | head -c 200; echo "rc=${PIPESTATUS[0]}"`,
			timeout: 20 * time.Second,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				if err != nil {
					t.Fatalf("execute: %v", err)
				}
				// Linux says E2BIG; gVisor refuses a single 4 MB string
				// with ENAMETOOLONG first. Either way exec fails cleanly.
				if !strings.Contains(r.Stdout, "Argument list too long") && !strings.Contains(r.Stdout, "too long") {
					t.Errorf("huge argv was not refused:\n%s", r.Stdout)
				}
				if strings.Contains(r.Stdout, "rc=0") {
					t.Errorf("exec with a huge argv succeeded:\n%s", r.Stdout)
				}
				a.alive(t)
			},
		},
		{
			name: "huge environment through the API",
			lang: "bash",
			code: `echo ${#BIG}`,
			env:  map[string]string{"BIG": strings.Repeat("e", 4<<20)},
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				// Either refused up front or run with a clear error: never a
				// hang or a dead session.
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("unexpected error: %v", err)
				}
				if err == nil && r.Status == StatusOK && strings.TrimSpace(r.Stdout) != "4194304" {
					t.Errorf("environment mangled: %+v", r)
				}
				a.alive(t)
			},
		},
		{
			name:    "fork bomb",
			lang:    "bash",
			code:    `:(){ :|:& };:`,
			timeout: 5 * time.Second,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				if err != nil {
					t.Fatalf("execute: %v", err)
				}
				// The bomb detaches into the background, so the call itself
				// may end ok; what counts is that the pids limit held it,
				// the session still works and nothing survives the call.
				a.alive(t)
				n := a.again(t, `ls -d /proc/[0-9]* | wc -l`)
				if v := strings.TrimSpace(n.Stdout); len(v) > 2 {
					t.Errorf("%s processes left after the fork bomb", v)
				}
			},
		},
		{
			name: "thread bomb",
			lang: "python3",
			code: `import threading, time
n = 0
try:
    while n < 100000:
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        n += 1
except (RuntimeError, MemoryError) as e:
    print("stopped at", n)
`,
			timeout: 20 * time.Second,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				if err != nil {
					t.Fatalf("execute: %v", err)
				}
				if r.Status == StatusOK && !strings.Contains(r.Stdout, "stopped at") {
					t.Errorf("thread bomb was not limited: %+v", r)
				}
				a.alive(t)
			},
		},
		{
			name: "memory exhaustion",
			lang: "python3",
			code: `a = []
while True:
    a.append(bytearray(16 << 20))`,
			timeout: 20 * time.Second,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				if err != nil {
					t.Fatalf("execute: %v", err)
				}
				if r.Status != StatusOOM {
					t.Errorf("status %q, want oom: %+v", r.Status, r)
				}
				a.alive(t)
			},
		},
		{
			name: "disk exhaustion in home and tmp",
			lang: "bash",
			code: `dd if=/dev/zero of=/home/sandbox/fill bs=1M count=200 2>&1 | grep -o 'No space left on device'; echo "home-rc=${PIPESTATUS[0]}"
dd if=/dev/zero of=/tmp/fill bs=1M count=200 2>&1 | grep -o 'No space left on device'; echo "tmp-rc=${PIPESTATUS[0]}"
rm -f /home/sandbox/fill /tmp/fill`,
			timeout: 30 * time.Second,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				mustContain(t, r, "No space left on device", "home-rc=1", "tmp-rc=1")
				a.alive(t)
			},
		},
		{
			name: "output flood",
			lang: "bash",
			code: `yes flood & yes flood >&2; wait`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				if err != nil {
					t.Fatalf("execute: %v", err)
				}
				if r.Status != StatusOutputLimit || !r.Truncated {
					t.Errorf("status %q truncated %v, want output_limit", r.Status, r.Truncated)
				}
				if n := len(r.Stdout) + len(r.Stderr); n > 2*(64<<10) {
					t.Errorf("kept %d bytes of output, over the cap", n)
				}
				a.alive(t)
			},
		},
		{
			name:    "sleep forever after closing stdout",
			lang:    "bash",
			code:    `exec >&- 2>&-; sleep 1000`,
			timeout: 3 * time.Second,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				if err != nil {
					t.Fatalf("execute: %v", err)
				}
				if r.Status != StatusTimeout {
					t.Errorf("status %q, want timeout", r.Status)
				}
				a.alive(t)
			},
		},
		{
			name: "background processes do not outlive the call",
			lang: "bash",
			code: `nohup sleep 1001 >/dev/null 2>&1 &
setsid sh -c 'sleep 1002' </dev/null >/dev/null 2>&1 &
python3 -c '
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "1003"])
' ; echo started`,
			check: func(t *testing.T, a *abuseEnv, r Result, err error) {
				mustContain(t, r, "started")
				if r.Status != StatusOK {
					t.Errorf("status %q: %+v", r.Status, r)
				}
				n := a.again(t, `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c 'sleep 100[123]' || true`)
				if strings.TrimSpace(n.Stdout) != "0" {
					t.Errorf("background processes survived into the next call: %q", n.Stdout)
				}
			},
		},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustSession(t, e, tc.lang)
			// Deleting must work whatever the case left running, also
			// when the case failed.
			t.Cleanup(func() {
				if err := e.DeleteSession(ctx, "k1", s.ID); err != nil {
					t.Errorf("deleting session: %v", err)
				}
			})
			a := &abuseEnv{e: e, id: s.ID, lang: tc.lang, marker: marker, secret: secret, token: token}
			code := strings.NewReplacer("{{MARKER}}", marker, "{{TOKEN}}", token).Replace(tc.code)
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			start := time.Now()
			r, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: code, Timeout: timeout, Env: tc.env})
			if took := time.Since(start); took > timeout+15*time.Second {
				t.Errorf("call took %v with a %v timeout", took, timeout)
			}
			if err != nil && tc.env == nil {
				t.Fatalf("execute: %v", err)
			}
			tc.check(t, a, r, err)
			t.Logf("status=%s exit=%d signal=%s duration=%dms truncated=%v", r.Status, r.ExitCode, r.Signal, r.DurationMS, r.Truncated)
		})
	}

	after := hostResources(t, cfg)
	// Cgroups are host-wide and other executors may share the machine:
	// compare what belongs to this data dir.
	before.cgroups, after.cgroups = 0, 0
	if after != before {
		t.Errorf("host resources changed: before %+v after %+v", before, after)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != secret {
		t.Errorf("host marker changed: %q %v", b, err)
	}
	hostTmpAfter, _ := filepath.Glob("/tmp/*")
	seen := map[string]bool{}
	for _, p := range hostTmpBefore {
		seen[p] = true
	}
	for _, p := range hostTmpAfter {
		if !seen[p] && strings.Contains(p, token) {
			t.Errorf("sandbox code created %s on the host", p)
		}
	}
	for _, d := range []string{"/", "/etc", "/usr", "/tmp"} {
		if _, err := os.Lstat(filepath.Join(d, "abuse-"+token)); err == nil {
			t.Errorf("sandbox code created %s on the host", filepath.Join(d, "abuse-"+token))
		}
	}
}
