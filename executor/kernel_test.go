package executor

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"image/png"
	"os"
	"strings"
	"testing"
	"time"
)

// kernelTimeout is a cell's timeout in these tests: the first cell starts
// the kernel (an IPython start in gVisor, on a host shared with
// other sandbox tests), which can take many seconds.
const kernelTimeout = 60 * time.Second

func kernelSession(t testing.TB, e *Executor) Session {
	t.Helper()
	s, err := e.CreateSession(context.Background(), SessionSpec{Language: "python", Owner: "k1", Kernel: true})
	if err != nil {
		t.Fatalf("creating kernel session: %v", err)
	}
	if !s.Kernel {
		t.Fatalf("session does not say kernel: %+v", s)
	}
	return s
}

func cell(t testing.TB, e *Executor, id, code string, timeout time.Duration) Result {
	t.Helper()
	res, err := e.Execute(context.Background(), "k1", id, ExecRequest{Code: code, Timeout: timeout})
	if err != nil {
		t.Fatalf("cell %q: %v", code, err)
	}
	return res
}

// mainText is the text/plain of a result's main result ("" if none).
func mainText(r Result) string {
	for _, c := range r.Results {
		if c.IsMainResult {
			s, _ := c.Data["text/plain"].(string)
			return s
		}
	}
	return ""
}

