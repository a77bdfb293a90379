package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

// BenchmarkCluster measures cluster mode on the real binary (3 nodes on
// one PostgreSQL, lease clusterLease), each comparison side by side in one
// run:
//
//   - a forwarded call against a direct one, on one session, through the
//     node that holds it and through another node, alternated call by
//     call: an execute of print(1) (200 each), a files GET of 1 MiB (100
//     each) and a streamed execute of print(1), to its first stdout event
//     (100 each); p50, p99 and their ratios;
//   - takeover: SIGKILL of the node holding a session, then the time to
//     the first successful execute of that session through another node,
//     split into the wait for the dead node's lease and the resume;
//   - drain hand-over: SIGTERM of the node holding a session while a
//     client calls it through another node: the time to the first call
//     served by another node, the longest call, and calls that failed;
//   - creates per second: the same 24 parallel creates (3 MEGA keys of 8
//     sessions, no warm pool) sent to a 3-node cluster against a 1-node
//     one, alternated round by round; per-create p50 and p99, failures.
//
// Run with:
//
//	SANDBOXAPI_REQUIRE_RUNSC=1 SANDBOXAPI_REQUIRE_POSTGRES=1 go test ./internal/e2e -run '^$' -bench Cluster -benchtime 1x -v -timeout 30m
func BenchmarkCluster(b *testing.B) {
	for i := 0; i < b.N; i++ {
		func() {
			c := startCluster(b, clusterOptions{plans: benchPlans(b)})
			defer c.stop()
			key := c.key(b, "MEGA")
			benchClusterForward(b, c, key)
			benchClusterTakeover(b, c, key)
			benchClusterDrain(b, c, key)
		}()
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

// sideBySide reports p50 and p99 of direct and forwarded samples of one
// kind of call, and their ratios.
func sideBySide(b *testing.B, name string, direct, fwd []time.Duration) {
	b.ReportMetric(ms(pct(direct, .5)), name+"_direct_p50_ms")
	b.ReportMetric(ms(pct(direct, .99)), name+"_direct_p99_ms")
	b.ReportMetric(ms(pct(fwd, .5)), name+"_forwarded_p50_ms")
	b.ReportMetric(ms(pct(fwd, .99)), name+"_forwarded_p99_ms")
	b.ReportMetric(ms(pct(fwd, .5))/ms(pct(direct, .5)), name+"_forwarded_over_direct_p50")
	b.ReportMetric(ms(pct(fwd, .99))/ms(pct(direct, .99)), name+"_forwarded_over_direct_p99")
	b.Logf("%s, %d calls each, alternated: direct p50 %.1f ms p99 %.1f ms; forwarded p50 %.1f ms p99 %.1f ms; overhead p50 %.1f ms; ratio p50 %.2f p99 %.2f",
		name, len(direct), ms(pct(direct, .5)), ms(pct(direct, .99)), ms(pct(fwd, .5)), ms(pct(fwd, .99)),
		ms(pct(fwd, .5))-ms(pct(direct, .5)), ms(pct(fwd, .5))/ms(pct(direct, .5)), ms(pct(fwd, .99))/ms(pct(direct, .99)))
}

// alternate runs call on the direct and the forwarding node n times each,
// alternating which goes first, and returns both series.
func alternate(n int, call func(direct bool) time.Duration) (direct, fwd []time.Duration) {
	for k := 0; k < n; k++ {
		if k%2 == 0 {
			direct = append(direct, call(true))
			fwd = append(fwd, call(false))
		} else {
			fwd = append(fwd, call(false))
			direct = append(direct, call(true))
		}
	}
	return direct, fwd
}

func benchClusterForward(b *testing.B, c *cluster, key string) {
	id, owner := c.create(b, 0, key, map[string]any{"language": "python3"})
	defer c.call(b, 0, request{method: "DELETE", path: "/v1/sessions/" + id, key: key})
	d := c.index(owner)
	f := c.other(d+1, d)
	b.Logf("session held by %s, forwarded through %s", owner, c.names[f])
	via := func(direct bool) int {
		if direct {
			return d
		}
		return f
	}
	execute := func(direct bool) time.Duration {
		t0 := time.Now()
		r := c.exec(b, via(direct), key, id, "print(1)")
		took := time.Since(t0)
		if r.json(b)["stdout"] != "1\n" || servedBy(r) != owner {
			b.Fatalf("execute: served by %s: %s", servedBy(r), r.body)
		}
		return took
	}
	alternate(10, execute) // warm connections and caches
	dd, fd := alternate(200, execute)
	sideBySide(b, "execute", dd, fd)

	blob := make([]byte, 1<<20)
	_, _ = rand.Read(blob)
	if r := c.call(b, d, request{method: "PUT", path: filesURL(id, "path", "/home/sandbox/blob"), key: key, body: blob}); r.status != http.StatusOK {
		b.Fatalf("upload: %d %s", r.status, r.body)
	}
	download := func(direct bool) time.Duration {
		t0 := time.Now()
		r := c.call(b, via(direct), request{method: "GET", path: filesURL(id, "path", "/home/sandbox/blob"), key: key})
		took := time.Since(t0)
		if r.status != http.StatusOK || !bytes.Equal(r.body, blob) {
			b.Fatalf("download: %d, %d bytes", r.status, len(r.body))
		}
		return took
	}
	dd, fd = alternate(100, download)
	sideBySide(b, "files_get_1MiB", dd, fd)

	firstEvent := func(direct bool) time.Duration {
		ev := c.stream(b, via(direct), key, id, "print(1)")
		if ev.firstAt == 0 || servedBy(ev.reply) != owner {
			b.Fatalf("stream: served by %s: %s", servedBy(ev.reply), ev.text)
		}
		return ev.firstAt
	}
	dd, fd = alternate(100, firstEvent)
	sideBySide(b, "stream_first_event", dd, fd)
}

// benchClusterTakeover kills the node holding a session and calls the
// session through another node until it answers; the node is started
// again before the next round.
func benchClusterTakeover(b *testing.B, c *cluster, key string) {
	st := c.openStore(b)
	const rounds = 5
	var total, leaseWait, resume []time.Duration
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
		// The dead node's lease as it last renewed it.
		dead, err := st.GetNode(context.Background(), owner)
		if err != nil {
			b.Fatal(err)
		}
		tries := 0
		for {
			tries++
			r, err := c.try(entry, request{method: "POST", path: "/v1/sessions/" + id + "/execute", key: key, body: map[string]any{"code": "print(open('/home/sandbox/f').read())"}})
			if err == nil && r.status == http.StatusOK && r.json(b)["stdout"] == "x\n" {
				took := time.Since(t0)
				rm, _ := r.json(b)["resumed_ms"].(float64)
				total = append(total, took)
				leaseWait = append(leaseWait, dead.LeaseUntil.Sub(t0))
				resume = append(resume, time.Duration(rm*float64(time.Millisecond)))
				b.Logf("round %d: %s killed; the session answered through %s, served by %s, after %v (%d calls; the lease ran out %v after the kill; resumed in %v ms)",
					k, owner, c.names[entry], servedBy(r), took.Round(time.Millisecond), tries, dead.LeaseUntil.Sub(t0).Round(time.Millisecond), rm)
				break
			}
			if time.Since(t0) > 60*time.Second {
				b.Fatalf("the session of the killed %s did not come back within 60 s: %v %d %s", owner, err, r.status, r.body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.restart(b, st, v, before)
		c.call(b, entry, request{method: "DELETE", path: "/v1/sessions/" + id, key: key})
	}
	b.ReportMetric(ms(clusterLease), "lease_ms")
	b.ReportMetric(ms(pct(total, .5)), "takeover_p50_ms")
	b.ReportMetric(ms(pct(total, 1)), "takeover_max_ms")
	b.ReportMetric(ms(pct(leaseWait, .5)), "takeover_lease_wait_p50_ms")
	b.ReportMetric(ms(pct(resume, .5)), "takeover_resume_p50_ms")
	b.Logf("takeover with a %v lease over %d rounds: p50 %v, max %v; of which the wait for the lease p50 %v, the resume p50 %v",
		clusterLease, rounds, pct(total, .5).Round(time.Millisecond), pct(total, 1).Round(time.Millisecond),
		pct(leaseWait, .5).Round(time.Millisecond), pct(resume, .5).Round(time.Millisecond))
}

// restart starts node v again and waits until it holds a new lease.
func (c *cluster) restart(b *testing.B, st *store.Store, v int, before store.NodeRow) {
	c.nodes[v].start()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if n, err := st.GetNode(context.Background(), c.names[v]); err == nil && n.Epoch > before.Epoch && n.Alive(time.Now()) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not rejoin", c.names[v])
		}
	}
}

// benchClusterDrain sends SIGTERM to the node holding a session while a
// client calls the session, without pause, through another node.
func benchClusterDrain(b *testing.B, c *cluster, key string) {
	st := c.openStore(b)
	const rounds = 3
	var handover, longest []time.Duration
	failed := 0
	for k := 0; k < rounds; k++ {
		id, owner := c.create(b, k%len(c.nodes), key, map[string]any{"language": "python3"})
		v := c.index(owner)
		before, err := st.GetNode(context.Background(), owner)
		if err != nil {
			b.Fatal(err)
		}
		type call struct {
			start, end time.Time
			by         string
			ok         bool
		}
		var calls []call
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				t1 := time.Now()
				r, err := c.try(c.other(v+1+n, v), request{method: "POST", path: "/v1/sessions/" + id + "/execute", key: key, body: map[string]any{"code": "print(1)"}})
				calls = append(calls, call{t1, time.Now(), servedBy(r), err == nil && r.status == http.StatusOK})
			}
		}()
		time.Sleep(500 * time.Millisecond)
		t0 := time.Now()
		_ = c.nodes[v].cmd.Process.Signal(syscall.SIGTERM)
		<-c.nodes[v].exited
		exited := time.Since(t0)
		time.Sleep(time.Second)
		close(stop)
		<-done
		var first, most time.Duration
		bad := 0
		for _, cl := range calls {
			if !cl.ok {
				bad++
				continue
			}
			if cl.end.After(t0) && cl.by != owner && (first == 0 || cl.end.Sub(t0) < first) {
				first = cl.end.Sub(t0)
			}
			if cl.end.After(t0) && cl.end.Sub(cl.start) > most {
				most = cl.end.Sub(cl.start)
			}
		}
		if first == 0 {
			b.Fatalf("round %d: no call was served by another node after the drain of %s", k, owner)
		}
		failed += bad
		handover = append(handover, first)
		longest = append(longest, most)
		b.Logf("round %d: SIGTERM to %s (exited after %v): first call served elsewhere %v after the signal, longest call %v, %d of %d calls failed",
			k, owner, exited.Round(time.Millisecond), first.Round(time.Millisecond), most.Round(time.Millisecond), bad, len(calls))
		c.restart(b, st, v, before)
		c.call(b, v, request{method: "DELETE", path: "/v1/sessions/" + id, key: key})
	}
	b.ReportMetric(ms(pct(handover, .5)), "drain_handover_p50_ms")
	b.ReportMetric(ms(pct(handover, 1)), "drain_handover_max_ms")
	b.ReportMetric(ms(pct(longest, 1)), "drain_longest_call_ms")
	b.ReportMetric(float64(failed), "drain_failed_calls")
}

