// Command mirrorbench measures the mirror's simple index and packuments on
// loopback, side by side with `python3 -m http.server` serving a static
// PEP 503 index of the same wheels, and times pip installing ten wheels
// from each. Run from the module root:
//
//	go run ./bench/mirror -duration 5s -concurrency 8
package main

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/store"
)

func main() {
	duration := flag.Duration("duration", 5*time.Second, "load duration per target")
	conc := flag.Int("concurrency", 8, "concurrent clients")
	osvDir := flag.String("osv", "mirror/testdata/osv", "OSV records to import")
	installs := flag.Int("installs", 3, "pip install repetitions per index")
	verdaccio := flag.String("verdaccio", "", "path to a verdaccio binary to compare packuments with (optional)")
	flag.Parse()
	if err := run(context.Background(), *duration, *conc, *osvDir, *installs, *verdaccio); err != nil {
		fmt.Fprintln(os.Stderr, "mirrorbench:", err)
		os.Exit(1)
	}
}

type result struct {
	name          string
	n             int
	rps           float64
	p50, p99, max time.Duration
}

func run(ctx context.Context, d time.Duration, conc int, osvDir string, installs int, verdaccio string) error {
	dir, err := os.MkdirTemp("", "mirrorbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(ctx, filepath.Join(dir, "sandboxapi.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	cfg := mirror.DefaultConfig()
	cfg.StoreDir = filepath.Join(dir, "mirror")
	m, err := mirror.New(ctx, cfg, st.DB(), slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	if _, err := m.ImportOSV(ctx, osvDir); err != nil {
		return err
	}
	static := filepath.Join(dir, "static")
	var names, npmVersions []string
	var npmTarballs [][]byte
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("benchpkg%d", i)
		fn, data := buildWheel(name, "1.0.0", 256<<10)
		if _, err := m.AddWheel(ctx, fn, data, "bench", nil); err != nil {
			return fmt.Errorf("admitting %s: %w", fn, err)
		}
		if err := writeStatic(static, name, fn, data); err != nil {
			return err
		}
		names = append(names, name+"==1.0.0")
		v := fmt.Sprintf("1.%d.0", i)
		tb := npmTarball("bench-pkg", v)
		if _, err := m.AddNPMTarball(ctx, tb, "bench", nil); err != nil {
			return err
		}
		npmVersions, npmTarballs = append(npmVersions, v), append(npmTarballs, tb)
	}
	// One project with ten versions, for a page of realistic size.
	for i := 0; i < 10; i++ {
		fn, data := buildWheel("manyver", fmt.Sprintf("1.%d", i), 4<<10)
		if _, err := m.AddWheel(ctx, fn, data, "bench", nil); err != nil {
			return err
		}
		if err := writeStatic(static, "manyver", fn, data); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mirror/", m.Handler())
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()
	mURL := "http://" + ln.Addr().String()

	pyPort, err := freePort()
	if err != nil {
		return err
	}
	py := exec.CommandContext(ctx, "python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", static, fmt.Sprint(pyPort))
	py.Stdout, py.Stderr = io.Discard, io.Discard
	if err := py.Start(); err != nil {
		return fmt.Errorf("starting python http.server: %w", err)
	}
	defer func() { py.Process.Kill(); py.Wait() }()
	pyURL := fmt.Sprintf("http://127.0.0.1:%d", pyPort)
	if err := waitUp(pyURL + "/simple/"); err != nil {
		return err
	}

	pipAccept := "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01"
	targets := []struct{ name, url, accept string }{
		{"mirror simple page (HTML)", mURL + "/mirror/pypi/simple/manyver/", "text/html"},
		{"mirror simple page (JSON, pip's Accept)", mURL + "/mirror/pypi/simple/manyver/", pipAccept},
		{"python http.server static page", pyURL + "/simple/manyver/", "text/html"},
		{"mirror packument (abbreviated)", mURL + "/mirror/npm/bench-pkg", "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"},
		{"mirror packument (full)", mURL + "/mirror/npm/bench-pkg", "application/json"},
	}
	abbrevAccept := "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"
	if verdaccio != "" {
		vdir := filepath.Join(dir, "verdaccio")
		os.MkdirAll(vdir, 0o755)
		vURL, stop, err := startVerdaccio(ctx, verdaccio, vdir, "bench-pkg", npmVersions, npmTarballs)
		if err != nil {
			return err
		}
		defer stop()
		targets = append(targets,
			struct{ name, url, accept string }{"verdaccio packument (abbreviated)", vURL + "/bench-pkg", abbrevAccept},
			struct{ name, url, accept string }{"verdaccio packument (full)", vURL + "/bench-pkg", "application/json"})
	}
	fmt.Printf("loopback, %d clients, %s per target, GOMAXPROCS host CPUs; the mirror and the load generator share one process\n\n", conc, d)
	for _, ka := range []bool{true, false} {
		fmt.Printf("keep-alive %v\n\n| target | requests | req/s | p50 | p99 | max |\n|---|---|---|---|---|---|\n", ka)
		var rs []result
		for _, t := range targets {
			r, err := load(t.name, t.url, t.accept, conc, d, ka)
			if err != nil {
				return err
			}
			rs = append(rs, r)
			fmt.Printf("| %s | %d | %.0f | %s | %s | %s |\n", r.name, r.n, r.rps, r.p50, r.p99, r.max)
		}
		fmt.Printf("\nratio mirror HTML / http.server: %.2fx req/s, p99 %.2fx\n", rs[0].rps/rs[2].rps, float64(rs[0].p99)/float64(rs[2].p99))
		fmt.Printf("ratio mirror JSON / http.server: %.2fx req/s, p99 %.2fx\n", rs[1].rps/rs[2].rps, float64(rs[1].p99)/float64(rs[2].p99))
		if len(rs) == 7 {
			fmt.Printf("ratio mirror / verdaccio packument (abbreviated): %.2fx req/s, p99 %.2fx\n", rs[3].rps/rs[5].rps, float64(rs[3].p99)/float64(rs[5].p99))
			fmt.Printf("ratio mirror / verdaccio packument (full): %.2fx req/s, p99 %.2fx\n", rs[4].rps/rs[6].rps, float64(rs[4].p99)/float64(rs[6].p99))
		}
		fmt.Println()
	}

	pipPy := pipPython()
	fmt.Printf("pip install of ten 256 KiB wheels (--no-deps --only-binary=:all: --no-cache-dir, %s), %d runs each, alternating\n\n| index | median | min |\n|---|---|---|\n", pipPy, installs)
	idxs := []struct{ name, url string }{{"mirror", mURL + "/mirror/pypi/simple"}, {"python http.server", pyURL + "/simple"}}
	// Alternating runs share the machine's load alike (it drifts on a
	// shared VM), so the ratio of the medians compares like with like.
	ts := make([][]time.Duration, len(idxs))
	for j := 0; j < installs; j++ {
		for i, idx := range idxs {
			t, err := pipInstall(ctx, pipPy, idx.url, names)
			if err != nil {
				return fmt.Errorf("pip from %s: %w", idx.name, err)
			}
			ts[i] = append(ts[i], t)
		}
	}
	var med [2]time.Duration
	for i, idx := range idxs {
		sort.Slice(ts[i], func(a, b int) bool { return ts[i][a] < ts[i][b] })
		med[i] = ts[i][len(ts[i])/2]
		fmt.Printf("| %s | %s | %s |\n", idx.name, med[i].Round(time.Millisecond), ts[i][0].Round(time.Millisecond))
	}
	fmt.Printf("\nratio mirror / http.server install time: %.2fx\n", float64(med[0])/float64(med[1]))
	return nil
}

func load(name, u, accept string, conc int, d time.Duration, keepAlive bool) (result, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: conc, DisableKeepAlives: !keepAlive}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	var mu sync.Mutex
	var all []time.Duration
	var firstErr error
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			for time.Now().Before(deadline) {
				t0 := time.Now()
				req, _ := http.NewRequest(http.MethodGet, u, nil)
				req.Header.Set("Accept", accept)
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", name, err)
					}
					mu.Unlock()
					return
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if firstErr != nil {
		return result{}, firstErr
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	pct := func(p float64) time.Duration {
		return all[min(len(all)-1, int(float64(len(all))*p))].Round(time.Microsecond)
	}
	return result{name: name, n: len(all), rps: float64(len(all)) / el.Seconds(), p50: pct(0.5), p99: pct(0.99), max: all[len(all)-1].Round(time.Microsecond)}, nil
}

// pipPython is the host's python3 resolved to the interpreter itself: a
// wrapper such as a pyenv shim adds its own start-up to every run.
func pipPython() string {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if py := strings.TrimSpace(string(out)); err == nil && py != "" {
		return py
	}
	return "python3"
}

func pipInstall(ctx context.Context, py, index string, pkgs []string) (time.Duration, error) {
	target, err := os.MkdirTemp("", "mirrorbench-pip-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(target)
	args := append([]string{"-m", "pip", "install", "--index-url", index, "--only-binary=:all:", "--no-deps", "--no-cache-dir",
		"--disable-pip-version-check", "--quiet", "--target", target}, pkgs...)
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Env = append(os.Environ(), "PIP_CONFIG_FILE=/dev/null")
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, out)
	}
	return time.Since(t0), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitUp polls u for up to 30s (Verdaccio starts slowly on a busy machine).
func waitUp(u string) error {
	for i := 0; i < 600; i++ {
		if r, err := http.Get(u); err == nil {
			r.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not come up", u)
}

// writeStatic adds a wheel to a static PEP 503 tree:
// simple/<name>/index.html linking ../../files/<file>#sha256=...
func writeStatic(root, name, fn string, data []byte) error {
	files := filepath.Join(root, "files")
	page := filepath.Join(root, "simple", name)
	if err := os.MkdirAll(files, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(page, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(files, fn), data, 0o644); err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	idx := filepath.Join(page, "index.html")
	old, _ := os.ReadFile(idx)
	body := strings.TrimSuffix(string(old), "</body></html>\n")
	if body == "" {
		body = "<!DOCTYPE html>\n<html><head><title>Links for " + name + "</title></head><body>\n"
	}
	body += fmt.Sprintf("<a href=\"../../files/%s#sha256=%s\">%s</a><br/>\n</body></html>\n", fn, hex.EncodeToString(sum[:]), fn)
	return os.WriteFile(idx, []byte(body), 0o644)
}

// buildWheel makes a valid pure wheel with pad bytes of random payload.
func buildWheel(name, version string, pad int) (string, []byte) {
	di := name + "-" + version + ".dist-info"
	payload := make([]byte, pad)
	rand.Read(payload)
	files := map[string][]byte{
		name + "/__init__.py": []byte("VERSION = '" + version + "'\n"),
		name + "/blob.bin":    payload,
		di + "/METADATA":      []byte("Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n\n"),
		di + "/WHEEL":         []byte("Wheel-Version: 1.0\nGenerator: mirrorbench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
	}
	var keys []string
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, k := range keys {
		w, _ := zw.Create(k)
		w.Write(files[k])
		s := sha256.Sum256(files[k])
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", k, base64.RawURLEncoding.EncodeToString(s[:]), len(files[k]))
	}
	record.WriteString(di + "/RECORD,,\n")
	w, _ := zw.Create(di + "/RECORD")
	io.WriteString(w, record.String())
	zw.Close()
	return name + "-" + version + "-py3-none-any.whl", buf.Bytes()
}

// npmTarball makes a tiny npm package tarball.
func npmTarball(name, version string) []byte {
	var buf bytes.Buffer
	gw := newGzip(&buf)
	tw := newTar(gw)
	pj := fmt.Sprintf(`{"name":%q,"version":%q,"main":"index.js","description":"bench package","license":"MIT"}`, name, version)
	addTar(tw, "package/package.json", pj)
	addTar(tw, "package/index.js", "module.exports = 1;\n")
	tw.Close()
	gw.Close()
	return buf.Bytes()
}
