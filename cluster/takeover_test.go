package cluster

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// TestTakeoverDeadOwner: the owner of a session dies (no renewals, its
// port closed). Two nodes get a call for the session at once: both find
// the owner unreachable, wait until its lease has run out, and race to
// claim it; exactly one claims and adopts it, the other forwards to the
// winner, and both calls succeed.
func TestTakeoverDeadOwner(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, b, c := startNode(t, st, "a", 4), startNode(t, st, "b", 4), startNode(t, st, "c", 4)
	insertSession(t, st, "b", "s1")
	b.ex.holds("s1")
	b.kill()
	row, err := st.GetNode(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	type reply struct {
		status int
		node   string
		at     time.Time
	}
	replies := make([]reply, 2)
	for i, n := range []*testNode{a, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(t.Context(), "POST", n.url+"/v1/sessions/s1/execute", strings.NewReader("{}"))
			req.Header.Set("Authorization", "Bearer test-key")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			replies[i] = reply{resp.StatusCode, resp.Header.Get(HeaderNode), time.Now()}
		}()
	}
	wg.Wait()
	for i, r := range replies {
		if r.status != 200 {
			t.Fatalf("call %d: %+v", i, r)
		}
		if r.at.Before(row.LeaseUntil) {
			t.Errorf("call %d answered at %s, before the dead owner's lease ran out at %s", i, r.at, row.LeaseUntil)
		}
	}
	if replies[0].node != replies[1].node {
		t.Fatalf("served by %s and %s", replies[0].node, replies[1].node)
	}
	winner := a
	if replies[0].node == "c" {
		winner = c
	}
	if got := a.ex.adopted("s1") + c.ex.adopted("s1"); got != 1 || winner.ex.adopted("s1") != 1 {
		t.Fatalf("adopted %d times (a %d, c %d)", got, a.ex.adopted("s1"), c.ex.adopted("s1"))
	}
	if a.obs.takeovers.Load()+c.obs.takeovers.Load() != 1 {
		t.Fatalf("takeovers a %d, c %d", a.obs.takeovers.Load(), c.obs.takeovers.Load())
	}
	o, err := st.OwnerOf(t.Context(), "s1")
	if err != nil || o.Owner.Name != winner.name {
		t.Fatalf("owner %+v, %v", o.Owner, err)
	}
}

