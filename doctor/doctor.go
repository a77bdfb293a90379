// Package doctor checks that a host can run sandboxapi: runsc and its
// platform, cgroups, the rootfs and guest, netns and nft, disk space, the
// disk-backed homes, the store and TLS. Each check names what to fix.
package doctor

import (
	"bytes"
	"context"
	"crypto/tls"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/buildinfo"
	"github.com/sandboxapi/sandboxapi/internal/size"
	"github.com/sandboxapi/sandboxapi/rootfs"
	"github.com/sandboxapi/sandboxapi/store"
)

// Status is the outcome of a check. A warning does not fail doctor.
type Status string

// Outcomes of a check, as printed.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "FAIL"
)

// Result is the outcome of one host check; Fix says what to do.
type Result struct {
	Name   string
	Status Status
	Detail string
	Fix    string
}

// doctorCheck is one named host check.
type doctorCheck struct {
	name string
	run  func(ctx context.Context, cfg *Config) Result
}

// checks are run in order; later ones do not depend on earlier ones.
func checks() []doctorCheck {
	return []doctorCheck{
		{"build", checkBuild},
		{"runsc", checkRunsc},
		{"platform", checkPlatform},
		{"cgroups", checkCgroups},
		{"rootfs", checkRootfs},
		{"runtimes", checkRuntimes},
		{"guest", checkGuest},
		{"netns", checkNetns},
		{"nft", checkNft},
		{"disk", checkDisk},
		{"homes", checkHomes},
		{"store", checkStore},
		{"tls", checkTLS},
	}
}

// Run runs every check, prints one line per check (and the fix under
// a failure or warning) and returns the number of failures.
func Run(ctx context.Context, cfg *Config, w io.Writer) int {
	problems := 0
	for _, r := range Results(ctx, cfg) {
		fmt.Fprintf(w, "%-4s  %-8s  %s\n", r.Status, r.Name, r.Detail)
		if r.Status != OK && r.Fix != "" {
			fmt.Fprintf(w, "      %-8s  fix: %s\n", "", r.Fix)
		}
		if r.Status == Fail {
			problems++
		}
	}
	if problems == 0 {
		fmt.Fprintln(w, "host ready")
	}
	return problems
}

// Results runs every check in order and returns their outcomes.
func Results(ctx context.Context, cfg *Config) []Result {
	cs := checks()
	out := make([]Result, 0, len(cs))
	for _, c := range cs {
		r := c.run(ctx, cfg)
		r.Name = c.name
		out = append(out, r)
	}
	return out
}

func ok(format string, a ...any) Result {
	return Result{Status: OK, Detail: fmt.Sprintf(format, a...)}
}

func fail(fix, format string, a ...any) Result {
	return Result{Status: Fail, Detail: fmt.Sprintf(format, a...), Fix: fix}
}

func warn(fix, format string, a ...any) Result {
	return Result{Status: Warn, Detail: fmt.Sprintf(format, a...), Fix: fix}
}

const runscFix = "install a static runsc: CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@v0.0.0-20260905035102-160fafc42237 && install -m 0755 ~/go/bin/runsc /usr/local/bin/runsc (or set executor.runsc)"

// checkRunsc: runsc is on PATH (or where executor.runsc says) and static. A
// dynamically linked runsc dies with "fork/exec /proc/self/exe".
func checkRunsc(ctx context.Context, cfg *Config) Result {
	bin, err := exec.LookPath(cfg.Runsc)
	if err != nil {
		return fail(runscFix, "runsc not found (%s)", cfg.Runsc)
	}
	static, err := isStaticELF(bin)
	if err != nil {
		return fail(runscFix, "%s: %v", bin, err)
	}
	if !static {
		return fail(runscFix, "%s is dynamically linked (has PT_INTERP); runsc must be a static build", bin)
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return fail(runscFix, "%s --version: %v", bin, err)
	}
	// `go install .../runsc@V` leaves runsc's own version unset (it
	// prints VERSION_MISSING); the module version V is in the binary's Go
	// build information.
	ver, from, err := buildinfo.RunscVersion(bin)
	if err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return warn("install runsc with scripts/setup.sh, which records its version", "%s, static, %s; gVisor version unknown: %v", bin, first, err)
	}
	if buildinfo.Runsc != "" && ver != buildinfo.Runsc {
		return warn(runscFix, "%s, static, gVisor %s (from the %s), but this sandboxapi was built for %s", bin, ver, from, buildinfo.Runsc)
	}
	return ok("%s, static, gVisor %s (from the %s)", bin, ver, from)
}

