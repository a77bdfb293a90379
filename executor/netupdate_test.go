package executor

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// TestUpdateSessionNetwork changes the network of real runsc sessions with
// a real sandbox network: the store row, the network layer and the
// session agree after each change, a failed change leaves all three as
// they were, a session started without network cannot get it while it
// runs but can while hibernated, and a session whose network was disabled
// still gives its namespace back when it ends.
func TestUpdateSessionNetwork(t *testing.T) {
	t.Parallel()
	f := startFaultExecutor(t)
	ctx := context.Background()
	req := func(enabled bool, domains ...string) sandbox.NetworkRequest {
		return sandbox.NetworkRequest{Enabled: enabled, AllowedDomains: domains}
	}
	stored := func(id string) sandbox.NetworkRequest {
		t.Helper()
		r, err := f.st.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return storedNetwork(r.Network)
	}
	updates := func(id string) []sandbox.NetworkRequest {
		f.net.mu.Lock()
		defer f.net.mu.Unlock()
		return append([]sandbox.NetworkRequest(nil), f.net.updates[id]...)
	}

	s, err := f.e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1", Network: req(true, "a.example.com")})
	if err != nil {
		t.Fatal(err)
	}
	next := req(true, "b.example.com")
	snap, before, err := f.e.Networks().UpdateSessionNetwork(ctx, "k1", s.ID, next)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(snap.Network, next) || !reflect.DeepEqual(before, req(true, "a.example.com")) || snap.State != StateRunning {
		t.Fatalf("update = %+v (before %+v)", snap, before)
	}
	if got := stored(s.ID); !reflect.DeepEqual(got, next) {
		t.Fatalf("store row %+v, want %+v", got, next)
	}
	if got := updates(s.ID); len(got) != 1 || !reflect.DeepEqual(got[0], next) {
		t.Fatalf("network layer got %+v", got)
	}
	if _, _, err := f.e.Networks().UpdateSessionNetwork(ctx, "k2", s.ID, next); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another owner's session: %v", err)
	}

	// A network layer that fails: the row goes back, the session keeps
	// its request.
	f.net.mu.Lock()
	f.net.updateErr = errors.New("proxy refused")
	f.net.mu.Unlock()
	if _, _, err := f.e.Networks().UpdateSessionNetwork(ctx, "k1", s.ID, req(true, "c.example.com")); err == nil {
		t.Fatal("a failed network change succeeded")
	}
	f.net.mu.Lock()
	f.net.updateErr = nil
	f.net.mu.Unlock()
	if got := stored(s.ID); !reflect.DeepEqual(got, next) {
		t.Fatalf("store row after a failed change %+v, want %+v", got, next)
	}
	if g, _ := f.e.GetSession(ctx, "k1", s.ID); !reflect.DeepEqual(g.Network, next) {
		t.Fatalf("session after a failed change %+v", g.Network)
	}

	// Disabled while running: the namespace stays until the session ends,
	// and goes then.
	if _, _, err := f.e.Networks().UpdateSessionNetwork(ctx, "k1", s.ID, req(false)); err != nil {
		t.Fatal(err)
	}
	if res, err := f.e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "echo ok", Timeout: 10 * time.Second}); err != nil || res.Stdout != "ok\n" {
		t.Fatalf("execute with network disabled: %+v %v", res, err)
	}
	if err := f.e.DeleteSession(ctx, "k1", s.ID); err != nil {
		t.Fatal(err)
	}
	if left := f.leftovers(t, s.ID); len(left) != 0 {
		t.Fatalf("a session whose network was disabled left %q", left)
	}

	// Without network: refused while running, stored while hibernated,
	// attached by the resume.
	p, err := f.e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.e.Networks().UpdateSessionNetwork(ctx, "k1", p.ID, req(true)); !errors.Is(err, sandbox.ErrNetworkNotAttached) {
		t.Fatalf("enabling network on a running session without it: %v", err)
	}
	if got := stored(p.ID); got.Enabled {
		t.Fatalf("a refused change was stored: %+v", got)
	}
	if _, _, err := f.e.Networks().UpdateSessionNetwork(ctx, "k1", p.ID, req(false)); err != nil {
		t.Fatalf("keeping network off on a running session without it: %v", err)
	}
	if _, err := f.e.Durable().HibernateSession(ctx, "k1", p.ID); err != nil {
		t.Fatal(err)
	}
	snap, _, err = f.e.Networks().UpdateSessionNetwork(ctx, "k1", p.ID, req(true, "a.example.com"))
	if err != nil || snap.State != StateHibernated {
		t.Fatalf("enabling network on a hibernated session: %+v %v", snap, err)
	}
	if len(updates(p.ID)) != 0 {
		t.Fatal("a hibernated session's change reached the network layer")
	}
	if _, err := f.e.Execute(ctx, "k1", p.ID, ExecRequest{Code: "ls /sys/class/net", Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	f.e.mu.Lock()
	attached := f.e.sessions[p.ID].netAttached
	f.e.mu.Unlock()
	if !attached {
		t.Fatal("the resume did not attach the network the change asked for")
	}
	if err := f.e.DeleteSession(ctx, "k1", p.ID); err != nil {
		t.Fatal(err)
	}
	if left := f.leftovers(t, p.ID); len(left) != 0 {
		t.Fatalf("left %q", left)
	}
}