// One kernel session, cell after cell: state persists, rich outputs,
// exceptions, an interrupt that keeps the state, a restart that does not.
func TestKernelCells(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := kernelSession(t, e)

	t.Run("variables persist over three cells", func(t *testing.T) {
		r := cell(t, e, s.ID, "x = 40\nimport math\nprint('set')", kernelTimeout)
		if r.Status != StatusOK || r.Stdout != "set\n" || r.KernelRestarted || len(r.Results) != 0 {
			t.Fatalf("first cell: %+v", r)
		}
		r = cell(t, e, s.ID, "x += 1", kernelTimeout)
		if r.Status != StatusOK || r.ExitCode != 0 || r.KernelRestarted {
			t.Fatalf("second cell: %+v", r)
		}
		r = cell(t, e, s.ID, "x + 1", kernelTimeout)
		if r.Status != StatusOK || mainText(r) != "42" || r.KernelRestarted {
			t.Fatalf("third cell: %+v", r)
		}
		if len(r.Results) != 1 || r.Results[0].Type != "execute_result" {
			t.Fatalf("third cell's results: %+v", r.Results)
		}
	})

	t.Run("a plot comes back as a PNG that decodes", func(t *testing.T) {
		r := cell(t, e, s.ID, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.show()", kernelTimeout)
		if r.Status != StatusOK {
			t.Fatalf("plot cell: %+v", r)
		}
		var pngs int
		for _, c := range r.Results {
			b64, ok := c.Data["image/png"].(string)
			if !ok {
				continue
			}
			pngs++
			if c.Type != "display_data" || c.IsMainResult {
				t.Errorf("plot result: type %q main %v", c.Type, c.IsMainResult)
			}
			raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
			if err != nil {
				t.Fatalf("image/png is not base64: %v", err)
			}
			img, err := png.Decode(bytes.NewReader(raw))
			if err != nil {
				t.Fatalf("image/png does not decode: %v", err)
			}
			if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
				t.Fatalf("plot of %v", b)
			}
		}
		if pngs != 1 {
			t.Fatalf("%d PNGs in %+v", pngs, r.Results)
		}
	})

	t.Run("rich reprs", func(t *testing.T) {
		r := cell(t, e, s.ID, "import pandas as pd\npd.DataFrame({'a': [1, 2]})", kernelTimeout)
		if r.Status != StatusOK || len(r.Results) != 1 {
			t.Fatalf("dataframe cell: %+v", r)
		}
		if html, _ := r.Results[0].Data["text/html"].(string); !strings.Contains(html, "<table") {
			t.Fatalf("dataframe has no HTML table: %+v", r.Results[0].Data)
		}
	})

	t.Run("an exception reports its name and traceback", func(t *testing.T) {
		r := cell(t, e, s.ID, "def f():\n    return 1 / 0\nf()", kernelTimeout)
		if r.Status != StatusError || r.ExitCode != 1 || r.Error == nil {
			t.Fatalf("exception cell: %+v", r)
		}
		if r.Error.Name != "ZeroDivisionError" || !strings.Contains(r.Error.Value, "division by zero") {
			t.Fatalf("error: %+v", r.Error)
		}
		tb := strings.Join(r.Error.Traceback, "\n")
		if !strings.Contains(tb, "1 / 0") || strings.Contains(tb, "\x1b[") {
			t.Fatalf("traceback (want the failing line, no ANSI codes): %q", tb)
		}
		if r.KernelRestarted {
			t.Fatal("an exception does not restart the kernel")
		}
	})

	t.Run("a timeout interrupts and the state stays", func(t *testing.T) {
		start := time.Now()
		r := cell(t, e, s.ID, "print('looping', flush=True)\nwhile True:\n    pass", 2*time.Second)
		if r.Status != StatusTimeout || r.KernelRestarted || !strings.Contains(r.Stdout, "looping") {
			t.Fatalf("timed-out cell: %+v", r)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Fatalf("the interrupt took %s", took)
		}
		r = cell(t, e, s.ID, "x", kernelTimeout)
		if r.Status != StatusOK || mainText(r) != "41" || r.KernelRestarted {
			t.Fatalf("after the interrupt: %+v", r)
		}
	})

	t.Run("output over the cap is cut", func(t *testing.T) {
		r := cell(t, e, s.ID, "for i in range(20000):\n    print('y' * 100)", kernelTimeout)
		if r.Status != StatusOutputLimit || !r.Truncated || int64(len(r.Stdout)) > 64<<10 {
			t.Fatalf("flood: status %s truncated %v, %d bytes", r.Status, r.Truncated, len(r.Stdout))
		}
		// One message over the cap (cut in the guest) is over it too.
		r = cell(t, e, s.ID, "print('w' * 300000)", kernelTimeout)
		if r.Status != StatusOutputLimit || !r.Truncated || int64(len(r.Stdout)) > 64<<10 || len(r.Stdout) < 1000 {
			t.Fatalf("one big print: status %s truncated %v, %d bytes", r.Status, r.Truncated, len(r.Stdout))
		}
		r = cell(t, e, s.ID, "x", kernelTimeout)
		if r.Status != StatusOK || mainText(r) != "41" {
			t.Fatalf("after the flood: %+v", r)
		}
		// A result bigger than the cap is left out, and said so.
		r = cell(t, e, s.ID, "from IPython.display import HTML, display\ndisplay(HTML('z' * 200000))\n'small'", kernelTimeout)
		if r.Status != StatusOK || !r.Truncated || mainText(r) != "'small'" {
			t.Fatalf("big display: %+v", r)
		}
		for _, c := range r.Results {
			if h, _ := c.Data["text/html"].(string); len(h) > 64<<10 {
				t.Fatalf("a %d-byte HTML result passed the cap", len(h))
			}
		}
	})

	t.Run("restart clears the variables", func(t *testing.T) {
		if _, err := e.Kernels().RestartKernel(context.Background(), "k1", s.ID); err != nil {
			t.Fatal(err)
		}
		r := cell(t, e, s.ID, "x", kernelTimeout)
		if r.Status != StatusError || r.Error == nil || r.Error.Name != "NameError" {
			t.Fatalf("after restart: %+v", r)
		}
		if r.KernelRestarted {
			t.Fatal("an asked-for restart is not reported as a lost kernel")
		}
		// The killed bridge's private folder went with the new one's start.
		r = cell(t, e, s.ID, "import glob\nlen(glob.glob('/tmp/.sbx-kernel-*'))", kernelTimeout)
		if mainText(r) != "1" {
			t.Fatalf("kernel folders in /tmp after a restart: %+v", r)
		}
	})

	t.Run("a hibernated session's kernel keeps its variables", func(t *testing.T) {
		cell(t, e, s.ID, "y = 41", kernelTimeout)
		h, err := e.Durable().HibernateSession(context.Background(), "k1", s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if h.CheckpointBytes <= 0 {
			t.Fatalf("a kernel session hibernated without a checkpoint: %+v", h)
		}
		r := cell(t, e, s.ID, "y + 1", kernelTimeout)
		if r.Status != StatusOK || r.KernelRestarted || mainText(r) != "42" {
			t.Fatalf("after hibernation: %+v", r)
		}
		if r.Memory == nil || !r.Memory.Restored {
			t.Fatalf("the resume's reply does not say the memory came back: %+v", r.Memory)
		}
	})

	t.Run("a kernel whose checkpoint is lost says it restarted, once", func(t *testing.T) {
		cell(t, e, s.ID, "z = 1", kernelTimeout)
		if _, err := e.Durable().HibernateSession(context.Background(), "k1", s.ID); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(checkpointDir(e.boxes.home(s.ID))); err != nil {
			t.Fatal(err)
		}
		r := cell(t, e, s.ID, "print('back')", kernelTimeout)
		if r.Status != StatusOK || !r.KernelRestarted || r.Stdout != "back\n" {
			t.Fatalf("after a lost checkpoint: %+v", r)
		}
		if r.Memory == nil || r.Memory.Restored || r.Memory.Reason == "" {
			t.Fatalf("the resume's reply does not say why the memory was lost: %+v", r.Memory)
		}
		r = cell(t, e, s.ID, "'z' in globals()", kernelTimeout)
		if r.KernelRestarted || mainText(r) != "False" {
			t.Fatalf("reported twice, or the variable survived: %+v", r)
		}
	})
}

// A kernel that dies (its own os._exit, the memory limit) is replaced, and
// the reply says so: the caller must not believe its variables exist.
func TestKernelDeathReported(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := kernelSession(t, e)
	cell(t, e, s.ID, "x = 1", kernelTimeout)

	r := cell(t, e, s.ID, "import os\nos._exit(1)", kernelTimeout)
	if !r.KernelRestarted || r.Status != StatusError || r.Error == nil || r.Error.Name != "KernelDied" {
		t.Fatalf("os._exit cell: %+v", r)
	}
	r = cell(t, e, s.ID, "x", kernelTimeout)
	if r.Error == nil || r.Error.Name != "NameError" || r.KernelRestarted {
		t.Fatalf("after os._exit: %+v", r)
	}

	// A cell that ignores the interrupt at its deadline loses its kernel.
	cell(t, e, s.ID, "x = 3", kernelTimeout)
	r = cell(t, e, s.ID, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", 2*time.Second)
	if r.Status != StatusTimeout || !r.KernelRestarted || r.Error == nil || r.Error.Name != "KernelDied" || r.Signal != "SIGKILL" {
		t.Fatalf("a cell deaf to the interrupt: %+v", r)
	}
	r = cell(t, e, s.ID, "x", kernelTimeout)
	if r.Error == nil || r.Error.Name != "NameError" || r.KernelRestarted {
		t.Fatalf("after the deaf cell: %+v", r)
	}

	cell(t, e, s.ID, "x = 2", kernelTimeout)
	// Past the executor's 256 MiB limit: the guest kills the kernel, never
	// the sandbox.
	r = cell(t, e, s.ID, "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))", kernelTimeout)
	if !r.KernelRestarted || r.Status != StatusOOM {
		t.Fatalf("memory bomb cell: %+v", r)
	}
	r = cell(t, e, s.ID, "print('alive')\nx", kernelTimeout)
	if r.Status != StatusError || r.Stdout != "alive\n" || r.Error == nil || r.Error.Name != "NameError" {
		t.Fatalf("after the memory bomb: %+v", r)
	}
}

// Kernels are python3's alone; a session without one is unchanged.
func TestKernelOnlyPython(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	if _, err := e.CreateSession(context.Background(), SessionSpec{Language: "bash", Owner: "k1", Kernel: true}); !errors.Is(err, ErrKernelUnsupported) {
		t.Fatalf("bash kernel session: %v", err)
	}
	s := mustSession(t, e, "python3")
	if s.Kernel {
		t.Fatal("a plain session says kernel")
	}
	cell(t, e, s.ID, "x = 1", 0)
	r := run(t, e, s.ID, "print(2)\n2 + 2", 0)
	if r.Stdout != "2\n" || len(r.Results) != 0 || r.Error != nil || r.KernelRestarted {
		t.Fatalf("plain session: %+v", r)
	}
	r = run(t, e, s.ID, "print(x)", 0)
	if r.Status != StatusError || !strings.Contains(r.Stderr, "NameError") || r.Error != nil {
		t.Fatalf("plain session kept a variable or reported a cell error: %+v", r)
	}
	if _, err := e.Kernels().RestartKernel(context.Background(), "k1", s.ID); !errors.Is(err, ErrNoKernel) {
		t.Fatalf("restart of a plain session: %v", err)
	}
}

// BenchmarkKernelCellVsProcess runs `x + 1` as a kernel cell and as a
// fresh process in a plain session, side by side, and reports the ratio
// (goal: the cell at most a third of the process):
//
//	go test ./executor -run '^$' -bench BenchmarkKernelCellVsProcess -benchtime 30x
func BenchmarkKernelCellVsProcess(b *testing.B) {
	e, _ := startExecutor(b)
	ks := kernelSession(b, e)
	ps := mustSession(b, e, "python3")
	cell(b, e, ks.ID, "x = 1", kernelTimeout)
	cell(b, e, ps.ID, "x = 1", kernelTimeout) // a warm-up of the plain sandbox
	var kernel, process time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		r := cell(b, e, ks.ID, "x + 1", kernelTimeout)
		t1 := time.Now()
		p := cell(b, e, ps.ID, "x = 1\nprint(x + 1)", kernelTimeout)
		t2 := time.Now()
		if mainText(r) != "2" || p.Stdout != "2\n" {
			b.Fatalf("cell %+v, process %+v", r, p)
		}
		kernel += t1.Sub(t0)
		process += t2.Sub(t1)
	}
	b.StopTimer()
	b.ReportMetric(float64(kernel.Microseconds())/float64(b.N), "kernel-µs/op")
	b.ReportMetric(float64(process.Microseconds())/float64(b.N), "process-µs/op")
	b.ReportMetric(float64(kernel)/float64(process), "kernel/process")
}

// A fork of a kernel session gets the parent's variables (a restore of a
// copy of its checkpoint); from there the two kernels diverge.
func TestKernelFork(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	ctx := context.Background()
	parent := kernelSession(t, e)
	defer e.DeleteSession(ctx, "k1", parent.ID)
	cell(t, e, parent.ID, "x = 1\nimport numpy as np\na = np.arange(1000)", kernelTimeout)
	child, err := e.Durable().ForkSession(ctx, parent.ID, ForkSpec{Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.DeleteSession(ctx, "k1", child.ID)
	if !child.Kernel || !child.Live || child.CheckpointBytes <= 0 {
		t.Fatalf("the fork is not a kernel session waiting in a checkpoint: %+v", child)
	}
	r := cell(t, e, child.ID, "x, int(a.sum())", kernelTimeout)
	if r.Status != StatusOK || r.KernelRestarted || mainText(r) != "(1, 499500)" {
		t.Fatalf("the fork's first cell: %+v", r)
	}
	cell(t, e, child.ID, "x = 2", kernelTimeout)
	if r := cell(t, e, parent.ID, "x", kernelTimeout); mainText(r) != "1" || r.KernelRestarted {
		t.Fatalf("the child's change reached the parent: %+v", r)
	}
	cell(t, e, parent.ID, "x = 3", kernelTimeout)
	if r := cell(t, e, child.ID, "x", kernelTimeout); mainText(r) != "2" {
		t.Fatalf("the parent's change reached the child: %+v", r)
	}
}
