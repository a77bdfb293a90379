package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id, name string
	data     map[string]any
}

// readSSE reads a stream's events until it ends; the status alone when
// it is not 200. Safe to call from any goroutine.
func (s *server) readSSE(key, path string, timeout time.Duration) (int, []sseEvent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url(path), nil)
	req.Header.Set("X-RapidAPI-Key", key)
	resp, err := s.client().Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, nil
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		return 0, nil, fmt.Errorf("output stream of type %q", ct)
	}
	var out []sseEvent
	var ev sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.name != "" {
				out = append(out, ev)
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[6:]), &ev.data); err != nil {
				return 0, nil, fmt.Errorf("event data %q: %w", line, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return http.StatusOK, out, nil
}

// mustSSE is readSSE on the test's goroutine, expecting a stream.
func (s *server) mustSSE(t *testing.T, key, path string, timeout time.Duration) []sseEvent {
	t.Helper()
	st, evs, err := s.readSSE(key, path, timeout)
	if err != nil || st != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, st, err)
	}
	return evs
}

// outputOf joins the events' data per stream and returns the exit event.
func outputOf(t *testing.T, evs []sseEvent) (map[string]string, map[string]any) {
	t.Helper()
	out := map[string]string{}
	var exit map[string]any
	last := int64(-1)
	for _, ev := range evs {
		switch ev.name {
		case "stdout", "stderr", "pty":
			d := ev.data["data"].(string)
			out[ev.name] += d
			off := int64(ev.data["offset"].(float64))
			id, err := strconv.ParseInt(ev.id, 10, 64)
			if err != nil || id != off+int64(len(d)) || id <= last {
				t.Fatalf("event id %q after offset %d of %d bytes (previous %d)", ev.id, off, len(d), last)
			}
			last = id
		case "exit":
			exit = ev.data
		case "error":
			t.Fatalf("stream error: %v", ev.data)
		}
	}
	return out, exit
}

