package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// BenchmarkE2B compares, in one run and from the same client runtime
// (node), E2B's SDK with sandboxapi's own API on the same server:
// commands.run('true') against an execute of `true` in a bash session
// (the goal: within 1.2x) and against an execute of what E2B's
// command runs, `bash -l -c true` (a login shell; the rootfs's
// /etc/profile starts no program, Debian's started two), and
// Sandbox.create against a session create. Samples alternate, one of
// each at a time, so both see the same load (testdata/e2b_bench.cjs).
// Run with:
//
//	go test ./internal/e2e -run '^$' -bench E2B -benchtime 1x
func BenchmarkE2B(b *testing.B) {
	sdk := e2bSDK(b)
	for i := 0; i < b.N; i++ {
		benchE2B(b, sdk)
	}
}

func benchE2B(b *testing.B, sdk string) {
	// No warm pool: both creates are cold, neither takes the other's
	// pooled sandbox.
	s := startServerB(b, "executor:\n  warm_pool: 0\n  home_size: 64M\n")
	key := s.key("MEGA")
	sess := s.session(key, "bash")
	rounds, creates := benchSamples(100), max(10, benchSamples(100)/5)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(testenv.ModuleRoot(), "internal", "e2e", "testdata", "e2b_bench.cjs"))
	cmd.Env = append(os.Environ(), "E2B_SDK="+sdk, "E2B_API_URL="+s.url("/e2b"), "E2B_SANDBOX_URL="+s.url("/e2b/sandbox"),
		"E2B_API_KEY="+key, "API_URL="+s.url(""), "SESSION="+sess, "ROUNDS="+strconv.Itoa(rounds),
		"CREATE_ROUNDS="+strconv.Itoa(creates), "E2B_DOMAIN=invalid.example")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("the benchmark's script failed: %v\n%s\nserver log:\n%s", err, stderr.String(), tail(s.logs.String(), 40))
	}
	var res struct {
		SDKRun, APIExec, APILogin, SDKCreate, APICreate []float64
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil || len(res.SDKRun) != rounds || len(res.SDKCreate) != creates {
		b.Fatalf("the script's answer %q: %v", out, err)
	}
	s.stop()
	durs := func(v []float64) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x * float64(time.Millisecond))
		}
		return d
	}
	report := func(name, metric string, sdkSide, ours []float64) {
		e, o := durs(sdkSide), durs(ours)
		ratio := ms(pct(e, .5)) / ms(pct(o, .5))
		fmt.Printf("%-34s e2b p50 %7.1f ms p99 %7.1f ms | ours p50 %7.1f ms p99 %7.1f ms | ratio p50 %.2fx p99 %.2fx\n",
			name, ms(pct(e, .5)), ms(pct(e, .99)), ms(pct(o, .5)), ms(pct(o, .99)), ratio, ms(pct(e, .99))/ms(pct(o, .99)))
		b.ReportMetric(ratio, metric)
	}
	report("commands.run('true') vs execute", "run-ratio-p50", res.SDKRun, res.APIExec)
	// The same process on both sides: what the adapter and the SDK add.
	report("commands.run vs execute bash -l -c", "run-login-ratio-p50", res.SDKRun, res.APILogin)
	report("Sandbox.create vs session create", "create-ratio-p50", res.SDKCreate, res.APICreate)
}
