// Command loadbench drives a real sandboxapi server with many sessions from
// several keys executing at once, checks every result (each execution
// prints a unique token and appends it to its session's home, so a lost,
// duplicated or mixed-up result is caught), checks that plan quotas hold
// exactly, then steps up stateless concurrency to find where the server
// starts shedding load with 503 no_capacity instead of slowing down. It
// starts its own server from -bin with a temporary data dir (keys made with
// the CLI) and, after a graceful stop, checks that no runsc process, mount,
// netns or cgroup of that server is left. Run from the module root, as
// root, with runsc and a rootfs installed:
//
//	go build -o bin/ ./cmd/... && go run ./bench/load
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

func main() {
	bin := flag.String("bin", "bin", "folder holding sandboxapi and sandboxapi-guest")
	keys := flag.Int("keys", 3, "MEGA keys driving sessions")
	perKey := flag.Int("sessions", 2, "sessions per key")
	calls := flag.Int("calls", 8, "executions per session")
	levels := flag.String("levels", "1,2,4,8,12,16", "stateless concurrency levels to step through")
	perLevel := flag.Int("per-level", 3, "stateless calls per worker at each level")
	maxSandboxes := flag.Int("max-sandboxes", 8, "the server's host-wide sandbox ceiling")
	flag.Parse()
	b := &bench{bin: *bin, keys: *keys, perKey: *perKey, calls: *calls, perLevel: *perLevel, maxSandboxes: *maxSandboxes}
	for _, f := range strings.Split(*levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "loadbench: bad -levels")
			os.Exit(2)
		}
		b.levels = append(b.levels, n)
	}
	if err := b.run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

type bench struct {
	bin                           string
	keys, perKey, calls, perLevel int
	maxSandboxes                  int
	levels                        []int
	dataDir, config, addr         string
	cmd                           *exec.Cmd
	exited                        chan struct{}
	logs                          bytes.Buffer
	problems                      []string
	mu                            sync.Mutex
	sessionIDs                    []string
}

func (b *bench) problem(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) < 50 {
		b.problems = append(b.problems, fmt.Sprintf(format, args...))
	}
}

func (b *bench) run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "loadbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b.dataDir = dir
	b.config = filepath.Join(dir, "config.yaml")
	cfg := fmt.Sprintf("version: v1\nlog_level: warn\nexecutor:\n  warm_pool: 2\n  home_size: 64M\n  memory_mb: 256\n  max_sandboxes: %d\n", b.maxSandboxes)
	if err := os.WriteFile(b.config, []byte(cfg), 0o600); err != nil {
		return err
	}
	netnsBefore := netnsCount()
	if err := b.start(); err != nil {
		return err
	}
	defer b.stop()

	mega := make([]string, b.keys)
	for i := range mega {
		if mega[i], err = b.key("MEGA"); err != nil {
			return err
		}
	}
	fmt.Printf("server %s, data %s, %d MEGA keys, max_sandboxes %d, GOMAXPROCS host %d cores\n", b.addr, dir, b.keys, b.maxSandboxes, numCPU())

	b.sessions(mega)
	b.quotas()
	b.shedding(mega)

	b.stop()
	left := b.leftovers()
	if n := netnsCount(); n > netnsBefore {
		left = append(left, fmt.Sprintf("%d network namespaces more than before", n-netnsBefore))
	}
	fmt.Println("\n== leftovers after a graceful stop")
	if len(left) == 0 {
		fmt.Println("none: no runsc process, mount, netns or cgroup of this server remains")
	}
	for _, l := range left {
		fmt.Println("LEFT", l)
		b.problem("left: %s", l)
	}
	if len(b.problems) > 0 {
		fmt.Println("\n== problems")
		for _, p := range b.problems {
			fmt.Println(p)
		}
		return fmt.Errorf("%d problems", len(b.problems))
	}
	fmt.Println("\nall results checked: nothing lost, nothing mixed, quotas exact")
	return nil
}

