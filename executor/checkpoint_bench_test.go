package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
)

// BenchmarkCheckpointRestore hibernates and resumes a live Python session
// holding about 100 MiB (random bytes: no zero pages to skip) several
// times and reports the p50 of runsc checkpoint and runsc restore (the
// restore up to the guest's hello on the new channel), of the whole
// hibernation and resume, and the image's size beside the sandbox's
// memory in use (its cgroup's memory.current). Goals on a 2-vCPU machine:
// checkpoint and restore at most 1 s each at p50.
//
//	go test ./executor -run '^$' -bench BenchmarkCheckpointRestore -benchtime 1x
func BenchmarkCheckpointRestore(b *testing.B) {
	const rounds = 5
	e, _ := startExecutor(b, func(c *Config) { c.WarmPool = 0; c.MemoryBytes = 512 << 20 })
	ctx := context.Background()
	s := mustSessionB(b, e)
	defer e.DeleteSession(ctx, "k1", s.ID)
	holdMemory(b, e, s.ID, 100<<20)
	var ckpt, restore, hib, resume []time.Duration
	e.ckpts.memTimed = func(op string, d time.Duration) {
		if op == "checkpoint" {
			ckpt = append(ckpt, d)
		} else {
			restore = append(restore, d)
		}
	}
	var inUse, image int64
	for i := 0; i < rounds*b.N; i++ {
		inUse = memoryCurrent(e, s.ID)
		t0 := time.Now()
		h, err := e.Durable().HibernateSession(ctx, "k1", s.ID)
		if err != nil || h.CheckpointBytes <= 0 {
			b.Fatalf("hibernate: %+v %v", h, err)
		}
		hib = append(hib, time.Since(t0))
		image = h.CheckpointBytes
		t0 = time.Now()
		if _, err := e.files.List(ctx, "k1", s.ID, "/home/sandbox"); err != nil {
			b.Fatalf("resume: %v", err)
		}
		resume = append(resume, time.Since(t0))
		if v, _ := e.GetSession(ctx, "k1", s.ID); v.Memory == nil || !v.Memory.Restored {
			b.Fatalf("memory not restored: %+v", v.Memory)
		}
	}
	b.ReportMetric(p50(ckpt).Seconds(), "checkpoint-s")
	b.ReportMetric(p50(restore).Seconds(), "restore-s")
	b.ReportMetric(p50(hib).Seconds(), "hibernate-s")
	b.ReportMetric(p50(resume).Seconds(), "resume-s")
	b.ReportMetric(float64(image)/(1<<20), "image-MiB")
	b.ReportMetric(float64(inUse)/(1<<20), "memory-MiB")
	b.Logf("p50 over %d: checkpoint %v, restore %v, hibernate %v, resume %v; image %.1f MiB, sandbox memory in use %.1f MiB",
		len(ckpt), p50(ckpt), p50(restore), p50(hib), p50(resume), float64(image)/(1<<20), float64(inUse)/(1<<20))
}

func mustSessionB(b *testing.B, e *Executor) Session {
	s, err := e.CreateSession(context.Background(), SessionSpec{Language: "python3", Owner: "k1"})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// holdMemory starts, as a run no call waits for (see makeLive), a Python
// process holding n random bytes, and marks the session live.
func holdMemory(b *testing.B, e *Executor, id string, n int) {
	code := "import os, time\nheld = os.urandom(" + strconv.Itoa(n) + ")\nopen('/tmp/held', 'w').write('ok')\nwhile True:\n    time.sleep(3600)\n"
	e.mu.Lock()
	s := e.sessions[id]
	rt := s.runtime
	s.live = true
	e.mu.Unlock()
	a := e.agents.For(id)
	if a == nil || a.Ready(10*time.Second) != nil {
		b.Fatal("no agent channel")
	}
	payload, _ := json.Marshal(guest.AgentRequest{Seq: 1 << 40, Request: *e.sessionRequest(rt, nil, ExecRequest{Code: code}, 30*time.Minute)})
	if err := a.Send(guest.FrameRun, payload); err != nil {
		b.Fatal(err)
	}
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if out, err := e.runsc.Run(context.Background(), "", "exec", id, "/bin/cat", "/tmp/held"); err == nil && string(out) == "ok" {
			return
		}
		if time.Now().After(end) {
			b.Fatal("the holder did not start")
		}
	}
}

// memoryCurrent is the sandbox's memory use as its cgroup counts it
// (memory.current on cgroup v2, memory.usage_in_bytes on v1), 0 when it
// cannot be read.
func memoryCurrent(e *Executor, id string) int64 {
	for _, d := range host.CgroupDirs() {
		if filepath.Base(d) != e.boxes.cgroupName(id) {
			continue
		}
		for _, f := range []string{"memory.current", "memory.usage_in_bytes"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				return n
			}
		}
	}
	return 0
}

func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