// checkBuild names this sandboxapi build: version, revision, commit and
// build time. A binary without a revision (built outside a checkout, or
// with VCS stamping off) cannot be traced to its source: a warning.
func checkBuild(ctx context.Context, cfg *Config) Result {
	in := buildinfo.Read()
	if in.Revision == buildinfo.Unknown {
		return warn("build with scripts/setup.sh (go build -buildvcs=true in a git checkout, or -ldflags -X "+
			"github.com/sandboxapi/sandboxapi/internal/buildinfo.Revision=COMMIT)", "sandboxapi %s", in)
	}
	return ok("sandboxapi %s", in)
}

// isStaticELF reports whether path is an ELF executable without a program
// interpreter.
func isStaticELF(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, fmt.Errorf("reading ELF: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// checkPlatform runs an empty sandbox on the configured platform.
func checkPlatform(ctx context.Context, cfg *Config) Result {
	bin, err := exec.LookPath(cfg.Runsc)
	if err != nil {
		return fail(runscFix, "runsc not found")
	}
	root, err := os.MkdirTemp("", "sandboxapi-doctor-")
	if err != nil {
		return fail("make the temp folder writable", "creating a runsc root: %v", err)
	}
	defer os.RemoveAll(root)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, bin, "--root", root, "--network", "none", "--platform", cfg.Platform, "do", "/bin/true")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := lastLine(stderr.String())
		return fail(fmt.Sprintf("run as root; try executor.platform: systrap (kvm needs /dev/kvm, ptrace is slowest); see `%s --platform %s do /bin/true`", bin, cfg.Platform),
			"runsc do /bin/true on platform %s failed: %v %s", cfg.Platform, err, msg)
	}
	return ok("platform %s runs a sandbox (%d ms)", cfg.Platform, time.Since(start).Milliseconds())
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// checkCgroups: the memory and pids controllers exist and a sandboxapi
// child group can be made and removed (cgroup v2 or v1).
func checkCgroups(ctx context.Context, cfg *Config) Result {
	const fix = "mount cgroups (systemd does), run as root, and enable the memory and pids controllers"
	probe := fmt.Sprintf("sandboxapi-doctor-%d", os.Getpid())
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		have := strings.Fields(string(b))
		for _, c := range []string{"memory", "pids"} {
			if !contains(have, c) {
				return fail(fix, "cgroup v2 without the %s controller", c)
			}
		}
		if err := mkRmdir(filepath.Join("/sys/fs/cgroup", probe)); err != nil {
			return fail(fix, "cgroup v2 not writable: %v", err)
		}
		return ok("cgroup v2 with memory and pids, writable")
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if err := mkRmdir(filepath.Join("/sys/fs/cgroup", c, probe)); err != nil {
			return fail(fix, "cgroup v1 %s controller not usable: %v", c, err)
		}
	}
	return ok("cgroup v1 memory, pids and cpu, writable")
}

func mkRmdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	return os.Remove(dir)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// rootfsBinaries are paths every rootfs holds whatever its languages,
// relative to the rootfs (each language's are checked by checkRuntimes).
func rootfsBinaries() []string {
	return []string{"bin/sh", "usr/bin/bash"}
}

// checkRootfs: a complete build is found, its binaries are there, its
// versions.json parses and the sandbox user exists.
func checkRootfs(ctx context.Context, cfg *Config) Result {
	const fix = "run `sandboxapi rootfs build` (about a minute and 1.5 GB), or point executor.rootfs at a complete build"
	dir, versions, err := rootfs.Find(cfg.Rootfs, "")
	if err != nil {
		return fail(fix, "no rootfs: %v", err)
	}
	build := filepath.Dir(dir)
	if _, err := os.Stat(filepath.Join(build, ".complete")); err != nil && cfg.Rootfs == "" {
		return fail(fix, "%s has no .complete mark (a build that did not finish)", build)
	}
	var missing []string
	for _, b := range rootfsBinaries() {
		if _, err := os.Lstat(filepath.Join(dir, b)); err != nil {
			missing = append(missing, "/"+b)
		}
	}
	if len(missing) > 0 {
		return fail(fix, "%s lacks %s", dir, strings.Join(missing, ", "))
	}
	passwd, err := os.ReadFile(filepath.Join(dir, "etc", "passwd"))
	if err != nil || !bytes.Contains(passwd, []byte("\nsandbox:x:1000:")) {
		return fail(fix, "%s has no sandbox user (uid 1000)", dir)
	}
	b, err := os.ReadFile(versions)
	var v map[string]json.RawMessage
	if err != nil || json.Unmarshal(b, &v) != nil || len(v) == 0 {
		return warn(fix, "%s: no readable versions.json; /v1/runtimes will show no versions", dir)
	}
	return ok("%s (%d languages)", dir, len(v))
}

// checkRuntimes: the rootfs holds every language and version of the
// runtimes file (its versions file lists each, and each one's commands
// are there); a version past its upstream end of life is a warning.
func checkRuntimes(ctx context.Context, cfg *Config) Result {
	const rebuild = "rebuild the rootfs from the runtimes file: `sandboxapi rootfs build`, then restart (docs/operations.md)"
	dir, versions, err := rootfs.Find(cfg.Rootfs, "")
	if err != nil {
		return fail(rebuild, "no rootfs: %v", err)
	}
	var have map[string]map[string]string
	if b, err := os.ReadFile(versions); err != nil || json.Unmarshal(b, &have) != nil {
		return fail(rebuild, "%s has no versions per language (a rootfs built before versions could be chosen)", versions)
	}
	var missing []string
	for _, r := range cfg.Runtimes {
		if have[r.Language][r.Version] == "" {
			missing = append(missing, r.Language+" "+r.Version)
			continue
		}
		for _, p := range r.Programs {
			if !inRootfs(dir, p, r.Path) {
				missing = append(missing, fmt.Sprintf("%s %s: %s", r.Language, r.Version, p))
			}
		}
	}
	if len(missing) > 0 {
		return fail(rebuild, "%s lacks %s", dir, strings.Join(missing, ", "))
	}
	if len(cfg.Runtimes) == 0 {
		return fail("check the runtimes file: `sandboxapi validate`", "no runtimes file loaded")
	}
	if past := PastEOL(cfg.Runtimes, have, time.Now()); len(past) > 0 {
		return warn("move to a supported release: change its entry in the runtimes file, `sandboxapi rootfs build`, rolling restart (docs/operations.md)",
			"past upstream end of life: %s", strings.Join(past, ", "))
	}
	return ok("%d versions of %d languages, none past end of life", len(cfg.Runtimes), len(have))
}

// PastEOL describes the runtimes whose upstream end of life is before
// now's day, with the exact versions in have (language -> version ->
// exact).
func PastEOL(rs []Runtime, have map[string]map[string]string, now time.Time) []string {
	var past []string
	for _, r := range rs {
		if !r.EOL.IsZero() && now.After(r.EOL.Add(24*time.Hour)) {
			past = append(past, fmt.Sprintf("%s %s %s (end of life %s)", r.Language, r.Version, have[r.Language][r.Version], r.EOL.Format(time.DateOnly)))
		}
	}
	return past
}

// inRootfs reports whether program is in the rootfs at dir: an absolute
// path as it is, a bare name in one of path's folders (a symlink counts).
func inRootfs(dir, program string, path []string) bool {
	if strings.HasPrefix(program, "/") {
		_, err := os.Lstat(filepath.Join(dir, program))
		return err == nil
	}
	for _, p := range path {
		if _, err := os.Lstat(filepath.Join(dir, p, program)); err == nil {
			return true
		}
	}
	return false
}

