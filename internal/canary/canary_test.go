package canary

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// hostRunner runs a job's argv with the host's python3 in a folder of its
// own: the canary script is plain Python, so its behaviour is tested
// without a sandbox (the installer's and egress's tests run it in one).
type hostRunner struct{ t *testing.T }

func (h hostRunner) RunJob(ctx context.Context, job sandbox.Job) (sandbox.Result, error) {
	dir := h.t.TempDir()
	for _, f := range job.Files {
		if err := os.WriteFile(filepath.Join(dir, f.Path), f.Content, 0o600); err != nil {
			return sandbox.Result{}, err
		}
	}
	argv := make([]string, len(job.Argv))
	for i, a := range job.Argv {
		argv[i] = strings.ReplaceAll(a, "{dir}", dir)
	}
	argv[0] = "python3" // the rootfs's path need not exist on the host
	ctx, cancel := context.WithTimeout(ctx, job.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := sandbox.Result{Stdout: out.String(), Stderr: errb.String(), Status: sandbox.StatusOK}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode, res.Status = ee.ExitCode(), sandbox.StatusError
	} else if err != nil {
		return sandbox.Result{}, err
	}
	return res, nil
}

// silentDNS answers no query until `hold` queries are waiting, then all of
// them and every later one at once (NXDOMAIN): a canary that tries its
// targets one after another sees each of the first ones time out.
func silentDNS(t *testing.T, hold int) string {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		type query struct {
			b    []byte
			from net.Addr
		}
		var waiting []query
		released := false
		answer := func(q query) {
			r := append([]byte(nil), q.b...)
			r[2] |= 0x80 // a response
			r[3] = r[3]&0xf0 | 3
			_, _ = pc.WriteTo(r, q.from)
		}
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := query{append([]byte(nil), buf[:n]...), from}
			if released {
				answer(q)
				continue
			}
			waiting = append(waiting, q)
			if len(waiting) >= hold {
				released = true
				for _, w := range waiting {
					answer(w)
				}
			}
		}
	}()
	return pc.LocalAddr().String()
}

func needPython(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on the host")
	}
}

// TestCanaryTriesTargetsAtOnce: the targets are tried by `workers` threads
// at once, so a list of fenced targets costs a few timeouts, not one per
// target: the DNS server answers only once `workers` queries wait on it.
func TestCanaryTriesTargetsAtOnce(t *testing.T) {
	needPython(t)
	dns := silentDNS(t, workers)
	var targets []string
	for i := 0; i < workers+4; i++ {
		// Distinct names for one server: the list is of targets.
		targets = append(targets, "DNS "+dns+strings.Repeat(" ", i))
	}
	got, err := Run(context.Background(), hostRunner{t}, "", targets)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(targets) {
		t.Fatalf("%d results for %d targets: %v", len(got), len(targets), got)
	}
	for _, tg := range targets {
		if got[tg] != "answered rcode 3" {
			t.Errorf("%q: %q (a query was not in flight beside the others)", tg, got[tg])
		}
	}
}

// TestCanaryReportsEachKind: every kind of target reports what happened to
// it, a failure as its exception, and Reached reads the verdicts.
func TestCanaryReportsEachKind(t *testing.T) {
	needPython(t)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/gone" {
			http.NotFound(w, r)
		}
	}))
	defer web.Close()
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := open.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer wg.Wait()
	defer open.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	dns := silentDNS(t, 1)

	cases := []struct {
		target, want string
		reached      bool
	}{
		{open.Addr().String(), "open", true},
		{closedAddr, "ConnectionRefusedError: ", false},
		{"GET " + web.URL + "/", "status 200", true},
		{"GET " + web.URL + "/gone", "HTTPError: HTTP Error 404", false},
		{"DNS " + dns, "answered rcode 3", true},
		{"not-a-target", "ValueError: ", false},
	}
	var targets []string
	for _, c := range cases {
		targets = append(targets, c.target)
	}
	start := time.Now()
	got, err := Run(context.Background(), hostRunner{t}, "", targets)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if !strings.HasPrefix(got[c.target], c.want) {
			t.Errorf("%q: %q, want %q...", c.target, got[c.target], c.want)
		}
		if Reached(got[c.target]) != c.reached {
			t.Errorf("%q: Reached(%q) = %v", c.target, got[c.target], !c.reached)
		}
	}
	t.Logf("%d targets in %v", len(targets), time.Since(start))
}

// TestCanaryFailsOnGarbage: a canary that prints no verdict is an error
// naming what it printed, never an empty (all-clear) map.
func TestCanaryFailsOnGarbage(t *testing.T) {
	for _, res := range []sandbox.Result{
		{Status: sandbox.StatusOK, Stdout: "not json"},
		{Status: sandbox.StatusTimeout, Stdout: "{}"},
		{Status: sandbox.StatusError, ExitCode: 1, Stderr: "Traceback: boom"},
	} {
		_, err := Run(context.Background(), fixed(res), "", []string{"127.0.0.1:1"})
		if err == nil || !strings.Contains(err.Error(), "canary failed") {
			t.Errorf("%+v: %v", res, err)
		}
	}
}

type fixed sandbox.Result

func (f fixed) RunJob(context.Context, sandbox.Job) (sandbox.Result, error) {
	return sandbox.Result(f), nil
}
