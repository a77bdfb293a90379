package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkFilesAPI measures the files API over HTTP against its floor
// measured the old way, `runsc exec` of cat in the same sandbox, side by
// side in one run, alternating call by call:
//
//	SANDBOXAPI_REQUIRE_RUNSC=1 go test ./internal/e2e -run '^$' -bench FilesAPI -benchtime 1x
//
// One-byte upload and download p50/p99 (150 samples each), 32 MiB upload
// and download MB/s (median of 5), and an execute's latency idle and while
// 32 MiB transfers run back to back through the API.
func BenchmarkFilesAPI(b *testing.B) {
	for i := 0; i < b.N; i++ {
		benchFilesAPI(b)
	}
}

func benchFilesAPI(b *testing.B) {
	s := startServerB(b, "executor:\n  warm_pool: 0\n  home_size: 256M\n")
	defer s.stop()
	key := s.key("MEGA")
	id := s.session(key, "bash")
	runsc := []string{"--root", filepath.Join(s.dataDir, "runsc"), "--platform", "systrap", "--overlay2", "none"}

	put := func(name string, data []byte) {
		req, _ := http.NewRequest("PUT", s.url(filesURL(id, "path", "/home/sandbox/"+name)), bytes.NewReader(data))
		req.Header.Set("X-RapidAPI-Key", key)
		resp, err := s.client().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("PUT %s: %d", name, resp.StatusCode)
		}
	}
	get := func(name string, want int) {
		req, _ := http.NewRequest("GET", s.url(filesURL(id, "path", "/home/sandbox/"+name)), nil)
		req.Header.Set("X-RapidAPI-Key", key)
		resp, err := s.client().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || n != int64(want) {
			b.Fatalf("GET %s: %d, %d bytes, %v", name, resp.StatusCode, n, err)
		}
	}
	catIn := func(name string, data []byte) {
		cmd := exec.Command("runsc", append(runsc, "exec", "--user", "1000:1000", id, "/bin/sh", "-c", "cat > /home/sandbox/"+name)...)
		cmd.Stdin = bytes.NewReader(data)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("runsc exec cat >: %v %s", err, out)
		}
	}
	catOut := func(name string, want int) {
		cmd := exec.Command("runsc", append(runsc, "exec", "--user", "1000:1000", id, "cat", "/home/sandbox/"+name)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, out)
		if err := cmd.Wait(); err != nil || n != int64(want) {
			b.Fatalf("runsc exec cat: %d bytes, %v", n, err)
		}
	}
	timed := func(f func()) time.Duration {
		t0 := time.Now()
		f()
		return time.Since(t0)
	}

	const samples = 150
	one := []byte("x")
	put("one", one)
	catIn("cat1", one)
	var upAPI, upCat, downAPI, downCat []time.Duration
	for i := 0; i < samples; i++ {
		if i%2 == 0 {
			upAPI = append(upAPI, timed(func() { put("one", one) }))
			upCat = append(upCat, timed(func() { catIn("cat1", one) }))
			downAPI = append(downAPI, timed(func() { get("one", 1) }))
			downCat = append(downCat, timed(func() { catOut("cat1", 1) }))
		} else {
			upCat = append(upCat, timed(func() { catIn("cat1", one) }))
			upAPI = append(upAPI, timed(func() { put("one", one) }))
			downCat = append(downCat, timed(func() { catOut("cat1", 1) }))
			downAPI = append(downAPI, timed(func() { get("one", 1) }))
		}
	}

	const big = 32 << 20
	data := make([]byte, big)
	_, _ = rand.Read(data)
	mbps := func(d time.Duration) float64 { return float64(big) / 1e6 / d.Seconds() }
	var bigUpAPI, bigUpCat, bigDownAPI, bigDownCat []float64
	put("big", data)
	catIn("catbig", data)
	for i := 0; i < 5; i++ {
		bigUpAPI = append(bigUpAPI, mbps(timed(func() { put("big", data) })))
		bigUpCat = append(bigUpCat, mbps(timed(func() { catIn("catbig", data) })))
		bigDownAPI = append(bigDownAPI, mbps(timed(func() { get("big", big) })))
		bigDownCat = append(bigDownCat, mbps(timed(func() { catOut("catbig", big) })))
	}

	execOnce := func() time.Duration {
		t0 := time.Now()
		out := s.exec(key, id, "true")
		d := time.Since(t0)
		if out["status"] != "ok" {
			b.Fatalf("execute: %v", out)
		}
		return d
	}
	var idle, during []time.Duration
	for i := 0; i < 30; i++ {
		idle = append(idle, execOnce())
	}
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
	time.Sleep(50 * time.Millisecond)
	for i := 0; i < 30; i++ {
		during = append(during, execOnce())
	}
	stop.Store(true)
	wg.Wait()

	med := func(v []float64) float64 {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	fmt.Printf("files API: one-byte PUT  p50 %6.2f ms p99 %6.2f ms | runsc exec cat > p50 %6.2f ms p99 %6.2f ms (%d samples)\n",
		ms(pct(upAPI, .5)), ms(pct(upAPI, .99)), ms(pct(upCat, .5)), ms(pct(upCat, .99)), samples)
	fmt.Printf("files API: one-byte GET  p50 %6.2f ms p99 %6.2f ms | runsc exec cat   p50 %6.2f ms p99 %6.2f ms (%d samples)\n",
		ms(pct(downAPI, .5)), ms(pct(downAPI, .99)), ms(pct(downCat, .5)), ms(pct(downCat, .99)), samples)
	fmt.Printf("files API: 32 MiB PUT %5.0f MB/s | runsc exec cat > %5.0f MB/s (median of 5)\n", med(bigUpAPI), med(bigUpCat))
	fmt.Printf("files API: 32 MiB GET %5.0f MB/s | runsc exec cat   %5.0f MB/s (median of 5)\n", med(bigDownAPI), med(bigDownCat))
	fmt.Printf("files API: execute `true` idle p50 %5.1f ms | while 32 MiB PUT/GET run p50 %5.1f ms p99 %5.1f ms\n",
		ms(pct(idle, .5)), ms(pct(during, .5)), ms(pct(during, .99)))
	b.ReportMetric(ms(pct(upAPI, .5)), "put1B-p50-ms")
	b.ReportMetric(ms(pct(downAPI, .5)), "get1B-p50-ms")
	b.ReportMetric(med(bigUpAPI), "put32MiB-MB/s")
	b.ReportMetric(med(bigDownAPI), "get32MiB-MB/s")
}
