// Package e2e drives the real sandboxapi binary: built once, started on a
// loopback port with its own data dir, talking to real runsc sandboxes.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/api/openapicheck"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds sandboxapi and sandboxapi-guest into one folder.
func binaries(t testing.TB) string {
	t.Helper()
	testenv.Runsc(t)
	if _, _, err := executor.FindRootfs(os.Getenv("SANDBOXAPI_ROOTFS"), ""); err != nil {
		testenv.Skip(t, "%v", err)
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "sandboxapi-e2e-")
		if buildErr != nil {
			return
		}
		for _, pkg := range []string{"sandboxapi", "sandboxapi-guest"} {
			cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(binDir, pkg), "./cmd/"+pkg)
			cmd.Dir = testenv.ModuleRoot()
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("building %s: %v: %s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// server is one running sandboxapi process.
type server struct {
	t       testing.TB
	bin     string
	dataDir string
	config  string
	addr    string
	cmd     *exec.Cmd
	logs    *bytes.Buffer
	exited  chan struct{}

	// storeURL is the server's PostgreSQL store ("": SQLite in dataDir).
	storeURL string
	// logReaderGone starts the server with its stdout and stderr on a
	// pipe whose read end is closed (so logs is empty).
	logReaderGone bool
}

// startServer starts sandboxapi serve on a free loopback port. extraYAML is
// appended to a minimal config file.
func startServer(t *testing.T, extraYAML string) *server { return startServerB(t, extraYAML) }

// startServerB is startServer for tests and benchmarks alike.
func startServerB(t testing.TB, extraYAML string) *server { return startServerAt(t, "", extraYAML) }

// startServerAt is startServerB on addr (host:port; "" picks a free
// port), for a config that must name its own address before it starts
// (a cluster node's advertise_url).
func startServerAt(t testing.TB, addr, extraYAML string) *server {
	t.Helper()
	dir := binaries(t)
	s := &server{t: t, bin: filepath.Join(dir, "sandboxapi"), dataDir: t.TempDir(), addr: addr}
	s.config = filepath.Join(s.dataDir, "config.yaml")
	cfg := "version: v1\nlog_level: debug\n" + extraYAML
	if !strings.Contains(extraYAML, "\nserver:") && !strings.HasPrefix(extraYAML, "server:") {
		cfg += "server:\n  drain_delay: 0s\n" // stops fast; drain_test.go covers the delay
	}
	if !strings.Contains(extraYAML, "executor:") {
		// No warm pool: a test of the pool, or of sessions made from it,
		// says so (it makes sandboxes at start and after every take,
		// which the other tests would pay for and throw away).
		cfg += "executor:\n  warm_pool: 0\n  home_size: 64M\n"
	}
	if !strings.Contains(extraYAML, "\ninstaller:") && !strings.HasPrefix(extraYAML, "installer:") {
		// The readiness probe makes installer networks: never in the
		// default table, prefix and pool, which a real deployment or a
		// parallel server would share.
		n := testenv.NewNet(t, 'd')
		cfg += fmt.Sprintf("installer:\n  pool: %s\n  table: %s\n  prefix: %s\n", n.Pool, n.Table, n.Prefix)
	}
	if testenv.TestStorePostgres() && !strings.Contains(extraYAML, "store:") {
		// The server, and the CLI run against it, on a fresh database.
		s.storeURL = testenv.PostgresURL(t)
		cfg += "store:\n  url: " + s.storeURL + "\n"
	}
	if rfs := os.Getenv("SANDBOXAPI_ROOTFS"); rfs != "" && !strings.Contains(cfg, "rootfs:") {
		// The build the tests were asked to use, not the newest in the cache.
		cfg = strings.Replace(cfg, "executor:\n", "executor:\n  rootfs: "+rfs+"\n", 1)
	}
	if err := os.WriteFile(s.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// Registered before the start: a server that does not come up in
	// time is stopped too, with its sandboxes, not left running.
	t.Cleanup(func() {
		s.stop()
		if t.Failed() && s.logs != nil {
			t.Logf("server log (tail):\n%s", tail(s.logs.String(), 40))
		}
	})
	s.start()
	return s
}

func freePort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (s *server) start() {
	t := s.t
	if s.addr == "" {
		s.addr = freePort(t)
	}
	s.logs = &bytes.Buffer{}
	s.cmd = exec.Command(s.bin, "serve", "--config", s.config, "--data-dir", s.dataDir, "--listen", s.addr)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	var reader, writer *os.File
	if s.logReaderGone {
		var err error
		if reader, writer, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
		s.cmd.Stdout, s.cmd.Stderr = writer, writer
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if reader != nil {
		// Both ends closed here: the server's every log line goes to a
		// pipe nobody reads any more.
		reader.Close()
		writer.Close()
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, ch chan struct{}) { _ = cmd.Wait(); close(ch) }(s.cmd, s.exited)
	// Up is /healthz answering; a failed start is the process's exit,
	// seen at once. The deadline only bounds a start that hangs: on a
	// machine busy with parallel tests a start that adopts live sessions
	// has taken over 30 s.
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := s.client().Get("http://" + s.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return
		}
		select {
		case <-s.exited:
			t.Fatalf("server exited at start:\n%s", s.logs)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("server did not come up:\n%s", s.logs)
}

// kill ends the server with SIGKILL, as a crash would.
func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// stop ends the server with SIGTERM (graceful) and waits.
func (s *server) stop() {
	if s.exited == nil {
		return // never started
	}
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
		s.t.Errorf("server ignored SIGTERM:\n%s", s.logs)
	}
}

// cli runs a sandboxapi subcommand against the same data dir and config.
func (s *server) cli(args ...string) string {
	s.t.Helper()
	full := append(args, "--config", s.config, "--data-dir", s.dataDir)
	cmd := exec.Command(s.bin, full...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("sandboxapi %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// key creates an API key on plan and returns its secret.
func (s *server) key(plan string) string {
	out := strings.TrimSpace(s.cli("keys", "create", "--plan", plan, "--name", "test-"+plan))
	lines := strings.Split(out, "\n")
	return lines[len(lines)-1]
}

func (s *server) url(path string) string { return "http://" + s.addr + path }

// reply is a decoded response.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("decoding %d reply %q: %v", r.status, r.body, err)
	}
	return m
}

func (r reply) errCode(t testing.TB) string {
	t.Helper()
	m := r.json(t)
	e, ok := m["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object in %s", r.body)
	}
	return e["code"].(string)
}

// do sends a request with the key (if any) and a body (JSON-encoded unless
// it is already []byte).
func (s *server) do(method, path, key string, body any) reply {
	s.t.Helper()
	return s.doAccept(method, path, key, body, "")
}

// doAccept is do with an Accept header ("" for none).
func (s *server) doAccept(method, path, key string, body any, accept string) reply {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, _ := json.Marshal(b)
		rd = bytes.NewReader(enc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, s.url(path), rd)
	if key != "" {
		req.Header.Set("X-RapidAPI-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := s.client().Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // checked against api/openapi.json at its end
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// client returns the HTTP client of every request the suite sends to the
// server: each reply is checked against api/openapi.json (see checked).
func (s *server) client() *http.Client {
	return &http.Client{Transport: s.checked(http.DefaultTransport)}
}

// checked wraps a transport so that every reply from this server is
// validated against api/openapi.json once its body has been read: to its
// end, or, when the test closes it early and the reply has a length, after
// reading what is left. A stream of unknown length closed before its end
// (a test that stops reading on purpose) is not checked.
func (s *server) checked(next http.RoundTripper) http.RoundTripper {
	return checkedTransport{s: s, next: next}
}

type checkedTransport struct {
	s    *server
	next http.RoundTripper
}

func (c checkedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil || req.URL.Host != c.s.addr {
		return resp, err
	}
	resp.Body = &checkedBody{ReadCloser: resp.Body, s: c.s, method: req.Method, resp: resp}
	return resp, nil
}

// checkedBody keeps what the test reads of a reply and checks it at EOF.
type checkedBody struct {
	io.ReadCloser
	s       *server
	method  string
	resp    *http.Response
	buf     bytes.Buffer
	checked bool
}

func (b *checkedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.buf.Write(p[:n])
	if errors.Is(err, io.EOF) {
		b.check()
	}
	return n, err
}

func (b *checkedBody) Close() error {
	if !b.checked && b.resp.ContentLength >= 0 {
		if _, err := io.Copy(&b.buf, io.LimitReader(b.ReadCloser, b.resp.ContentLength-int64(b.buf.Len()))); err == nil && int64(b.buf.Len()) == b.resp.ContentLength {
			b.check()
		}
	}
	return b.ReadCloser.Close()
}

func (b *checkedBody) check() {
	if b.checked {
		return
	}
	b.checked = true
	path := b.resp.Request.URL.Path
	if err := checkOpenAPI(b.method, path, b.resp, b.buf.Bytes()); err != nil {
		b.s.t.Errorf("%s %s: the real server's reply does not match api/openapi.json: %v\n%s", b.method, path, err, b.buf.Bytes())
	}
}

// openAPIChecker validates the real server's replies against the
// document the API serves (api/openapi.json).
var openAPIChecker = sync.OnceValues(func() (*openapicheck.Checker, error) { return openapicheck.New(api.OpenAPI()) })

// checkOpenAPI validates one reply of the API. Routes outside /v1 that the
// document does not hold (metrics, the mirror's package indexes, the
// console) are not the API's and pass.
func checkOpenAPI(method, path string, resp *http.Response, body []byte) error {
	c, err := openAPIChecker()
	if err != nil {
		return err
	}
	if c.Path(path) == "" && !strings.HasPrefix(path, "/v1/") {
		return nil
	}
	return c.Reply(method, path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
}

// session creates a session and returns its id.
func (s *server) session(key, lang string) string {
	s.t.Helper()
	return s.sessionWith(key, map[string]any{"language": lang})
}

// sessionWith creates a session from body and returns its id.
func (s *server) sessionWith(key string, body map[string]any) string {
	s.t.Helper()
	r := s.do("POST", "/v1/sessions", key, body)
	if r.status != http.StatusCreated {
		s.t.Fatalf("create session: %d %s", r.status, r.body)
	}
	return r.json(s.t)["id"].(string)
}

// exec runs code in a session and returns the result object.
func (s *server) exec(key, id, code string) map[string]any {
	s.t.Helper()
	r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": code})
	if r.status != http.StatusOK {
		s.t.Fatalf("execute: %d %s", r.status, r.body)
	}
	return r.json(s.t)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