func benchClusterCreates(b *testing.B) {
	opts := clusterOptions{maxSandboxes: 32, plans: benchPlans(b)}
	three := startCluster(b, opts)
	defer three.stop()
	opts.nodes = 1
	one := startCluster(b, opts)
	defer one.stop()
	const perKey, keys = 8, 3
	type result struct {
		perSecond float64
		latencies []time.Duration
		failed    int
		by        map[string]int
	}
	round := func(c *cluster) result {
		var ks []string
		for k := 0; k < keys; k++ {
			ks = append(ks, c.key(b, "MEGA"))
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		res := result{by: map[string]int{}}
		var ids [][2]string
		start := make(chan struct{})
		for k := 0; k < perKey*keys; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				key := ks[k%keys]
				t1 := time.Now()
				r, err := c.try(k%len(c.nodes), request{method: "POST", path: "/v1/sessions", key: key, body: map[string]any{"language": "bash"}})
				took := time.Since(t1)
				mu.Lock()
				defer mu.Unlock()
				if err != nil || r.status != http.StatusCreated {
					res.failed++
					b.Logf("create %d: %v %d %s", k, err, r.status, r.body)
					return
				}
				res.latencies = append(res.latencies, took)
				res.by[servedBy(r)]++
				ids = append(ids, [2]string{key, r.json(b)["id"].(string)})
			}()
		}
		t0 := time.Now()
		close(start)
		wg.Wait()
		res.perSecond = float64(len(ids)) / time.Since(t0).Seconds()
		for k, kid := range ids {
			c.call(b, k%len(c.nodes), request{method: "DELETE", path: "/v1/sessions/" + kid[1], key: kid[0]})
		}
		return res
	}
	const rounds = 5
	var r3, r1 []float64
	var l3, l1 []time.Duration
	f3, f1 := 0, 0
	for k := 0; k < rounds; k++ {
		res := round(three)
		r3, l3, f3 = append(r3, res.perSecond), append(l3, res.latencies...), f3+res.failed
		b.Logf("round %d, 3 nodes: %.2f creates/s, sessions by node %v, %d failed", k, res.perSecond, res.by, res.failed)
		res = round(one)
		r1, l1, f1 = append(r1, res.perSecond), append(l1, res.latencies...), f1+res.failed
		b.Logf("round %d, 1 node: %.2f creates/s, %d failed", k, res.perSecond, res.failed)
	}
	b.ReportMetric(median(r3), "creates_per_s_3_nodes")
	b.ReportMetric(median(r1), "creates_per_s_1_node")
	b.ReportMetric(median(r3)/median(r1), "creates_3_over_1")
	b.ReportMetric(ms(pct(l3, .5)), "create_3_nodes_p50_ms")
	b.ReportMetric(ms(pct(l3, .99)), "create_3_nodes_p99_ms")
	b.ReportMetric(ms(pct(l1, .5)), "create_1_node_p50_ms")
	b.ReportMetric(ms(pct(l1, .99)), "create_1_node_p99_ms")
	b.ReportMetric(float64(f3), "create_3_nodes_failed")
	b.ReportMetric(float64(f1), "create_1_node_failed")
	b.Logf("%d parallel creates, median of %d rounds: 3 nodes %.2f/s (p50 %.0f ms, p99 %.0f ms, %d failed), 1 node %.2f/s (p50 %.0f ms, p99 %.0f ms, %d failed); ratio %.2f on %d cores",
		perKey*keys, rounds, median(r3), ms(pct(l3, .5)), ms(pct(l3, .99)), f3, median(r1), ms(pct(l1, .5)), ms(pct(l1, .99)), f1,
		median(r3)/median(r1), runtime.NumCPU())
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
