package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// BenchmarkInstallFiveWheels compares installing five small wheels through
// the API (readiness gate, a fresh installer sandbox with its own fenced
// network, pip inside gVisor, atomic swap) with running the same pip
// command directly on the host against the same mirror. The api run
// reports where its time went (the reply's phases_ms); the paired run
// alternates both and reports the median ratio.
//
//	go test ./internal/e2e -run '^$' -bench InstallFiveWheels -benchtime 5x
func BenchmarkInstallFiveWheels(b *testing.B) {
	py := hostPip(b)
	n := testenv.NewNet(b, 'b')
	s := startServerB(b, fmt.Sprintf(`readiness:
  interval: 1s
  stale_after: 30s
  topology_interval: 10m
installer:
  pool: %s
  table: %s
  prefix: %s
`, n.Pool, n.Table, n.Prefix))
	dir := b.TempDir()
	s.cliArgs([]string{"mirror", "osv", "import"}, filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "osv"))
	var names, reqs []string
	for i := range 5 {
		name := fmt.Sprintf("benchpkg%d", i)
		p := writeWheelTB(b, dir, name, "1.0")
		s.cliArgs([]string{"mirror", "add"}, p)
		data, _ := os.ReadFile(p)
		sum := sha256.Sum256(data)
		names = append(names, name+"==1.0")
		reqs = append(reqs, fmt.Sprintf("%s==1.0 --hash=sha256:%s", name, hex.EncodeToString(sum[:])))
	}
	key := s.key("MEGA")
	id := s.session(key, "python3")
	deadline := time.Now().Add(2 * time.Minute)
	for s.do("GET", "/readyz", "", nil).status != 200 {
		if time.Now().After(deadline) {
			b.Fatal("server never ready")
		}
		time.Sleep(250 * time.Millisecond)
	}
	req := filepath.Join(dir, "req.txt")
	os.WriteFile(req, []byte(strings.Join(reqs, "\n")+"\n"), 0o644)
	// One install through the API; its time and the reply's phases.
	api := func(b *testing.B) (time.Duration, *phases) {
		t0 := time.Now()
		r := s.do("POST", "/v1/sessions/"+id+"/install", key, map[string]any{"manager": "pip", "packages": names})
		el := time.Since(t0)
		if r.status != 200 {
			b.Fatalf("install: %d %s", r.status, r.body)
		}
		var rep struct {
			Phases *phases `json:"phases_ms"`
		}
		if err := json.Unmarshal(r.body, &rep); err != nil {
			b.Fatalf("install reply: %v %s", err, r.body)
		}
		return el, rep.Phases
	}
	// The same pip command directly on the host, into a new folder.
	runs := 0
	host := func(b *testing.B) time.Duration {
		runs++
		cmd := exec.Command(py, "-m", "pip", "install", "--isolated", "--no-input", "--only-binary=:all:", "--no-deps",
			"--no-build-isolation", "--require-hashes", "--no-cache-dir", "--no-compile", "--disable-pip-version-check",
			"--index-url", s.url("/mirror/pypi/simple/"), "--target", filepath.Join(dir, fmt.Sprintf("t%d", runs)), "-r", req)
		cmd.Env = append(os.Environ(), "PIP_CONFIG_FILE=/dev/null")
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("host pip: %v %s", err, out)
		}
		return time.Since(t0)
	}
	b.Run("api", func(b *testing.B) {
		var sum phases
		n := 0
		for range b.N {
			if _, p := api(b); p != nil {
				n++
				sum.Network += p.Network
				sum.Sandbox += p.Sandbox
				sum.Startup += p.Startup
				sum.Stage += p.Stage
				sum.Commit += p.Commit
			}
		}
		if n > 0 {
			b.ReportMetric(float64(sum.Network)/float64(n), "network-ms/op")
			b.ReportMetric(float64(sum.Sandbox)/float64(n), "sandbox-ms/op")
			b.ReportMetric(float64(sum.Startup)/float64(n), "startup-ms/op")
			b.ReportMetric(float64(sum.Stage)/float64(n), "pip-ms/op")
			b.ReportMetric(float64(sum.Commit)/float64(n), "commit-ms/op")
		}
	})
	b.Run("host-pip", func(b *testing.B) {
		for range b.N {
			host(b)
		}
	})
	// Alternating pairs see the shared machine's load alike: the ratio is
	// the median of each pair's api/host.
	b.Run("paired", func(b *testing.B) {
		var as, hs, rs []float64
		for range b.N {
			a, _ := api(b)
			h := host(b)
			as, hs, rs = append(as, a.Seconds()), append(hs, h.Seconds()), append(rs, a.Seconds()/h.Seconds())
		}
		b.ReportMetric(median(as), "api-s")
		b.ReportMetric(median(hs), "host-s")
		b.ReportMetric(median(rs), "api/host")
		// Printed, not logged: the log of a benchmark that passes is
		// not always shown.
		// The fastest of each is the least disturbed by other load.
		fmt.Printf("InstallFiveWheels paired (%d): median api %.3f s, host pip (%s) %.3f s, api/host %.2fx (range %.2f-%.2f); fastest api %.3f s, host %.3f s: %.2fx; goal at most 1.5x\n",
			b.N, median(as), py, median(hs), median(rs), slices.Min(rs), slices.Max(rs), slices.Min(as), slices.Min(hs), slices.Min(as)/slices.Min(hs))
	})
}

