package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestServeFailedStartUnwinds starts serve on a port already taken: the
// HTTP server, last to start, fails, and everything started before it
// stops in reverse order (readiness, executor, then what opened while
// wiring: mirror, usage writer, egress, store); the process exits non-zero
// naming the listener, leaves no sandbox behind, and the next serve on
// the same data dir starts.
func TestServeFailedStartUnwinds(t *testing.T) {
	s := startServer(t, "")
	key := s.key("PRO")
	s.session(key, "bash")
	s.stop()

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, "serve", "--config", s.config, "--data-dir", s.dataDir, "--listen", taken.Addr().String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err == nil {
		t.Fatalf("serve on a taken port exited 0:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "listening on "+taken.Addr().String()) {
		t.Errorf("the error does not name the listener:\n%s", tail(out.String(), 20))
	}
	var started, stopped []string
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	for sc.Scan() {
		var l struct{ Msg, Component string }
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		switch l.Msg {
		case "started":
			started = append(started, l.Component)
		case "stopped":
			stopped = append(stopped, l.Component)
		}
	}
	if want := []string{"executor", "installer", "readiness"}; !slices.Equal(started, want) {
		t.Errorf("started %q, want %q", started, want)
	}
	if want := []string{"readiness", "installer", "executor", "mirror", "usage", "egress", "store"}; !slices.Equal(stopped, want) {
		t.Errorf("stopped %q, want %q\n%s", stopped, want, tail(out.String(), 30))
	}
	if ids := warmIDs(s); len(ids) != 0 {
		t.Errorf("sandboxes left after the failed start: %v", ids)
	}

	s.addr = ""
	s.start()
	if r := s.do("GET", "/v1/sessions", key, nil); r.status != 200 {
		t.Fatalf("after the failed start, list sessions: %d %s", r.status, r.body)
	}
}
