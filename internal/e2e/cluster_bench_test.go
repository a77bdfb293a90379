package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// BenchmarkCluster measures cluster mode on the real binary (3 nodes on
// one PostgreSQL, lease clusterLease), side by side in one run:
//
//   - a forwarded call against a direct one: an execute of print(1) in one
//     session through the node that holds it and through another node,
//     alternated call by call (p50, p99 and their ratios);
//   - creates per second: the same 24 parallel creates (3 MEGA keys of 8
//     sessions, no warm pool) sent to 3 nodes against a 1-node cluster,
//     alternated round by round;
//   - takeover: SIGKILL of the node holding a session, then the time to
//     the first successful execute of that session through another node.
//
// Run with:
//
//	SANDBOXAPI_REQUIRE_RUNSC=1 SANDBOXAPI_REQUIRE_POSTGRES=1 go test ./internal/e2e -run '^$' -bench Cluster -benchtime 1x -v -timeout 30m
func BenchmarkCluster(b *testing.B) {
	for i := 0; i < b.N; i++ {
		benchClusterForwardAndTakeover(b)
		benchClusterCreates(b)
	}
}

// benchPlans are the embedded plans with MEGA's rate limit lifted, so
// that hundreds of calls a minute measure the cluster, not the limiter.
func benchPlans(b *testing.B) string {
	raw, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), "configs", "plans.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)(MEGA:(?:\n    .*)*?\n    requests_per_minute: )\d+`)
	out := re.ReplaceAllString(string(raw), "${1}1000000")
	if out == string(raw) {
		b.Fatal("no MEGA requests_per_minute in configs/plans.yaml")
	}
	return out
}