// TestTakeoverHandOver: the owner drains; a call that starts work waits
// until it hands its sessions over, then the session is claimed here.
func TestTakeoverHandOver(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, b := startNode(t, st, "a", 4), startNode(t, st, "b", 4)
	insertSession(t, st, "b", "s1")
	b.ex.holds("s1")
	b.node.Drain()
	if n, _ := st.GetNode(t.Context(), "b"); !n.Draining {
		t.Fatal("Drain did not mark the node draining")
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		if _, err := b.st.ReleaseSessions(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	resp, body := call(t, "POST", a.url+"/v1/sessions/s1/execute", strings.NewReader("{}"), nil)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderNode) != "a" || a.ex.adopted("s1") != 1 || b.calls.Load() != 0 {
		t.Fatalf("%d %v %s; adopted %d, b's API calls %d", resp.StatusCode, resp.Header, body, a.ex.adopted("s1"), b.calls.Load())
	}
	if a.obs.takeovers.Load() != 1 {
		t.Fatalf("takeovers %d", a.obs.takeovers.Load())
	}
	// A read while the owner drains is forwarded at once.
	insertSession(t, st, "b", "s2")
	resp, _ = call(t, "GET", a.url+"/v1/sessions/s2", nil, nil)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderNode) != "b" {
		t.Fatalf("read of a draining node's session: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestSessionLost: a session whose home cannot be adopted answers 410
// sandbox_lost.
func TestSessionLost(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a := startNode(t, st, "a", 4)
	insertSession(t, st, "", "s1") // handed over by a node that is gone
	a.ex.lost["s1"] = true
	resp, body := call(t, "POST", a.url+"/v1/sessions/s1/execute", strings.NewReader("{}"), nil)
	if resp.StatusCode != http.StatusGone || !strings.Contains(body, `"code":"sandbox_lost"`) || resp.Header.Get(HeaderNode) != "a" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// TestLeaseLossFences: when a renewal finds the lease lost, the node
// fences every session, registers again under a new epoch, and serves
// its sessions again by adopting them.
func TestLeaseLossFences(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a := startNode(t, st, "a", 4)
	insertSession(t, st, "a", "s1")
	a.ex.holds("s1")
	epoch := a.node.Epoch()
	if err := st.ExpireNode(t.Context(), "a", epoch); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.ex.fenced:
	case <-time.After(testLease):
		t.Fatal("no fence within one lease of losing it")
	}
	if !waitFor(testLease, func() bool { return a.node.Epoch() > epoch }) {
		t.Fatalf("epoch %d after losing %d", a.node.Epoch(), epoch)
	}
	row, err := st.GetNode(t.Context(), "a")
	if err != nil || row.Epoch != a.node.Epoch() || !row.Alive(time.Now()) {
		t.Fatalf("row %+v, %v", row, err)
	}
	resp, _ := call(t, "POST", a.url+"/v1/sessions/s1/execute", strings.NewReader("{}"), nil)
	if resp.StatusCode != 200 || a.ex.adopted("s1") != 1 {
		t.Fatalf("%d, adopted %d", resp.StatusCode, a.ex.adopted("s1"))
	}
}

// TestLeaseNotRenewedInTime: a node that cannot renew before lease/4 is
// left (here its clock jumps, as after a long pause) fences on its own,
// before the lease runs out for the others.
func TestLeaseNotRenewedInTime(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a := startNode(t, st, "a", 4)
	a.skew.Store(int64(testLease - testLease/8)) // past lease - lease/4 by the node's clock
	if a.node.serving() {
		t.Fatal("still serving past lease - lease/4")
	}
	select {
	case <-a.ex.fenced:
	case <-time.After(testLease):
		t.Fatal("no fence")
	}
}

// TestForwardedNeverForwardedAgain: two nodes that disagree about the
// owner (here each reads its own database, each naming the other) do not
// pass a call back and forth: the forwarded call is answered 503
// session_moved where it lands, after one forward.
func TestForwardedNeverForwardedAgain(t *testing.T) {
	st1, st2 := openStore(t, testPostgres(t)), openStore(t, testPostgres(t))
	a, b := startNode(t, st1, "a", 4), startNode(t, st2, "b", 4)
	now := time.Now()
	for _, x := range []struct {
		st   *store.Store
		peer *testNode
	}{{st1, b}, {st2, a}} {
		if _, err := x.st.RegisterNode(t.Context(), store.NodeRow{Name: x.peer.name, URL: x.peer.url, Capacity: 4, Free: 4,
			StartedAt: now, RenewedAt: now, LeaseUntil: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	insertSession(t, st1, "b", "s1")
	insertSession(t, st2, "a", "s1")
	resp, body := call(t, "POST", a.url+"/v1/sessions/s1/execute", strings.NewReader("{}"), nil)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"session_moved"`) ||
		resp.Header.Get(HeaderNode) != "b" || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
	if a.calls.Load()+b.calls.Load() != 0 {
		t.Fatalf("API calls a %d, b %d", a.calls.Load(), b.calls.Load())
	}
	if !waitFor(time.Second, func() bool { return a.obs.forwarded("ok") == 1 }) || b.obs.forwarded("ok") != 0 {
		t.Fatalf("forwards a %d, b %d", a.obs.forwarded("ok"), b.obs.forwarded("ok"))
	}
}

// TestDrainingNodeTakesNothingOver: a draining node that gets a call for
// an unowned session sends it to a node that stays, which claims it.
func TestDrainingNodeTakesNothingOver(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, b := startNode(t, st, "a", 4), startNode(t, st, "b", 4)
	insertSession(t, st, "", "s1")
	a.node.Drain()
	resp, body := call(t, "POST", a.url+"/v1/sessions/s1/execute", strings.NewReader("{}"), nil)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderNode) != "b" || b.ex.adopted("s1") != 1 || a.ex.adopted("s1") != 0 {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
	if o, _ := st.OwnerOf(t.Context(), "s1"); o.Owner.Name != "b" {
		t.Fatalf("owner %q", o.Owner.Name)
	}
}

// TestStopGivesLeaseUp: Stop ends the lease at once (its sessions are
// claimable), and the node's next start is a new epoch.
func TestStopGivesLeaseUp(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a, b := startNode(t, st, "a", 4), startNode(t, st, "b", 4)
	if n, ok := b.node.NodesAlive(); !ok || n != 2 {
		t.Fatalf("alive %d %v", n, ok)
	}
	epoch := a.node.Epoch()
	if err := a.node.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	a.alive.Store(false)
	row, err := st.GetNode(t.Context(), "a")
	if err != nil || row.Alive(time.Now()) || row.Epoch != epoch {
		t.Fatalf("after Stop: %+v, %v", row, err)
	}
	if n, _ := b.node.NodesAlive(); n != 1 {
		t.Fatalf("alive %d after a stopped", n)
	}
	insertSession(t, st, "a", "s1")
	if ok, err := b.node.claim(t.Context(), "s1"); !ok || err != nil {
		t.Fatalf("claim after Stop: %v, %v", ok, err)
	}
	a2 := startNode(t, st, "a", 4)
	if a2.node.Epoch() != epoch+1 {
		t.Fatalf("epoch %d after %d", a2.node.Epoch(), epoch)
	}
}

// TestNoKeyTakesNothingOver: a call without any key is left to the API
// (which refuses it): it does not claim a session of a dead node.
func TestNoKeyTakesNothingOver(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a := startNode(t, st, "a", 4)
	insertSession(t, st, "", "s1")
	resp, _ := call(t, "POST", a.url+"/v1/sessions/s1/execute", strings.NewReader("{}"), map[string]string{"Authorization": ""})
	if resp.Header.Get(HeaderNode) != "a" || a.calls.Load() != 1 || a.ex.adopted("s1") != 0 {
		t.Fatalf("%v; API calls %d, adopted %d", resp.Header, a.calls.Load(), a.ex.adopted("s1"))
	}
	if o, _ := st.OwnerOf(t.Context(), "s1"); o.Owner.Name != "" || o.Session.Node != "" {
		t.Fatalf("claimed by %q", o.Session.Node)
	}
}

// TestDrainRenewalNotPastValidUntil: a renewal that starts once the node
// is past the point where it stops using its sessions (lease - lease/4 by
// its clock) is not made, Drain's included: it could land after the lease
// ran out for the others, who may have claimed a session meanwhile,
// while the node would go on serving it.
func TestDrainRenewalNotPastValidUntil(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a := startNode(t, st, "a", 4)
	before, err := st.GetNode(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	a.kill()                                     // no lease loop: nothing fences on its own
	a.skew.Store(int64(testLease - testLease/8)) // past lease - lease/4, before the lease's end
	a.node.Drain()
	if a.node.serving() {
		t.Fatal("serving again after a renewal started past lease - lease/4")
	}
	after, err := st.GetNode(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if !after.LeaseUntil.Equal(before.LeaseUntil) {
		t.Fatalf("lease extended from %v to %v by a renewal past lease - lease/4", before.LeaseUntil, after.LeaseUntil)
	}
}

// TestHoldUntilFollowsLease: the executor's fence deadline (HoldUntil) is
// set at registration and moved on by every renewal, to lease/8 before
// the lease's end: after the node's own fence (lease/4 before), before
// any other node may claim.
func TestHoldUntilFollowsLease(t *testing.T) {
	st := openStore(t, testPostgres(t))
	a := startNode(t, st, "a", 4)
	hold := func() time.Time { a.ex.mu.Lock(); defer a.ex.mu.Unlock(); return a.ex.hold }
	first := hold()
	row, err := st.GetNode(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if first.IsZero() || !first.Before(row.LeaseUntil) || row.LeaseUntil.Sub(first) < testLease/8-50*time.Millisecond {
		t.Fatalf("hold %v after registering, lease until %v", first, row.LeaseUntil)
	}
	a.node.mu.Lock()
	validUntil := a.node.validUntil
	a.node.mu.Unlock()
	if !first.After(validUntil) {
		t.Fatalf("hold %v is not after the node's own fence at %v", first, validUntil)
	}
	if !waitFor(testLease, func() bool { return hold().After(first) }) {
		t.Fatal("a renewal did not move the hold on")
	}
	row, err = st.GetNode(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if h := hold(); !h.Before(row.LeaseUntil) {
		t.Fatalf("hold %v after renewing, lease until %v", h, row.LeaseUntil)
	}
}
