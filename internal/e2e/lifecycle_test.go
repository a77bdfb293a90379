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

// TestServeFailedStartUnwinds starts serve where its listener cannot be
// opened. On a port another program holds it stops before anything
// starts (the instance check), naming the address and --listen. On a port
// the probe cannot judge (out of range: no socket is made, no traffic) the
// HTTP server, last to start, fails, and everything started before it
// stops in reverse order (readiness, executor, then what opened while
// wiring: mirror, usage writer, egress, store). Either way the process
// exits non-zero naming the listener, leaves no sandbox behind, and the
// next serve on the same data dir starts.
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
	serve := func(listen string) (out string, started, stopped []string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, s.bin, "serve", "--config", s.config, "--data-dir", s.dataDir, "--listen", listen)
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Run(); err == nil {
			t.Fatalf("serve on %s exited 0:\n%s", listen, b.String())
		}
		sc := bufio.NewScanner(bytes.NewReader(b.Bytes()))
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
		return b.String(), started, stopped
	}

	out, started, stopped := serve(taken.Addr().String())
	if !strings.Contains(out, "listen address "+taken.Addr().String()+" is in use") || !strings.Contains(out, "--listen ADDR") {
		t.Errorf("a taken port: the error does not name the listener and --listen:\n%s", tail(out, 20))
	}
	if len(started) != 0 || len(stopped) != 0 {
		t.Errorf("a taken port: started %q, stopped %q; want nothing started", started, stopped)
	}

	bad := "127.0.0.1:99999"
	out, started, stopped = serve(bad)
	if !strings.Contains(out, "listening on "+bad) {
		t.Errorf("the error does not name the listener:\n%s", tail(out, 20))
	}
	// Every unit but http (whose listener fails) started, in the order of
	// their needs (internal/app/units.go); they stop in reverse.
	if want := []string{"store", "metrics", "auth", "usage", "mirror", "egress", "executor", "sessions", "installer", "readiness", "api"}; !slices.Equal(started, want) {
		t.Errorf("started %q, want %q", started, want)
	}
	if want := []string{"api", "readiness", "installer", "sessions", "executor", "egress", "mirror", "usage", "auth", "metrics", "store"}; !slices.Equal(stopped, want) {
		t.Errorf("stopped %q, want %q\n%s", stopped, want, tail(out, 30))
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