// checkGuest: the in-sandbox helper binary is where the executor looks.
func checkGuest(ctx context.Context, cfg *Config) Result {
	const fix = "build it with `CGO_ENABLED=0 go build -trimpath -o bin/sandboxapi-guest ./cmd/sandboxapi-guest`, put it beside sandboxapi or set executor.guest_binary"
	candidates := []string{}
	if g := cfg.GuestBinary; g != "" {
		candidates = append(candidates, g)
	} else {
		if exe, err := os.Executable(); err == nil {
			candidates = append(candidates, filepath.Join(filepath.Dir(exe), "sandboxapi-guest"))
		}
		if p, err := exec.LookPath("sandboxapi-guest"); err == nil {
			candidates = append(candidates, p)
		}
		if root, err := repoRoot(); err == nil {
			candidates = append(candidates, filepath.Join(root, "bin", "sandboxapi-guest"))
		}
	}
	for _, c := range candidates {
		if static, err := isStaticELF(c); err == nil {
			if !static {
				return fail(fix, "%s is dynamically linked; it runs inside the rootfs and must be static", c)
			}
			return ok("%s, static", c)
		}
	}
	return fail(fix, "sandboxapi-guest not found (looked at %s)", strings.Join(candidates, ", "))
}

// repoRoot finds the source tree's root above the working directory, for
// running doctor from a checkout (go run, tests).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// egressTool reports a missing tool as a failure when egress is on and as
// a warning when it is off (sessions with network are refused then).
func egressTool(cfg *Config, fix, format string, a ...any) Result {
	if cfg.EgressEnabled {
		return fail(fix, format, a...)
	}
	r := warn(fix, format, a...)
	r.Detail += " (egress is off; needed only for sessions with network)"
	return r
}

// checkNetns: ip can make and delete a network namespace.
func checkNetns(ctx context.Context, cfg *Config) Result {
	const fix = "apt-get install iproute2; run as root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
	ip, err := exec.LookPath("ip")
	if err != nil {
		return egressTool(cfg, fix, "ip (iproute2) not found")
	}
	name := fmt.Sprintf("sbxdoctor%d", os.Getpid())
	if out, err := exec.CommandContext(ctx, ip, "netns", "add", name).CombinedOutput(); err != nil {
		return egressTool(cfg, fix, "ip netns add: %v %s", err, lastLine(string(out)))
	}
	if out, err := exec.CommandContext(ctx, ip, "netns", "delete", name).CombinedOutput(); err != nil {
		return egressTool(cfg, fix, "ip netns delete %s: %v %s", name, err, lastLine(string(out)))
	}
	return ok("%s can add and delete network namespaces", ip)
}

// checkNft: nft runs and can list the ruleset.
func checkNft(ctx context.Context, cfg *Config) Result {
	const fix = "apt-get install nftables; run as root (CAP_NET_ADMIN)"
	nft, err := exec.LookPath("nft")
	if err != nil {
		return egressTool(cfg, fix, "nft (nftables) not found")
	}
	if out, err := exec.CommandContext(ctx, nft, "list", "tables").CombinedOutput(); err != nil {
		return egressTool(cfg, fix, "nft list tables: %v %s", err, lastLine(string(out)))
	}
	// A trial table with a base chain and a rule of the kind the fences
	// use: listing alone does not show the kernel takes them.
	table := fmt.Sprintf("sbxdoctor%d", os.Getpid())
	script := fmt.Sprintf("add table inet %[1]s\nadd chain inet %[1]s in { type filter hook input priority 0; policy accept; }\nadd rule inet %[1]s in iifname \"sbxdoctor*\" tcp dport 1 drop\ndelete table inet %[1]s\n", table)
	cmd := exec.CommandContext(ctx, nft, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = exec.Command(nft, "delete", "table", "inet", table).Run()
		return egressTool(cfg, fix, "nft trial table: %v %s", err, lastLine(string(out)))
	}
	return ok("%s takes tables, base chains and rules", nft)
}

