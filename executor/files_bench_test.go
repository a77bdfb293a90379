package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkFiles measures the files API side by side in one run: the agent
// channel (what PutFile, GetFile and List use) against the old transport,
// the guest's file modes under `runsc exec` (putFileExec, getFileExec),
// on the same session, alternating call by call.
//
//	SANDBOXAPI_REQUIRE_RUNSC=1 go test ./executor -run '^$' -bench Files -benchtime 1x
//
// It prints the p50/p99 of a one-byte upload and download (200 samples
// each), the MB/s of a 32 MiB upload and download (median of 5), and the
// latency of `true` executed in the same session, idle and while 32 MiB
// transfers run back to back on either transport.
func BenchmarkFiles(b *testing.B) {
	for i := 0; i < b.N; i++ {
		benchFiles(b)
	}
}

func benchPct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

func benchMS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func benchMedian(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func benchFiles(b *testing.B) {
	e, _ := startExecutor(b, func(c *Config) { c.HomeBytes = 256 << 20; c.WarmPool = 0 })
	ctx := context.Background()
	sess, err := e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"})
	if err != nil {
		b.Fatal(err)
	}
	id := sess.ID
	comps, _ := checkFilePath("one")

	putNew := func(name string, data []byte) {
		if _, err := e.files.PutFile(ctx, "k1", id, name, bytes.NewReader(data), int64(len(data))); err != nil {
			b.Fatalf("put: %v", err)
		}
	}
	putOld := func(name string, data []byte) {
		c, _ := checkFilePath(name)
		if _, err := e.files.putFileExec(ctx, "k1", id, c, bytes.NewReader(data), int64(len(data))); err != nil {
			b.Fatalf("put (exec): %v", err)
		}
	}
	drain := func(rc io.ReadCloser, err error, want int) {
		if err != nil {
			b.Fatalf("get: %v", err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil || n != int64(want) {
			b.Fatalf("get: %d bytes, %v", n, err)
		}
	}
	getNew := func(name string, want int) {
		_, rc, err := e.files.GetFile(ctx, "k1", id, name)
		drain(rc, err, want)
	}
	getOld := func(name string, want int) {
		c, _ := checkFilePath(name)
		_, rc, err := e.files.getFileExec(ctx, "k1", id, c)
		drain(rc, err, want)
	}
	timed := func(f func()) time.Duration {
		t0 := time.Now()
		f()
		return time.Since(t0)
	}

	// One byte, 200 samples each, alternating (after a warm-up).
	const small = 200
	one := []byte("x")
	putNew("one", one)
	putOld("one", one)
	_ = comps
	var upNew, upOld, downNew, downOld []time.Duration
	for i := 0; i < small; i++ {
		if i%2 == 0 {
			upNew = append(upNew, timed(func() { putNew("one", one) }))
			upOld = append(upOld, timed(func() { putOld("one", one) }))
			downNew = append(downNew, timed(func() { getNew("one", 1) }))
			downOld = append(downOld, timed(func() { getOld("one", 1) }))
		} else {
			upOld = append(upOld, timed(func() { putOld("one", one) }))
			upNew = append(upNew, timed(func() { putNew("one", one) }))
			downOld = append(downOld, timed(func() { getOld("one", 1) }))
			downNew = append(downNew, timed(func() { getNew("one", 1) }))
		}
	}

	// 32 MiB, 5 rounds each.
	const big = 32 << 20
	data := make([]byte, big)
	_, _ = rand.Read(data)
	mbps := func(d time.Duration) float64 { return float64(big) / 1e6 / d.Seconds() }
	var bigUpNew, bigUpOld, bigDownNew, bigDownOld []float64
	putNew("big", data)
	for i := 0; i < 5; i++ {
		bigUpNew = append(bigUpNew, mbps(timed(func() { putNew("big", data) })))
		bigUpOld = append(bigUpOld, mbps(timed(func() { putOld("big", data) })))
		bigDownNew = append(bigDownNew, mbps(timed(func() { getNew("big", big) })))
		bigDownOld = append(bigDownOld, mbps(timed(func() { getOld("big", big) })))
	}

	// An execute's latency, idle and beside transfers that run back to
	// back (one upload, one download, repeat) on either transport.
	execOnce := func() time.Duration {
		t0 := time.Now()
		res, err := e.Execute(ctx, "k1", id, ExecRequest{Code: "true"})
		d := time.Since(t0)
		if err != nil || res.Status != StatusOK {
			b.Fatalf("execute: %+v %v", res, err)
		}
		return d
	}
	const execs = 30
	var idle []time.Duration
	for i := 0; i < execs; i++ {
		idle = append(idle, execOnce())
	}
	beside := func(put func(string, []byte), get func(string, int)) []time.Duration {
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				put("busy", data)
				get("busy", big)
			}
		}()
		time.Sleep(50 * time.Millisecond) // the first transfer is under way
		var out []time.Duration
		for i := 0; i < execs; i++ {
			out = append(out, execOnce())
		}
		stop.Store(true)
		wg.Wait()
		return out
	}
	duringNew := beside(putNew, getNew)
	duringOld := beside(putOld, getOld)

	fmt.Printf("files: one-byte upload    channel p50 %6.2f ms p99 %6.2f ms | runsc exec p50 %6.2f ms p99 %6.2f ms (%d samples)\n",
		benchMS(benchPct(upNew, .5)), benchMS(benchPct(upNew, .99)), benchMS(benchPct(upOld, .5)), benchMS(benchPct(upOld, .99)), small)
	fmt.Printf("files: one-byte download  channel p50 %6.2f ms p99 %6.2f ms | runsc exec p50 %6.2f ms p99 %6.2f ms (%d samples)\n",
		benchMS(benchPct(downNew, .5)), benchMS(benchPct(downNew, .99)), benchMS(benchPct(downOld, .5)), benchMS(benchPct(downOld, .99)), small)
	fmt.Printf("files: 32 MiB upload      channel %6.0f MB/s | runsc exec %6.0f MB/s (median of 5; all %v | %v)\n",
		benchMedian(bigUpNew), benchMedian(bigUpOld), fmtRates(bigUpNew), fmtRates(bigUpOld))
	fmt.Printf("files: 32 MiB download    channel %6.0f MB/s | runsc exec %6.0f MB/s (median of 5; all %v | %v)\n",
		benchMedian(bigDownNew), benchMedian(bigDownOld), fmtRates(bigDownNew), fmtRates(bigDownOld))
	fmt.Printf("files: execute `true`     idle p50 %6.1f ms | beside channel transfers p50 %6.1f ms p99 %6.1f ms | beside runsc exec transfers p50 %6.1f ms p99 %6.1f ms\n",
		benchMS(benchPct(idle, .5)), benchMS(benchPct(duringNew, .5)), benchMS(benchPct(duringNew, .99)), benchMS(benchPct(duringOld, .5)), benchMS(benchPct(duringOld, .99)))
	b.ReportMetric(benchMS(benchPct(upNew, .5)), "put1B-p50-ms")
	b.ReportMetric(benchMS(benchPct(downNew, .5)), "get1B-p50-ms")
	b.ReportMetric(benchMedian(bigUpNew), "put32MiB-MB/s")
	b.ReportMetric(benchMedian(bigDownNew), "get32MiB-MB/s")
}

func fmtRates(v []float64) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%.0f", x)
	}
	return s
}