// sessions runs keys×perKey sessions at once, each making calls
// executions in a row, and checks every output.
func (b *bench) sessions(keys []string) {
	fmt.Printf("\n== sessions: %d keys x %d sessions x %d calls, all at once\n", len(keys), b.perKey, b.calls)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		lat   []time.Duration
		codes = map[int]int{}
	)
	start := time.Now()
	for k, key := range keys {
		for j := 0; j < b.perKey; j++ {
			wg.Add(1)
			go func(k, j int, key string) {
				defer wg.Done()
				r, _, err := b.do("POST", "/v1/sessions", key, `{"language":"bash"}`)
				if err != nil || r.status != http.StatusCreated {
					b.problem("create session k%d s%d: %v %d %s", k, j, err, r.status, r.body)
					return
				}
				var s struct{ ID string }
				_ = json.Unmarshal(r.body, &s)
				b.mu.Lock()
				b.sessionIDs = append(b.sessionIDs, s.ID)
				b.mu.Unlock()
				for i := 0; i < b.calls; i++ {
					tok := fmt.Sprintf("tok-%s-%d", s.ID, i)
					code := fmt.Sprintf("echo %s >> /home/sandbox/log; echo %s; wc -l < /home/sandbox/log; grep -vc '^tok-%s-' /home/sandbox/log || true", tok, tok, s.ID)
					body, _ := json.Marshal(map[string]any{"code": code})
					r, d, err := b.do("POST", "/v1/sessions/"+s.ID+"/execute", key, string(body))
					mu.Lock()
					codes[r.status]++
					if err == nil && r.status == http.StatusOK {
						lat = append(lat, d)
					}
					mu.Unlock()
					if err != nil || r.status != http.StatusOK {
						b.problem("execute %s #%d: %v %d %s", s.ID, i, err, r.status, r.body)
						continue
					}
					var res wire.ExecuteResult
					_ = json.Unmarshal(r.body, &res)
					want := fmt.Sprintf("%s\n%d\n0\n", tok, i+1)
					if res.Status != sandbox.StatusOK || res.Stdout != want {
						b.problem("execute %s #%d: status %s stdout %q, want %q", s.ID, i, res.Status, res.Stdout, want)
					}
				}
				if r, _, err := b.do("DELETE", "/v1/sessions/"+s.ID, key, ""); err != nil || r.status != http.StatusNoContent {
					b.problem("delete %s: %v %d", s.ID, err, r.status)
				}
			}(k, j, key)
		}
	}
	wg.Wait()
	el := time.Since(start)
	fmt.Printf("%d executions in %v: %.1f exec/s; latency %s; statuses %v\n", len(lat), el.Round(time.Millisecond),
		float64(len(lat))/el.Seconds(), percentiles(lat), codes)
}

