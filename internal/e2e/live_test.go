package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// TestLiveSessionSurvivesKill drives the built binary: a session whose
// row says it holds memory (the kernel and process features set that; no
// endpoint of this branch does, so the test writes the row) keeps what is
// in its sandbox's memory (a /tmp file: a tmpfs) through a SIGKILL of the
// server: the next start adopts the running sandbox and checkpoints and
// restores it for a new agent channel (the guest read EOF when the server
// died), and the session says memory_restored. Then a hibernation saves
// the memory (checkpoint_mb) and the resume brings it back, said on the
// execute reply; so do a SIGTERM stop and start. Every reply is checked against api/openapi.json.
func TestLiveSessionSurvivesKill(t *testing.T) {
	s := startServer(t, "executor:\n  warm_pool: 0\n  home_size: 64M\n")
	key := s.key("ULTRA")
	id := s.session(key, "python3")
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	if r := s.exec(key, id, "open('/tmp/mem','w').write('"+tok+"')"); r["status"] != "ok" {
		t.Fatalf("write: %v", r)
	}
	ctx := context.Background()
	st, err := store.OpenURL(ctx, s.storeURL, filepath.Join(s.dataDir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetSessionLive(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	st.Close()

	s.kill()
	s.start()
	var view map[string]any
	for end := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		r := s.do("GET", "/v1/sessions/"+id, key, nil)
		if r.status != http.StatusOK {
			t.Fatalf("get: %d %s", r.status, r.body)
		}
		view = r.json(t)
		if view["memory_restored"] != nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the adopted live session was not checkpointed and restored: %v", view)
		}
	}
	if view["memory_restored"] != true || view["live"] != true {
		t.Fatalf("after the kill: %v", view)
	}
	if r := s.exec(key, id, "print(open('/tmp/mem').read())"); r["stdout"] != tok+"\n" {
		t.Fatalf("memory after the kill: %v", r)
	}

	// SIGTERM: the stop hibernates the session into a checkpoint, the next
	// start serves it hibernated, and its resume restores it.
	s.stop()
	s.start()
	if v := s.do("GET", "/v1/sessions/"+id, key, nil).json(t); v["state"] != "hibernated" || v["live"] != true || v["checkpoint_mb"] == nil {
		t.Fatalf("after a stop and start: %v", v)
	}
	if r := s.exec(key, id, "print(open('/tmp/mem').read())"); r["stdout"] != tok+"\n" || r["memory_restored"] != true {
		t.Fatalf("memory after a stop and start: %v", r)
	}

	h := s.do("POST", "/v1/sessions/"+id+"/hibernate", key, nil)
	if h.status != http.StatusOK {
		t.Fatalf("hibernate: %d %s", h.status, h.body)
	}
	if v := h.json(t); v["state"] != "hibernated" || v["live"] != true || v["checkpoint_mb"] == nil {
		t.Fatalf("hibernated: %v", v)
	}
	r := s.exec(key, id, "print(open('/tmp/mem').read())")
	if r["stdout"] != tok+"\n" || r["memory_restored"] != true || r["resumed_ms"] == nil {
		t.Fatalf("after the resume: %v", r)
	}
	if d := s.do("DELETE", "/v1/sessions/"+id, key, nil); d.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", d.status, d.body)
	}
	s.waitNoLeftovers(t, id)
}