func TestBackgroundProcessesAPI(t *testing.T) {
	s := startServer(t, "")
	key, other := s.key("PRO"), s.key("PRO")
	id := s.session(key, "bash")
	base := "/v1/sessions/" + id + "/processes"

	r := s.do("POST", base, key, map[string]any{"cmd": "bash", "args": []string{"-c", "echo ready; while read l; do echo got:$l; done; echo bye >&2; exit 4"}, "stdin": true, "tag": "echoer"})
	if r.status != http.StatusCreated {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	p := r.json(t)
	pid := int(p["pid"].(float64))
	if p["state"] != "running" || p["tag"] != "echoer" || p["id"] != strconv.Itoa(pid) || p["started_at"] == nil || p["stdin"] != true {
		t.Fatalf("started: %v", p)
	}
	procURL := fmt.Sprintf("%s/%d", base, pid)

	// Follow the output live while stdin is written.
	type result struct {
		status int
		evs    []sseEvent
		err    error
	}
	followed := make(chan result, 1)
	go func() {
		st, evs, err := s.readSSE(key, procURL+"/output?follow=true", 2*time.Minute)
		followed <- result{st, evs, err}
	}()
	if r := s.do("POST", procURL+"/stdin", key, []byte("a\n")); r.status != http.StatusOK || r.json(t)["written"] != float64(2) {
		t.Fatalf("stdin: %d %s", r.status, r.body)
	}
	// An execute runs beside it and does not end it.
	if out := s.exec(key, id, "echo beside"); out["stdout"] != "beside\n" {
		t.Fatalf("execute beside a process: %v", out)
	}
	if r := s.do("POST", procURL+"/stdin?eof=true", key, []byte("b\n")); r.status != http.StatusOK {
		t.Fatalf("stdin eof: %d %s", r.status, r.body)
	}
	res := <-followed
	if res.err != nil || res.status != http.StatusOK {
		t.Fatalf("output stream: %d %v", res.status, res.err)
	}
	out, exit := outputOf(t, res.evs)
	if out["stdout"] != "ready\ngot:a\ngot:b\n" || out["stderr"] != "bye\n" {
		t.Fatalf("followed output %q", out)
	}
	if exit == nil || exit["state"] != "exited" || exit["exit_code"] != float64(4) || exit["ended_at"] == nil {
		t.Fatalf("exit event %v", exit)
	}

	// The finished process's output again, whole, and from an offset.
	evs := s.mustSSE(t, key, procURL+"/output", time.Minute)
	if again, exit := outputOf(t, evs); again["stdout"] != out["stdout"] || exit == nil {
		t.Fatalf("replayed output %q exit %v", again, exit)
	}
	evs = s.mustSSE(t, key, procURL+"/output?from=6", time.Minute)
	if rest, _ := outputOf(t, evs); !strings.HasPrefix(rest["stdout"], "got:a\n") || strings.Contains(rest["stdout"], "ready") {
		t.Fatalf("output from 6: %q", rest)
	}

	r = s.do("GET", base, key, nil)
	if r.status != http.StatusOK {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var list struct {
		Processes []map[string]any `json:"processes"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Processes) != 1 || list.Processes[0]["state"] != "exited" {
		t.Fatalf("list: %s", r.body)
	}

	// A terminal, resized.
	r = s.do("POST", base, key, map[string]any{"cmd": "bash", "args": []string{"-c", "stty size; read x; stty size"}, "pty": map[string]any{"cols": 90, "rows": 30}})
	if r.status != http.StatusCreated {
		t.Fatalf("start pty: %d %s", r.status, r.body)
	}
	tpid := int(r.json(t)["pid"].(float64))
	turl := fmt.Sprintf("%s/%d", base, tpid)
	if r := s.do("POST", turl+"/resize", key, map[string]any{"cols": 100, "rows": 50}); r.status != http.StatusNoContent {
		t.Fatalf("resize: %d %s", r.status, r.body)
	}
	if r := s.do("POST", turl+"/stdin", key, []byte("\n")); r.status != http.StatusOK {
		t.Fatalf("pty stdin: %d %s", r.status, r.body)
	}
	evs = s.mustSSE(t, key, turl+"/output?follow=true", 2*time.Minute)
	if tout, exit := outputOf(t, evs); !strings.Contains(tout["pty"], "50 100") || exit == nil || exit["exit_code"] != float64(0) {
		t.Fatalf("terminal output %q exit %v", tout, exit)
	}

	// A long runner, then a signal.
	r = s.do("POST", base, key, map[string]any{"cmd": "sleep", "args": []string{"300"}})
	if r.status != http.StatusCreated {
		t.Fatalf("start sleep: %d %s", r.status, r.body)
	}
	spid := int(r.json(t)["pid"].(float64))
	surl := fmt.Sprintf("%s/%d", base, spid)

	bad := []struct {
		name, method, path, key string
		body                    any
		status                  int
		code                    string
	}{
		{"unknown pid", "GET", base + "/999999", key, nil, 404, "process_not_found"},
		{"pid not a number", "GET", base + "/abc", key, nil, 404, "process_not_found"},
		{"pid with a sign", "GET", base + "/+1", key, nil, 404, "process_not_found"},
		{"another key's session", "GET", procURL, other, nil, 404, "not_found"},
		{"another key's output", "GET", procURL + "/output", other, nil, 404, "not_found"},
		{"stdin of an ended process", "POST", procURL + "/stdin", key, []byte("x"), 409, "process_not_running"},
		{"stdin never opened", "POST", surl + "/stdin", key, []byte("x"), 409, "process_stdin_closed"},
		{"bad eof", "POST", surl + "/stdin?eof=maybe", key, []byte("x"), 400, "invalid_request"},
		{"unknown signal", "POST", surl + "/signal", key, map[string]any{"signal": "SIGNOPE"}, 400, "invalid_request"},
		{"signal as a number", "POST", surl + "/signal", key, map[string]any{"signal": 9}, 400, "invalid_json"},
		{"resize a pipe process", "POST", surl + "/resize", key, map[string]any{"cols": 80, "rows": 24}, 409, "process_not_pty"},
		{"resize to nothing", "POST", turl + "/resize", key, map[string]any{"cols": 0, "rows": 24}, 400, "invalid_request"},
		{"no cmd", "POST", base, key, map[string]any{"args": []string{"x"}}, 400, "invalid_request"},
		{"missing program", "POST", base, key, map[string]any{"cmd": "no-such-program"}, 400, "process_start_failed"},
		{"relative cwd", "POST", base, key, map[string]any{"cmd": "true", "cwd": "../etc"}, 400, "invalid_request"},
		{"negative timeout", "POST", base, key, map[string]any{"cmd": "true", "timeout": -1}, 400, "invalid_request"},
		{"huge terminal", "POST", base, key, map[string]any{"cmd": "true", "pty": map[string]any{"cols": 100000, "rows": 2}}, 400, "invalid_request"},
		{"unknown field", "POST", base, key, map[string]any{"cmd": "true", "shell": true}, 400, "unknown_field"},
		{"bad from", "GET", surl + "/output?from=-3", key, nil, 400, "invalid_request"},
	}
	for _, tt := range bad {
		r := s.do(tt.method, tt.path, tt.key, tt.body)
		if r.status != tt.status || r.errCode(t) != tt.code {
			t.Errorf("%s: %d %s, want %d %s", tt.name, r.status, r.body, tt.status, tt.code)
		}
	}

	if r := s.do("POST", surl+"/signal", key, map[string]any{"signal": "SIGKILL"}); r.status != http.StatusNoContent {
		t.Fatalf("signal: %d %s", r.status, r.body)
	}
	evs = s.mustSSE(t, key, surl+"/output?follow=true", time.Minute)
	if _, exit := outputOf(t, evs); exit == nil || exit["signal"] != "SIGKILL" || exit["exit_code"] != float64(137) {
		t.Fatalf("after SIGKILL: %v", exit)
	}

	if r := s.do("DELETE", "/v1/sessions/"+id, key, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := s.do("GET", base, key, nil); r.status != http.StatusNotFound {
		t.Fatalf("processes of a deleted session: %d %s", r.status, r.body)
	}
}
