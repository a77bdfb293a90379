package executor

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// Calls that find a session gone answer ErrSessionMoved only when another
// node owns it; on one node a session that ended is simply not found.

// notMoved fails t when err says the session moved.
func notMoved(t *testing.T, what string, err error) {
	t.Helper()
	if errors.Is(err, ErrSessionMoved) {
		t.Fatalf("%s: %v: a session that ended on a single node is not found, it did not move", what, err)
	}
}

// TestConcurrentDeletesNotFound: of two concurrent deletes one ends the
// session and the other answers ErrNotFound, never ErrSessionMoved.
func TestConcurrentDeletesNotFound(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		s := mustSession(t, e, "bash")
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for j := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = e.DeleteSession(ctx, "k1", s.ID)
			}()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			notMoved(t, "concurrent delete", err)
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, ErrNotFound):
				t.Fatalf("concurrent delete: %v, want nil or ErrNotFound", err)
			}
		}
		if ok != 1 {
			t.Fatalf("run %d: %d deletes worked, want exactly one: %v", i, ok, errs)
		}
	}
}

// TestDeleteAfterSandboxLost: a delete right after an execute that found
// its sandbox lost (the session's end is under way in the background)
// ends it or is not found.
func TestDeleteAfterSandboxLost(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		s := mustSession(t, e, "bash")
		if err := e.runsc.Destroy(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "echo hi"}); !errors.Is(err, ErrLost) {
			t.Fatalf("execute on a destroyed sandbox: %v, want ErrLost", err)
		}
		err := e.DeleteSession(ctx, "k1", s.ID)
		notMoved(t, "delete after sandbox lost", err)
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatalf("delete after sandbox lost: %v", err)
		}
		if err := e.DeleteSession(ctx, "k1", s.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second delete after sandbox lost: %v, want ErrNotFound", err)
		}
	}
}

// TestForkAndHibernateRacingDelete: a fork or a hibernation that waits
// behind a delete finds the session not found, never moved.
func TestForkAndHibernateRacingDelete(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	ctx := context.Background()
	ops := []struct {
		name string
		op   func(id string) error
	}{
		{"fork", func(id string) error {
			c, err := e.Durable().ForkSession(ctx, id, ForkSpec{Owner: "k1"})
			if err == nil {
				_ = e.DeleteSession(ctx, "k1", c.ID)
			}
			return err
		}},
		{"hibernate", func(id string) error {
			_, err := e.Durable().HibernateSession(ctx, "k1", id)
			return err
		}},
	}
	for _, tc := range ops {
		t.Run(tc.name, func(t *testing.T) {
			lost := 0
			for i := 0; i < 4; i++ {
				s := mustSession(t, e, "bash")
				del := make(chan error, 1)
				go func() { del <- e.DeleteSession(ctx, "k1", s.ID) }()
				time.Sleep(time.Duration(i) * time.Millisecond)
				err := tc.op(s.ID)
				notMoved(t, tc.name+" racing delete", err)
				if err != nil && !errors.Is(err, ErrNotFound) {
					t.Fatalf("%s racing delete: %v, want nil or ErrNotFound", tc.name, err)
				}
				if err != nil {
					lost++
				}
				if err := <-del; err != nil {
					t.Fatalf("delete: %v", err)
				}
			}
			t.Logf("%s found the session deleted %d times of 4", tc.name, lost)
		})
	}
}

// TestGoneErr: the answer for a session found gone, by how it went and
// what its row says (real SQLite).
func TestGoneErr(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	insert := func(s *store.Store, id string) {
		t.Helper()
		if err := s.InsertSession(ctx, store.SessionRow{ID: id, KeyID: "k1", Language: "bash", State: StateRunning, CreatedAt: now, LastUsedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := st.ForNode("node-a"), st.ForNode("node-b")
	insert(a, "sess_mine")
	insert(b, "sess_theirs")
	insert(a, "sess_ended")
	if err := a.SetSessionState(ctx, "sess_ended", StateEnded, "deleted", true); err != nil {
		t.Fatal(err)
	}
	insert(st, "sess_single")
	tests := []struct {
		name  string
		store *store.Store
		id    string
		ended bool
		want  error
	}{
		{name: "single node, let go of", store: st, id: "sess_single", want: ErrNotFound},
		{name: "single node, ended", store: st, id: "sess_single", ended: true, want: ErrNotFound},
		{name: "cluster, ended here", store: a, id: "sess_theirs", ended: true, want: ErrNotFound},
		{name: "cluster, row ended", store: a, id: "sess_ended", want: ErrNotFound},
		{name: "cluster, no row", store: a, id: "sess_nothing", want: ErrNotFound},
		{name: "cluster, another node owns it", store: a, id: "sess_theirs", want: ErrSessionMoved},
		{name: "cluster, fenced, row still this node's", store: a, id: "sess_mine", want: ErrSessionMoved},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(&Executor{store: tc.store, log: quietLog()})
			s := newSession(tc.id, "k1", &Runtime{Name: "bash"}, time.Minute, now, sandbox.NetworkRequest{})
			s.gone, s.ended = true, tc.ended
			err := n.goneErr(ctx, s)
			if !errors.Is(err, tc.want) {
				t.Fatalf("goneErr: %v, want %v", err, tc.want)
			}
		})
	}
}