func benchClusterForwardAndTakeover(b *testing.B) {
	c := startCluster(b, clusterOptions{plans: benchPlans(b)})
	defer c.stop()
	key := c.key(b, "MEGA")
	id, owner := c.create(b, 0, key, map[string]any{"language": "python3"})
	direct := c.index(owner)
	fwd := c.other(direct+1, direct)
	run := func(i int) time.Duration {
		t0 := time.Now()
		r := c.exec(b, i, key, id, "print(1)")
		d := time.Since(t0)
		if r.json(b)["stdout"] != "1\n" || servedBy(r) != owner {
			b.Fatalf("execute through %s: served by %s: %s", c.names[i], servedBy(r), r.body)
		}
		return d
	}
	for k := 0; k < 10; k++ { // warm connections and caches
		run(direct)
		run(fwd)
	}
	const calls = 200
	var dd, fd []time.Duration
	for k := 0; k < calls; k++ {
		if k%2 == 0 {
			dd = append(dd, run(direct))
			fd = append(fd, run(fwd))
		} else {
			fd = append(fd, run(fwd))
			dd = append(dd, run(direct))
		}
	}
	b.ReportMetric(ms(pct(dd, .5)), "direct_p50_ms")
	b.ReportMetric(ms(pct(dd, .99)), "direct_p99_ms")
	b.ReportMetric(ms(pct(fd, .5)), "forwarded_p50_ms")
	b.ReportMetric(ms(pct(fd, .99)), "forwarded_p99_ms")
	b.ReportMetric(ms(pct(fd, .5))-ms(pct(dd, .5)), "forward_overhead_p50_ms")
	b.ReportMetric(ms(pct(fd, .5))/ms(pct(dd, .5)), "forwarded_over_direct_p50")
	b.ReportMetric(ms(pct(fd, .99))/ms(pct(dd, .99)), "forwarded_over_direct_p99")
	b.Logf("execute of print(1), %d calls each, alternated: direct (%s) p50 %.1f ms p99 %.1f ms; forwarded (%s → %s) p50 %.1f ms p99 %.1f ms; ratio p50 %.2f p99 %.2f",
		calls, owner, ms(pct(dd, .5)), ms(pct(dd, .99)), c.names[fwd], owner, ms(pct(fd, .5)), ms(pct(fd, .99)),
		ms(pct(fd, .5))/ms(pct(dd, .5)), ms(pct(fd, .99))/ms(pct(dd, .99)))
	c.call(b, 0, request{method: "DELETE", path: "/v1/sessions/" + id, key: key})

	// Takeover: kill the holder, call through another node until the
	// session answers.
	st := c.openStore(b)
	const rounds = 5
	var takeover, firstCall []time.Duration
	for k := 0; k < rounds; k++ {
		id, owner := c.create(b, k%len(c.nodes), key, map[string]any{"language": "python3"})
		c.exec(b, 0, key, id, "open('/home/sandbox/f','w').write('x')")
		v := c.index(owner)
		entry := c.other(v+1, v)
		before, err := st.GetNode(context.Background(), owner)
		if err != nil {
			b.Fatal(err)
		}
		c.nodes[v].kill()
		t0 := time.Now()
		tries := 0
		for {
			tries++
			t1 := time.Now()
			r, err := c.try(entry, request{method: "POST", path: "/v1/sessions/" + id + "/execute", key: key, body: map[string]any{"code": "print(open('/home/sandbox/f').read())"}})
			if err == nil && r.status == http.StatusOK && r.json(b)["stdout"] == "x\n" {
				takeover = append(takeover, time.Since(t0))
				firstCall = append(firstCall, time.Since(t1))
				b.Logf("round %d: %s killed; the session answered through %s on %s after %v (%d calls, the last took %v; resumed in %v ms)",
					k, owner, c.names[entry], servedBy(r), time.Since(t0).Round(time.Millisecond), tries, time.Since(t1).Round(time.Millisecond), r.json(b)["resumed_ms"])
				break
			}
			if time.Since(t0) > 60*time.Second {
				b.Fatalf("the session of the killed %s did not come back within 60 s: %v %d %s", owner, err, r.status, r.body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.nodes[v].start()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if n, err := st.GetNode(context.Background(), owner); err == nil && n.Epoch > before.Epoch && n.Alive(time.Now()) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s did not rejoin", owner)
			}
		}
		c.call(b, entry, request{method: "DELETE", path: "/v1/sessions/" + id, key: key})
	}
	sort.Slice(takeover, func(i, j int) bool { return takeover[i] < takeover[j] })
	b.ReportMetric(ms(clusterLease), "lease_ms")
	b.ReportMetric(ms(pct(takeover, .5)), "takeover_p50_ms")
	b.ReportMetric(ms(takeover[len(takeover)-1]), "takeover_max_ms")
	b.Logf("takeover with a %v lease over %d rounds: %v", clusterLease, rounds, takeover)
}

func benchClusterCreates(b *testing.B) {
	opts := clusterOptions{maxSandboxes: 32, plans: benchPlans(b)}
	three := startCluster(b, opts)
	defer three.stop()
	opts.nodes = 1
	one := startCluster(b, opts)
	defer one.stop()
	const perKey, keys = 8, 3
	round := func(c *cluster) (float64, map[string]int) {
		var ks []string
		for k := 0; k < keys; k++ {
			ks = append(ks, c.key(b, "MEGA"))
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		by := map[string]int{}
		var ids [][2]string
		start := make(chan struct{})
		for k := 0; k < perKey*keys; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				key := ks[k%keys]
				r, err := c.try(k%len(c.nodes), request{method: "POST", path: "/v1/sessions", key: key, body: map[string]any{"language": "bash"}})
				if err != nil || r.status != http.StatusCreated {
					b.Errorf("create %d: %v %d %s", k, err, r.status, r.body)
					return
				}
				mu.Lock()
				by[servedBy(r)]++
				ids = append(ids, [2]string{key, r.json(b)["id"].(string)})
				mu.Unlock()
			}()
		}
		t0 := time.Now()
		close(start)
		wg.Wait()
		took := time.Since(t0)
		if b.Failed() {
			b.FailNow()
		}
		for k, kid := range ids {
			c.call(b, k%len(c.nodes), request{method: "DELETE", path: "/v1/sessions/" + kid[1], key: kid[0]})
		}
		return float64(perKey*keys) / took.Seconds(), by
	}
	const rounds = 5
	var r3, r1 []float64
	for k := 0; k < rounds; k++ {
		v, by := round(three)
		r3 = append(r3, v)
		b.Logf("round %d, 3 nodes: %.2f creates/s, sessions by node %v", k, v, by)
		v, _ = round(one)
		r1 = append(r1, v)
		b.Logf("round %d, 1 node: %.2f creates/s", k, v)
	}
	b.ReportMetric(median(r3), "creates_per_s_3_nodes")
	b.ReportMetric(median(r1), "creates_per_s_1_node")
	b.ReportMetric(median(r3)/median(r1), "creates_3_over_1")
	b.Logf("%d parallel creates, median of %d rounds: 3 nodes %.2f/s, 1 node %.2f/s (ratio %.2f) on %d cores",
		perKey*keys, rounds, median(r3), median(r1), median(r3)/median(r1), runtime.NumCPU())
}

// stop ends every node with SIGTERM, in parallel, and waits.
func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, s := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-s.exited:
				return
			default:
			}
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(90 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.exited
			}
		}()
	}
	wg.Wait()
}
