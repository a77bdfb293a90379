package e2e

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// kernelCell runs one cell through the built server's API.
func kernelCell(t *testing.T, s *server, key, id, code string) wire.ExecuteResult {
	t.Helper()
	r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": code, "timeout": 60})
	if r.status != http.StatusOK {
		t.Fatalf("cell %q: %d %s", code, r.status, r.body)
	}
	var res wire.ExecuteResult
	if err := json.Unmarshal(r.body, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// A kernel session through the real binary: state across cells, a plot
// streamed as a display event, restart, the kernel flag kept across a
// server restart and a crash (whose next cell says the kernel restarted),
// and the refusals.
func TestKernelSessionEndToEnd(t *testing.T) {
	s := startServer(t, "")
	key := s.key("PRO")

	if r := s.do("POST", "/v1/sessions", key, map[string]any{"language": "bash", "kernel": true}); r.status != http.StatusBadRequest || r.errCode(t) != "kernel_unsupported" {
		t.Fatalf("bash kernel: %d %s", r.status, r.body)
	}
	plain := s.session(key, "python3")
	if r := s.do("POST", "/v1/sessions/"+plain+"/kernel/restart", key, nil); r.status != http.StatusConflict || r.errCode(t) != "no_kernel" {
		t.Fatalf("restart of a plain session: %d %s", r.status, r.body)
	}
	if r := s.do("DELETE", "/v1/sessions/"+plain, key, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d", r.status)
	}

	r := s.do("POST", "/v1/sessions", key, map[string]any{"language": "python3", "kernel": true})
	if r.status != http.StatusCreated || r.json(t)["kernel"] != true {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	kernelCell(t, s, key, id, "x = 20")
	kernelCell(t, s, key, id, "x *= 2")
	if res := kernelCell(t, s, key, id, "x + 2"); res.Status != "ok" || len(res.Results) != 1 || res.Results[0].Data["text/plain"] != "42" || !res.Results[0].IsMainResult {
		t.Fatalf("third cell: %+v", res)
	}
	if res := kernelCell(t, s, key, id, "raise ValueError('bad input')"); res.Status != "error" || res.Error == nil || res.Error.Name != "ValueError" || res.Error.Value != "bad input" {
		t.Fatalf("exception: %+v", res)
	}

	// Streamed: a print, then the plot as a display event, then the result.
	body, _ := json.Marshal(map[string]any{"code": "print('plotting', flush=True)\nimport matplotlib.pyplot as plt\nplt.plot([0, 1], [1, 0])\nplt.show()", "stream": true, "timeout": 60})
	req, _ := http.NewRequest("POST", s.url("/v1/sessions/"+id+"/execute"), bytes.NewReader(body))
	req.Header.Set("X-RapidAPI-Key", key)
	resp, err := s.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	var display wire.CellResult
	var final wire.ExecuteResult
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
			events = append(events, event)
		case strings.HasPrefix(line, "data: ") && event == "display":
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &display); err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(line, "data: ") && event == "result":
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &final); err != nil {
				t.Fatal(err)
			}
		}
	}
	resp.Body.Close()
	if got := strings.Join(events, ","); got != "stdout,display,result" {
		t.Fatalf("events %s", got)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(display.Data["image/png"].(string)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(raw)); err != nil {
		t.Fatalf("the streamed plot does not decode: %v", err)
	}
	if final.Status != "ok" || len(final.Results) != 1 || final.Stdout != "plotting\n" {
		t.Fatalf("streamed result: %+v", final)
	}

	if r := s.do("POST", "/v1/sessions/"+id+"/kernel/restart", key, nil); r.status != http.StatusOK || r.json(t)["kernel"] != true {
		t.Fatalf("restart: %d %s", r.status, r.body)
	}
	if res := kernelCell(t, s, key, id, "x"); res.Error == nil || res.Error.Name != "NameError" || res.KernelRestarted {
		t.Fatalf("after restart: %+v", res)
	}
	kernelCell(t, s, key, id, "y = 1")

	// A server restart: the stop hibernates the session into a checkpoint
	// and the next cell finds its variables in the restored kernel.
	s.stop()
	s.start()
	if r := s.do("GET", "/v1/sessions/"+id, key, nil); r.status != http.StatusOK || r.json(t)["kernel"] != true {
		t.Fatalf("after the server restart: %d %s", r.status, r.body)
	}
	if res := kernelCell(t, s, key, id, "y + 1"); res.KernelRestarted || len(res.Results) != 1 || res.Results[0].Data["text/plain"] != "2" {
		t.Fatalf("first cell after the server restart: %+v", res)
	}
	kernelCell(t, s, key, id, "z = 1")

	// A crash (SIGKILL): the sandbox outlives the server; the new server
	// adopts it and regains its channel by a checkpoint and restore, so
	// the kernel keeps its variables.
	s.kill()
	s.start()
	if res := kernelCell(t, s, key, id, "'z' in globals()"); res.KernelRestarted || len(res.Results) != 1 || res.Results[0].Data["text/plain"] != "True" {
		t.Fatalf("first cell after the crash: %+v", res)
	}

	// A checkpoint that cannot be restored: the session resumes on its
	// files with a fresh kernel and says so, once.
	if r := s.do("POST", "/v1/sessions/"+id+"/hibernate", key, nil); r.status != http.StatusOK {
		t.Fatalf("hibernate: %d %s", r.status, r.body)
	}
	ckpt := filepath.Join(s.dataDir, "sessions", id, "checkpoint")
	if _, err := os.Stat(ckpt); err != nil {
		t.Fatalf("no checkpoint beside the home: %v", err)
	}
	if err := os.RemoveAll(ckpt); err != nil {
		t.Fatal(err)
	}
	if res := kernelCell(t, s, key, id, "'z' in globals()"); !res.KernelRestarted || len(res.Results) != 1 || res.Results[0].Data["text/plain"] != "False" {
		t.Fatalf("first cell after a lost checkpoint: %+v", res)
	}
	if res := kernelCell(t, s, key, id, "1"); res.KernelRestarted {
		t.Fatalf("the restart reported twice: %+v", res)
	}
}
