package e2b

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFork: each child is a new sandbox of the same key with the source's
// files, template, metadata and env vars, a token of its own and its own
// end; it runs (not paused); forks past the plan's quota fail one by one
// in E2B's per-fork shape while the others stand.
func TestFork(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	src := g.create("sk_a", map[string]any{"templateID": "code-interpreter-v1", "metadata": map[string]string{"team": "x"}, "envVars": map[string]string{"TOKEN": "env-secret"}})
	if r := g.do("POST", "/e2b/sandbox/files?path=/home/user/a.txt", strings.NewReader("kept"),
		map[string]string{"E2b-Sandbox-Id": src.SandboxID, "X-Access-Token": src.EnvdAccessToken, "Content-Type": "application/octet-stream"}); r.status != http.StatusOK {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	r := g.json("POST", "/e2b/sandboxes/"+src.SandboxID+"/fork", "sk_a", map[string]any{"count": 5, "timeout": 120})
	if r.status != http.StatusCreated {
		t.Fatalf("fork: %d %s", r.status, r.body)
	}
	var out []forkResult
	if err := json.Unmarshal(r.body, &out); err != nil || len(out) != 5 {
		t.Fatalf("fork reply %s (%v)", r.body, err)
	}
	ok := 0
	for i, f := range out {
		if (f.Sandbox == nil) == (f.Error == nil) {
			t.Fatalf("entry %d sets not exactly one of sandbox and error: %s", i, r.body)
		}
		if f.Error != nil {
			// The fake's quota: the source and 3 forks.
			if i < fakeForkLimit-1 || f.Error.Code != http.StatusTooManyRequests || f.Error.Message == "" {
				t.Fatalf("entry %d: %+v", i, f.Error)
			}
			continue
		}
		ok++
		c := f.Sandbox
		if c.SandboxID == src.SandboxID || c.EnvdAccessToken == "" || c.EnvdAccessToken == src.EnvdAccessToken || c.TemplateID != "code-interpreter-v1" {
			t.Fatalf("child %+v of %+v", c, src)
		}
		if b, _ := g.api.file(c.SandboxID, "/home/sandbox/a.txt"); string(b) != "kept" {
			t.Fatalf("child's file %q", b)
		}
		var info sandboxInfo
		gr := g.json("GET", "/e2b/sandboxes/"+c.SandboxID, "sk_a", nil)
		if err := json.Unmarshal(gr.body, &info); err != nil || gr.status != http.StatusOK {
			t.Fatalf("child info: %d %s", gr.status, gr.body)
		}
		if info.State != "running" || info.Metadata["team"] != "x" || info.EnvdAccessToken != c.EnvdAccessToken ||
			info.EndAt.Sub(g.now) > 121*time.Second || info.EndAt.Sub(g.now) < 119*time.Second {
			t.Fatalf("child info %+v", info)
		}
		rec, err := g.st.E2BSandbox(context.Background(), c.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		env, err := unseal("sk_a", c.SandboxID, purposeEnv, rec.SealedEnv)
		if err != nil || !strings.Contains(string(env), "env-secret") {
			t.Fatalf("child's env vars %q (%v)", env, err)
		}
		// The child's token opens the child, not the source.
		if r := g.do("GET", "/e2b/sandbox/files?path=/home/user/a.txt", nil, map[string]string{"E2b-Sandbox-Id": src.SandboxID, "X-Access-Token": c.EnvdAccessToken}); r.status != http.StatusUnauthorized {
			t.Fatalf("child's token on the source: %d", r.status)
		}
	}
	if ok != fakeForkLimit-1 {
		t.Fatalf("%d forks made, want %d", ok, fakeForkLimit-1)
	}
	if n := len(g.api.sessions); n != fakeForkLimit {
		t.Fatalf("%d sessions after the fork, want %d (no failed fork left one)", n, fakeForkLimit)
	}

	wantE2BError(t, "count 0", g.json("POST", "/e2b/sandboxes/"+src.SandboxID+"/fork", "sk_a", map[string]any{"count": 0}), http.StatusBadRequest)
	wantE2BError(t, "count too big", g.json("POST", "/e2b/sandboxes/"+src.SandboxID+"/fork", "sk_a", map[string]any{"count": maxForks + 1}), http.StatusBadRequest)
	wantE2BError(t, "negative timeout", g.json("POST", "/e2b/sandboxes/"+src.SandboxID+"/fork", "sk_a", map[string]any{"timeout": -1}), http.StatusBadRequest)
	wantE2BError(t, "another key", g.json("POST", "/e2b/sandboxes/"+src.SandboxID+"/fork", "sk_b", nil), http.StatusNotFound)
}

// TestMetrics: one sample now, only what is known (the disk's size); a
// window that misses now is empty; bad bounds are 400.
func TestMetrics(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	a := g.create("sk_a", nil)
	path := "/e2b/sandboxes/" + a.SandboxID + "/metrics"
	r := g.json("GET", path, "sk_a", nil)
	var ms []metric
	if err := json.Unmarshal(r.body, &ms); err != nil || r.status != http.StatusOK || len(ms) != 1 {
		t.Fatalf("metrics: %d %s", r.status, r.body)
	}
	m := ms[0]
	if m.DiskTotal != 64<<20 || m.CPUCount != 1 || m.TimestampUnix != g.now.Unix() || m.MemUsed != 0 || m.CPUUsedPct != 0 {
		t.Fatalf("metric %+v", m)
	}
	if ts, err := time.Parse(time.RFC3339, m.Timestamp); err != nil || ts.Unix() != m.TimestampUnix {
		t.Fatalf("timestamp %q (%v)", m.Timestamp, err)
	}
	past := g.now.Add(-time.Hour).Unix()
	r = g.json("GET", path+"?start=1&end="+strconv.FormatInt(past, 10), "sk_a", nil)
	if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("window in the past: %d %s", r.status, r.body)
	}
	wantE2BError(t, "bad start", g.json("GET", path+"?start=x", "sk_a", nil), http.StatusBadRequest)
	wantE2BError(t, "end before start", g.json("GET", path+"?start=10&end=5", "sk_a", nil), http.StatusBadRequest)
	wantE2BError(t, "another key", g.json("GET", path, "sk_b", nil), http.StatusNotFound)
}