// checkHomes: a session home can be made the way the executor makes one,
// a small ext4 image loop-mounted nosuid,nodev, written and removed. A host
// without mkfs.ext4 or free loop devices would pass every other check and
// then fail every session create.
func checkHomes(ctx context.Context, cfg *Config) Result {
	const fix = "apt-get install e2fsprogs mount; run as root; make sure loop devices are available (modprobe loop; losetup -f)"
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fail(fix, "%s not found", tool)
		}
	}
	dir, err := os.MkdirTemp(existingParent(cfg.DataDir), ".doctor-home-")
	if err != nil {
		return fail(fix, "making a scratch folder: %v", err)
	}
	defer os.RemoveAll(dir)
	img, mnt := filepath.Join(dir, "home.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return fail(fix, "making a mount point: %v", err)
	}
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(16 << 20)
		f.Close()
	}
	if err != nil {
		return fail(fix, "making a 16 MiB image: %v", err)
	}
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", img).CombinedOutput(); err != nil {
		return fail(fix, "mkfs.ext4: %v %s", err, lastLine(string(out)))
	}
	if out, err := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", img, mnt).CombinedOutput(); err != nil {
		return fail(fix, "loop mount: %v %s", err, lastLine(string(out)))
	}
	werr := os.WriteFile(filepath.Join(mnt, "probe"), []byte("ok"), 0o600)
	if out, err := exec.CommandContext(ctx, "umount", mnt).CombinedOutput(); err != nil {
		return fail(fix, "umount %s: %v %s", mnt, err, lastLine(string(out)))
	}
	if werr != nil {
		return fail(fix, "writing into a mounted home: %v", werr)
	}
	return ok("an ext4 home image can be made, loop-mounted and written (executor.home_size %s)", cfg.HomeSize)
}

// Disk thresholds for the data dir: homes are loop images of
// executor.home_size each.
const (
	diskFailBytes = 1 << 30
	diskWarnBytes = 5 << 30
)