// phases is the reply's phases_ms (see sandbox.InstallPhases).
type phases struct {
	Network, Sandbox, Startup, Stage, Commit int64
}

// hostPip returns the host's python3 with pip, resolved to the
// interpreter itself: a wrapper such as a pyenv shim adds its own start-up
// to the baseline.
func hostPip(b *testing.B) string {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	py := strings.TrimSpace(string(out))
	if err != nil || py == "" || exec.Command(py, "-m", "pip", "--version").Run() != nil {
		b.Skip("no python3 with pip on the host")
	}
	return py
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkInstallExpressTree compares installing express 4.21.2's tree
// (72 packages from the public registry, admitted with `mirror add
// --lockfile`) through the API from its package-lock.json into a new
// session with the host's `npm ci --ignore-scripts --offline` of the same
// lockfile from a warm npm cache into a new folder, alternating the two;
// it reports the median ratio (goal: within 2x).
//
//	go test ./internal/e2e -run '^$' -bench InstallExpressTree -benchtime 5x
func BenchmarkInstallExpressTree(b *testing.B) {
	if _, err := exec.LookPath("npm"); err != nil {
		b.Skip("no npm on the host")
	}
	n := testenv.NewNet(b, 'x')
	s := startServerB(b, fmt.Sprintf(`readiness:
  interval: 1s
  stale_after: 30s
  topology_interval: 10m
installer:
  pool: %s
  table: %s
  prefix: %s
`, n.Pool, n.Table, n.Prefix))
	s.cliArgs([]string{"mirror", "osv", "import"}, filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "osv"))
	lockPath, raw, _ := expressLockfile(b)
	s.cliArgs([]string{"mirror", "add"}, "--lockfile", lockPath)
	key := s.key("MEGA")
	deadline := time.Now().Add(2 * time.Minute)
	for s.do("GET", "/readyz", "", nil).status != 200 {
		if time.Now().After(deadline) {
			b.Fatal("server never ready")
		}
		time.Sleep(250 * time.Millisecond)
	}
	dir := b.TempDir()
	cache := filepath.Join(dir, "npm-cache")
	runs := 0
	// npm ci into a new folder; the first run (online) warms the cache.
	host := func(b *testing.B, offline bool) time.Duration {
		runs++
		d := filepath.Join(dir, fmt.Sprintf("p%d", runs))
		os.MkdirAll(d, 0o755)
		for _, f := range []string{"package.json", "package-lock.json"} {
			data, _ := os.ReadFile(filepath.Join(filepath.Dir(lockPath), f))
			os.WriteFile(filepath.Join(d, f), data, 0o644)
		}
		args := []string{"ci", "--ignore-scripts", "--no-audit", "--no-fund", "--cache", cache, "--loglevel=error"}
		if offline {
			args = append(args, "--offline")
		}
		cmd := exec.Command("npm", args...)
		cmd.Dir = d
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("host npm ci: %v %s", err, out)
		}
		return time.Since(t0)
	}
	host(b, false)
	// Each install goes into a new session (made before the clock starts),
	// as npm ci goes into a new folder.
	api := func(b *testing.B) (time.Duration, *phases) {
		id := s.session(key, "javascript")
		t0 := time.Now()
		r := s.do("POST", "/v1/sessions/"+id+"/install", key, map[string]any{"manager": "npm", "lockfile": json.RawMessage(raw)})
		el := time.Since(t0)
		if r.status != 200 {
			b.Fatalf("install: %d %.2000s", r.status, r.body)
		}
		var rep struct {
			Phases *phases `json:"phases_ms"`
		}
		if err := json.Unmarshal(r.body, &rep); err != nil {
			b.Fatalf("install reply: %v %s", err, r.body)
		}
		return el, rep.Phases
	}
	b.Run("paired", func(b *testing.B) {
		var as, hs, rs []float64
		var sum phases
		for range b.N {
			a, p := api(b)
			h := host(b, true)
			as, hs, rs = append(as, a.Seconds()), append(hs, h.Seconds()), append(rs, a.Seconds()/h.Seconds())
			if p != nil {
				sum.Network += p.Network
				sum.Sandbox += p.Sandbox
				sum.Startup += p.Startup
				sum.Stage += p.Stage
				sum.Commit += p.Commit
			}
		}
		k := float64(b.N)
		b.ReportMetric(median(as), "api-s")
		b.ReportMetric(median(hs), "host-s")
		b.ReportMetric(median(rs), "api/host")
		fmt.Printf("InstallExpressTree paired (%d): median api %.3f s, host npm ci --offline %.3f s, api/host %.2fx (range %.2f-%.2f); "+
			"api phases (mean ms): network %.0f, sandbox %.0f, startup %.0f, stage %.0f, commit %.0f; goal at most 2x\n",
			b.N, median(as), median(hs), median(rs), slices.Min(rs), slices.Max(rs),
			float64(sum.Network)/k, float64(sum.Sandbox)/k, float64(sum.Startup)/k, float64(sum.Stage)/k, float64(sum.Commit)/k)
	})
}
