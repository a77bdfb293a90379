package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestConcurrentDeleteNotFound: concurrent DELETEs of one session on a
// single node answer one 204 and otherwise 404 not_found, never 503
// session_moved (nothing moved: there is no other node).
func TestConcurrentDeleteNotFound(t *testing.T) {
	s := startServer(t, "")
	key := s.key("PRO")
	for i := 0; i < 4; i++ {
		id := s.session(key, "bash")
		replies := make([]reply, 3)
		var wg sync.WaitGroup
		for j := range replies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				replies[j] = s.do("DELETE", "/v1/sessions/"+id, key, nil)
			}()
		}
		wg.Wait()
		deleted := 0
		for _, r := range replies {
			switch r.status {
			case http.StatusNoContent:
				deleted++
			case http.StatusNotFound:
				if code := r.errCode(t); code != "not_found" {
					t.Fatalf("run %d: 404 with code %q, want not_found", i, code)
				}
			default:
				t.Fatalf("run %d: concurrent DELETE answered %d %s (Retry-After %q), want 204 or 404 not_found", i, r.status, r.body, r.header.Get("Retry-After"))
			}
		}
		if deleted != 1 {
			t.Fatalf("run %d: %d DELETEs answered 204, want one", i, deleted)
		}
		if r := s.do("GET", "/v1/sessions/"+id, key, nil); r.status != http.StatusNotFound {
			t.Fatalf("run %d: GET after delete: %d %s", i, r.status, r.body)
		}
	}
}

// TestUploadCutByKillLeavesNothing: a 40 MiB PUT cut by a SIGKILL of the
// server half way leaves no staging file in the home once the session
// serves again (the server restarted), and the home's space is free.
//
// Not parallel: the guest gets a fixed 2 s to write what it was sent
// before the kill; under other tests' load it would write less, and the
// test would check less.
func TestUploadCutByKillLeavesNothing(t *testing.T) {
	s := startServer(t, "")
	key := s.key("PRO")
	id := s.session(key, "bash")
	const state = "find /home/sandbox -name '.sbx-upload-*' | wc -l; df -k --output=used /home/sandbox | tail -1"
	usage := func() (int, int64) {
		t.Helper()
		f := strings.Fields(s.exec(key, id, state)["stdout"].(string))
		if len(f) != 2 {
			t.Fatalf("state: %q", f)
		}
		n, _ := strconv.Atoi(f[0])
		used, _ := strconv.ParseInt(f[1], 10, 64)
		return n, used
	}
	_, base := usage()

	pr, pw := io.Pipe()
	req, _ := http.NewRequest("PUT", s.url("/v1/sessions/"+id+"/files?path=/home/sandbox/big.bin"), pr)
	req.ContentLength = 40 << 20
	req.Header.Set("X-RapidAPI-Key", key)
	done := make(chan error, 1)
	go func() {
		resp, err := s.client().Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("cut upload answered %d", resp.StatusCode)
		}
		done <- err
	}()
	if _, err := pw.Write(make([]byte, 20<<20)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the guest writes what it was sent
	s.kill()
	pw.CloseWithError(errors.New("server killed"))
	if err := <-done; err == nil {
		t.Fatal("the cut upload got an answer")
	}
	s.start()
	if n, used := usage(); n != 0 || used > base+2048 {
		t.Fatalf("after the restart: %d staging files, %d KiB used (%d before the upload)", n, used, base)
	}
	// An upload to the same path works and leaves nothing either.
	if r := s.do("PUT", "/v1/sessions/"+id+"/files?path=/home/sandbox/big.bin", key, []byte("small")); r.status != http.StatusOK {
		t.Fatalf("upload after the restart: %d %s", r.status, r.body)
	}
	if n, _ := usage(); n != 0 {
		t.Fatalf("%d staging files after a whole upload", n)
	}
}