// checkDisk: free space where the data dir lives.
func checkDisk(ctx context.Context, cfg *Config) Result {
	dir := existingParent(cfg.DataDir)
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fail("check that data_dir is on a mounted file system", "statfs %s: %v", dir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	home, _ := size.Parse(cfg.HomeSize)
	need := home * int64(cfg.MaxSandboxes)
	const fix = "free space under data_dir or move it (data_dir, --data-dir); each session home is an image of executor.home_size"
	n, committed, used := homesOnDisk(cfg.DataDir)
	homes := fmt.Sprintf("%d session homes (running or hibernated) use %s, sized %s in all", n, humanBytes(used), humanBytes(committed))
	if d := cfg.MaxDisk; d != "" && d != "0" {
		homes += " (executor.max_disk " + d + ")"
	}
	switch {
	case free < diskFailBytes:
		return fail(fix, "%s: %s free, less than 1 GiB; %s", dir, humanBytes(free), homes)
	case free < diskWarnBytes || free < need:
		return warn(fix, "%s: %s free; %d homes of %s need %s; %s", dir, humanBytes(free), cfg.MaxSandboxes, cfg.HomeSize, humanBytes(need), homes)
	case free < committed-used:
		return warn(fix, "%s: %s free, less than the homes may still grow by; %s", dir, humanBytes(free), homes)
	}
	return ok("%s: %s free; %s", dir, humanBytes(free), homes)
}

// homesOnDisk counts the session home images under dataDir: how many, the
// sum of their sizes and the blocks they take.
func homesOnDisk(dataDir string) (n int, committed, used int64) {
	imgs, _ := filepath.Glob(filepath.Join(dataDir, "sessions", "*", "home.img"))
	for _, p := range imgs {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil {
			n++
			committed += st.Size
			used += st.Blocks * 512
		}
	}
	return n, committed, used
}

func existingParent(dir string) string {
	for {
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}

// checkStore: the data dir is writable and, if the SQLite store exists, it
// opens, passes quick_check and takes a write lock. It works while the
// server runs (WAL); it creates neither the data dir nor the store.
func checkStore(ctx context.Context, cfg *Config) Result {
	const fix = "create data_dir owned by the service user (mkdir -p -m 0700), or point --data-dir elsewhere"
	fi, err := os.Stat(cfg.DataDir)
	if errors.Is(err, os.ErrNotExist) {
		parent := existingParent(cfg.DataDir)
		if err := writable(parent); err != nil {
			return fail(fix, "%s does not exist and %s is not writable: %v", cfg.DataDir, parent, err)
		}
		return warn(fix, "%s does not exist yet; serve will create it", cfg.DataDir)
	}
	if err != nil || !fi.IsDir() {
		return fail(fix, "%s is not a folder: %v", cfg.DataDir, err)
	}
	if err := writable(cfg.DataDir); err != nil {
		return fail(fix, "%s is not writable: %v", cfg.DataDir, err)
	}
	if cfg.StoreURL != "" {
		// PostgreSQL: it opens (and is migrated, as serve would) and
		// answers; its health is the database operator's.
		st, err := store.OpenURL(ctx, cfg.StoreURL, "")
		if err != nil {
			return fail("check store.url (SANDBOXAPI_STORE_URL), the server and the role's rights", "PostgreSQL store: %v", err)
		}
		defer st.Close()
		var v int
		if err := st.DB().QueryRowContext(ctx, "SELECT MAX(v) FROM schema_version").Scan(&v); err != nil {
			return fail("check the PostgreSQL server", "PostgreSQL store: %v", err)
		}
		return ok("%s writable; PostgreSQL store opens at schema version %d", cfg.DataDir, v)
	}
	path := filepath.Join(cfg.DataDir, "sandboxapi.db")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return ok("%s writable; no store yet (serve creates it)", cfg.DataDir)
	}
	const dbFix = "restore the store from a backup (docs/operations.md) or move it aside and let serve create a new one"
	st, err := store.Open(ctx, path)
	if err != nil {
		return fail(dbFix, "opening %s: %v", path, err)
	}
	defer st.Close()
	var res string
	if err := st.DB().QueryRowContext(ctx, "PRAGMA quick_check").Scan(&res); err != nil || res != "ok" {
		return fail(dbFix, "%s quick_check: %v %s", path, err, res)
	}
	conn, err := st.DB().Conn(ctx)
	if err != nil {
		return fail(dbFix, "%s: %v", path, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fail("stop whatever holds the store's write lock, or fix its permissions", "%s: taking the write lock: %v", path, err)
	}
	_, _ = conn.ExecContext(ctx, "ROLLBACK")
	return ok("%s opens, passes quick_check and is writable", path)
}

func writable(dir string) error {
	f, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// checkTLS: the tls block can work: files load and are not about to
// expire, the storage folder for certmagic is writable.
func checkTLS(ctx context.Context, cfg *Config) Result {
	t := cfg.TLS
	switch t.Mode {
	case "", "off":
		return ok("off: plain HTTP on %s", cfg.Listen)
	case "files":
		const fix = "point tls.cert_file and tls.key_file at a readable PEM chain and its key; renew before expiry"
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return fail(fix, "loading %s and %s: %v", t.CertFile, t.KeyFile, err)
		}
		left := time.Until(pair.Leaf.NotAfter)
		if left <= 0 {
			return fail(fix, "%s expired on %s", t.CertFile, pair.Leaf.NotAfter.Format(time.DateOnly))
		}
		if left < 14*24*time.Hour {
			return warn(fix, "%s expires in %d days", t.CertFile, int(left.Hours()/24))
		}
		return ok("files: %s valid until %s", t.CertFile, pair.Leaf.NotAfter.Format(time.DateOnly))
	}
	dir := t.StorageDir
	if err := writable(existingParent(dir)); err != nil {
		return fail("make tls.storage_dir (default <data_dir>/tls) writable", "%s: %v", dir, err)
	}
	return ok("%s: certificates kept in %s", t.Mode, dir)
}