// quotas checks the plan's concurrent-session limit and the per-minute
// request limit hold exactly under concurrent requests.
func (b *bench) quotas() {
	fmt.Println("\n== quotas")
	pro, err := b.key("PRO")
	if err != nil {
		b.problem("key: %v", err)
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	var ids []string
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _, err := b.do("POST", "/v1/sessions", pro, `{"language":"bash"}`)
			if err != nil {
				b.problem("quota create: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			codes[r.status]++
			if r.status == http.StatusCreated {
				var s struct{ ID string }
				_ = json.Unmarshal(r.body, &s)
				ids = append(ids, s.ID)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("PRO (max 2 sessions), 6 concurrent creates: %v\n", codes)
	if codes[http.StatusCreated] != 2 || codes[http.StatusTooManyRequests] != 4 {
		b.problem("PRO concurrent sessions: %v, want 2x201 and 4x429", codes)
	}
	for _, id := range ids {
		b.do("DELETE", "/v1/sessions/"+id, pro, "")
	}

	basic, err := b.key("BASIC")
	if err != nil {
		b.problem("key: %v", err)
		return
	}
	codes = map[int]int{}
	for i := 0; i < 70; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _, err := b.do("GET", "/v1/runtimes", basic, "")
			if err != nil {
				b.problem("rate: %v", err)
				return
			}
			mu.Lock()
			codes[r.status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	fmt.Printf("BASIC (60 requests/minute), 70 concurrent requests: %v\n", codes)
	if ok := codes[http.StatusOK]; ok < 60 || ok > 61 || codes[http.StatusOK]+codes[http.StatusTooManyRequests] != 70 {
		b.problem("BASIC rate limit: %v, want 60 (61 if a second passed) x200, the rest 429", codes)
	}
}

// shedding steps up stateless concurrency: latency should stay bounded
// and excess load answered 503 no_capacity rather than queued.
func (b *bench) shedding(keys []string) {
	fmt.Println("\n== stateless execute, stepping up concurrency")
	fmt.Println("conc  calls  ok  503  other  exec/s  p50  p95  p99  max")
	shedAt := 0
	for _, c := range b.levels {
		var (
			wg            sync.WaitGroup
			mu            sync.Mutex
			lat           []time.Duration
			ok, shed, oth int
		)
		start := time.Now()
		for w := 0; w < c; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				key := keys[w%len(keys)]
				for i := 0; i < b.perLevel; i++ {
					tok := fmt.Sprintf("st-%d-%d-%d-%d", c, w, i, time.Now().UnixNano())
					body, _ := json.Marshal(map[string]any{"language": "python3", "code": "print('" + tok + "')"})
					r, d, err := b.do("POST", "/v1/execute", key, string(body))
					mu.Lock()
					switch {
					case err != nil:
						oth++
						b.problem("stateless: %v", err)
					case r.status == http.StatusOK:
						var res wire.ExecuteResult
						_ = json.Unmarshal(r.body, &res)
						if res.Stdout != tok+"\n" || res.Status != sandbox.StatusOK {
							b.problem("stateless %s: %s %q", tok, res.Status, res.Stdout)
						}
						ok++
						lat = append(lat, d)
					case r.status == http.StatusServiceUnavailable && strings.Contains(string(r.body), "no_capacity"):
						shed++
					default:
						oth++
						b.problem("stateless: %d %s", r.status, r.body)
					}
					mu.Unlock()
				}
			}(w)
		}
		wg.Wait()
		el := time.Since(start)
		p := pcts(lat)
		fmt.Printf("%4d  %5d  %3d  %3d  %5d  %6.1f  %s  %s  %s  %s\n", c, c*b.perLevel, ok, shed, oth, float64(ok)/el.Seconds(),
			ms(p[0]), ms(p[1]), ms(p[2]), ms(p[3]))
		if shed > 0 && shedAt == 0 {
			shedAt = c
		}
	}
	if shedAt > 0 {
		fmt.Printf("sheds with 503 no_capacity from concurrency %d (max_sandboxes %d)\n", shedAt, b.maxSandboxes)
	} else {
		fmt.Printf("no shedding up to concurrency %d\n", b.levels[len(b.levels)-1])
	}
}

type reply struct {
	status int
	body   []byte
}

func (b *bench) do(method, path, key, body string) (reply, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+b.addr+path, rd)
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, 0, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: rb}, time.Since(start), err
}

func (b *bench) key(plan string) (string, error) {
	cmd := exec.Command(filepath.Join(b.bin, "sandboxapi"), "keys", "create", "--plan", plan, "--name", "load-"+plan,
		"--config", b.config, "--data-dir", b.dataDir)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("creating key: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

func (b *bench) start() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	b.addr = l.Addr().String()
	l.Close()
	b.cmd = exec.Command(filepath.Join(b.bin, "sandboxapi"), "serve", "--config", b.config, "--data-dir", b.dataDir, "--listen", b.addr)
	b.cmd.Stdout, b.cmd.Stderr = &b.logs, &b.logs
	if err := b.cmd.Start(); err != nil {
		return err
	}
	b.exited = make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(b.exited) }()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		select {
		case <-b.exited:
			return fmt.Errorf("server exited:\n%s", b.logs.String())
		default:
		}
		if resp, err := http.Get("http://" + b.addr + "/healthz"); err == nil {
			resp.Body.Close()
			return nil
		}
	}
	return errors.New("server did not come up")
}

func (b *bench) stop() {
	if b.cmd == nil || b.exited == nil {
		return
	}
	select {
	case <-b.exited:
		return
	default:
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(90 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
		b.problem("server ignored SIGTERM")
	}
}

// leftovers lists runsc processes and mounts under the data dir and the
// sandboxapi cgroups of the sessions the run made.
func (b *bench) leftovers() []string {
	var out []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		out = out[:0]
		ents, _ := os.ReadDir("/proc")
		for _, ent := range ents {
			cmd, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
			if err == nil && strings.HasPrefix(string(cmd), "runsc") && strings.Contains(string(cmd), b.dataDir) {
				out = append(out, "process "+ent.Name())
			}
		}
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		for _, l := range strings.Split(string(mi), "\n") {
			if strings.Contains(l, b.dataDir) && !strings.Contains(l, "null-netns") {
				out = append(out, "mount "+strings.Fields(l)[4])
			}
		}
		for _, id := range b.sessionIDs {
			for _, pat := range []string{"/sys/fs/cgroup/*/sandboxapi/" + id, "/sys/fs/cgroup/sandboxapi/" + id} {
				m, _ := filepath.Glob(pat)
				for _, p := range m {
					out = append(out, "cgroup "+p)
				}
			}
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
	}
}

func netnsCount() int {
	ents, _ := os.ReadDir("/run/netns")
	return len(ents)
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

func pcts(d []time.Duration) [4]time.Duration {
	if len(d) == 0 {
		return [4]time.Duration{}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	return [4]time.Duration{at(0.50), at(0.95), at(0.99), d[len(d)-1]}
}

func percentiles(d []time.Duration) string {
	p := pcts(d)
	return fmt.Sprintf("p50 %s p95 %s p99 %s max %s", ms(p[0]), ms(p[1]), ms(p[2]), ms(p[3]))
}

func ms(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }
