package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// BenchmarkInstallFiveWheels compares installing five small wheels through
// the API (readiness gate, a fresh installer sandbox with its own fenced
// network, pip inside gVisor, atomic swap) with running the same pip
// command directly on the host against the same mirror.
//
//	go test ./internal/e2e -run XXX -bench InstallFiveWheels -benchtime 5x
func BenchmarkInstallFiveWheels(b *testing.B) {
	if _, err := exec.LookPath("python3"); err != nil {
		b.Skip("no python3 on the host")
	}
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
	b.Run("api", func(b *testing.B) {
		for range b.N {
			r := s.do("POST", "/v1/sessions/"+id+"/install", key, map[string]any{"manager": "pip", "packages": names})
			if r.status != 200 {
				b.Fatalf("install: %d %s", r.status, r.body)
			}
		}
	})
	req := filepath.Join(dir, "req.txt")
	os.WriteFile(req, []byte(strings.Join(reqs, "\n")+"\n"), 0o644)
	b.Run("host-pip", func(b *testing.B) {
		for i := range b.N {
			target := filepath.Join(dir, fmt.Sprintf("t%d", i))
			cmd := exec.Command("python3", "-m", "pip", "install", "--isolated", "--no-input", "--only-binary=:all:", "--no-deps",
				"--no-build-isolation", "--require-hashes", "--no-cache-dir", "--no-compile", "--disable-pip-version-check",
				"--index-url", s.url("/mirror/pypi/simple/"), "--target", target, "-r", req)
			cmd.Env = append(os.Environ(), "PIP_CONFIG_FILE=/dev/null")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("host pip: %v %s", err, out)
			}
		}
	})
}
