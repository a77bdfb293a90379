package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// TestClusterWithoutSharedHomes runs 2 nodes that keep their homes in
// their own data dirs: a killed node's session cannot come back, and
// answers 410 sandbox_lost on its next call through the other node; it is
// ended, and its key can make a new session in its place. Another session
// of the killed node, with a short idle TTL, is never called again: the
// other node's sweep ends it once it is idle past its TTL, and its plan
// slot is free again without any call to it.
func TestClusterWithoutSharedHomes(t *testing.T) {
	c := startCluster(t, clusterOptions{nodes: 2, ownHomes: true})
	key := c.key(t, "PRO")
	var ids []string
	owners := map[string]string{}
	for i := range c.nodes {
		id, owner := c.create(t, i, key, map[string]any{"language": "bash"})
		ids = append(ids, id)
		owners[id] = owner
	}
	t.Cleanup(func() { c.deleteAll(t, key, ids) })
	// The orphan: made last, so that the victim is killed well before
	// its TTL passes (its own reaper would end it "idle_ttl"), with a
	// key of its own (the plan allows two sessions). The victim is the
	// node it was placed on: placement goes by free capacity, which the
	// test does not steer.
	orphan, orphanOwner := c.create(t, c.index(owners[ids[0]]), c.key(t, "PRO"), map[string]any{"language": "bash", "idle_ttl": 4})
	victim := c.index(orphanOwner)
	other := c.other(victim+1, victim)
	if owners[ids[0]] != c.names[victim] && owners[ids[1]] != c.names[victim] {
		t.Logf("no session of the key on %s this run: the 410 path is not exercised", c.names[victim])
	}
	c.nodes[victim].kill()
	for _, id := range ids {
		r := c.call(t, other, request{method: "POST", path: "/v1/sessions/" + id + "/execute", key: key, body: map[string]any{"code": "echo hi"}})
		switch {
		case owners[id] == c.names[victim] && (r.status != http.StatusGone || r.errCode(t) != "sandbox_lost"):
			t.Errorf("%s of the killed node through %s: %d %s, want 410 sandbox_lost", id, c.names[other], r.status, r.body)
		case owners[id] != c.names[victim] && r.status != http.StatusOK:
			t.Errorf("%s of the living node: %d %s", id, r.status, r.body)
		}
	}
	lost := 0
	for _, id := range ids {
		if owners[id] != c.names[victim] {
			continue
		}
		lost++
		if r := c.call(t, other, request{method: "GET", path: "/v1/sessions/" + id, key: key}); r.status != http.StatusNotFound && (r.status != http.StatusOK || r.json(t)["state"] == "running" || r.json(t)["state"] == "hibernated") {
			t.Errorf("a lost session: %d %s, want it gone or ended", r.status, r.body)
		}
	}
	// Its plan slot is free again: the key makes as many sessions as it
	// lost.
	for k := 0; k < lost; k++ {
		id, _ := c.create(t, other, key, map[string]any{"language": "bash"})
		ids = append(ids, id)
	}
	// The orphan, never called: ended by the other node's sweep (its TTL,
	// then the victim's lease, then a sweep about a lease apart), as lost
	// (its image stayed in the victim's data dir).
	st := c.openStore(t)
	ctx := context.Background()
	var row store.SessionRow
	deadline := time.Now().Add(4*time.Second + 4*clusterLease)
	for {
		var err error
		if row, err = st.GetSession(ctx, orphan); err != nil {
			t.Fatal(err)
		}
		if row.State == "ended" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if row.State != "ended" || row.Node != c.names[other] || (row.EndReason != "sandbox lost" && row.EndReason != "idle (owner node gone)") {
		t.Fatalf("the killed node's orphan, never called: %+v; want ended by %s's sweep", row, c.names[other])
	}
	live, err := st.LiveSessionsOfKey(ctx, row.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if slots, err := st.SessionSlots(ctx, row.KeyID); err != nil || slots != len(live) {
		t.Fatalf("the key holds %d plan slots for %d live sessions (%v)", slots, len(live), err)
	}
}

func testClusterKill(t *testing.T, c *cluster) {
	ctx := context.Background()
	st := c.openStore(t)
	key := c.key(t, "ULTRA")
	w := c.watchMounts(t)
	c.waitReady(t, 2*time.Minute) // installs need every check green

	// A session with network through each node (placement spreads
	// them), its allow-list refusing a name.
	netKey := c.key(t, "MEGA")
	netOwners := map[string]string{}
	var nets []string
	for k := range c.nodes {
		id, owner := c.create(t, k, netKey, map[string]any{"language": "bash",
			"network": map[string]any{"enabled": true, "allowed_domains": []string{"www.allowed.test"}}})
		nets = append(nets, id)
		netOwners[id] = owner
		c.proxyDenied(t, c.index(owner), netKey, id)
	}
	t.Cleanup(func() { c.deleteAll(t, netKey, nets) })
	// Four sessions over three nodes: one node holds two or more.
	held := map[string][]string{}
	var all []string
	for k := 0; k < 4; k++ {
		id, owner := c.create(t, k%len(c.nodes), key, map[string]any{"language": "python3"})
		held[owner] = append(held[owner], id)
		all = append(all, id)
	}
	t.Cleanup(func() { c.deleteAll(t, key, all) })
	victimName := ""
	for name, ids := range held {
		if len(ids) > len(held[victimName]) {
			victimName = name
		}
	}
	v := c.index(victimName)
	victim := c.nodes[v]
	vs := held[victimName]
	t.Logf("sessions by node %v, sessions with network by session %v; killing %s", held, netOwners, victimName)
	owners := map[string]string{}
	for name, ids := range held {
		for _, id := range ids {
			owners[id] = name
		}
	}
	// A file and an installed package in each, through a node other
	// than the holder; one of the victim's sessions is hibernated.
	for k, id := range all {
		i := c.other(k, c.index(owners[id]))
		r := c.call(t, i, request{method: "POST", path: "/v1/sessions/" + id + "/install", key: key,
			body: map[string]any{"manager": "pip", "packages": []string{"cluster-pkg==1.0.0"}}})
		if r.status != http.StatusOK {
			t.Fatalf("install through %s: %d %s", c.names[i], r.status, r.body)
		}
		c.exec(t, i, key, id, fmt.Sprintf("open('/home/sandbox/notes.txt','w').write('kept %s')", id))
	}
	if r := c.call(t, c.other(v+1, v), request{method: "POST", path: "/v1/sessions/" + vs[0] + "/hibernate", key: key}); r.status != http.StatusOK {
		t.Fatalf("hibernate: %d %s", r.status, r.body)
	}
	before, err := st.GetNode(ctx, victimName)
	if err != nil {
		t.Fatal(err)
	}

	victim.kill()
	killedAt := time.Now()
	c.keepLogs(v)
	if left := c.egress[v].leftovers(t); len(left) == 0 {
		t.Errorf("the killed node shows no session network: the check after its restart would see nothing")
	}
	// The dead man's switch: the killed node's sandboxes and homes go
	// at once, without the node.
	for {
		procs, mounts := countProcs(victim.dataDir), homeMounts(victim.dataDir)
		if procs == 0 && mounts == 0 {
			t.Logf("the killed node's sandboxes and mounts were gone %v after the kill", time.Since(killedAt).Round(time.Millisecond))
			break
		}
		if time.Since(killedAt) > 5*time.Second {
			t.Errorf("%v after the kill, the killed node still has %d runsc processes and %d home mounts", time.Since(killedAt), procs, mounts)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Each of its sessions resumes on another node on its next call,
	// through either survivor, with its file and package.
	const probe = "import cluster_pkg; print(open('/home/sandbox/notes.txt').read(), cluster_pkg.VERSION)"
	for k, id := range all {
		i := c.other(k, v)
		r := c.call(t, i, request{method: "POST", path: "/v1/sessions/" + id + "/execute", key: key, body: map[string]any{"code": probe}})
		if r.status != http.StatusOK || r.json(t)["stdout"] != fmt.Sprintf("kept %s 1.0.0\n", id) {
			t.Fatalf("execute in %s (held by the killed %s: %v) through %s, %v after the kill: %d %s",
				id, victimName, owners[id] == victimName, c.names[i], time.Since(killedAt).Round(time.Millisecond), r.status, r.body)
		}
		switch got := servedBy(r); {
		case owners[id] != victimName && got != owners[id]:
			t.Errorf("%s, held by %s, which lives, was served by %s", id, owners[id], got)
		case owners[id] == victimName && got == victimName:
			t.Errorf("%s served by the killed node", id)
		case owners[id] == victimName:
			t.Logf("%s came back on %s %v after the kill (resumed in %v ms)", id, got, time.Since(killedAt).Round(time.Millisecond), r.json(t)["resumed_ms"])
			if r.header.Get("X-Sandbox-Resumed") == "" {
				t.Errorf("%s: no resume reported on its new node", id)
			}
			owners[id] = got
		}
		// Through the other survivor: forwarded to the new holder.
		j := c.other(i+1, v, i)
		r = c.exec(t, j, key, id, probe)
		if servedBy(r) != owners[id] {
			t.Errorf("%s through %s served by %s, want %s", id, c.names[j], servedBy(r), owners[id])
		}
		o, err := st.OwnerOf(ctx, id)
		if err != nil || o.Owner.Name != owners[id] {
			t.Errorf("the store says %s is held by %q (%v), want %s", id, o.Owner.Name, err, owners[id])
		}
	}
	// Its sessions with network come back with their allow-list, on a
	// network of their new node; the audit holds the refusals of both.
	movedNet := 0
	for k, id := range nets {
		if netOwners[id] != victimName {
			continue
		}
		movedNet++
		i := c.other(k, v)
		r := c.proxyDenied(t, i, netKey, id)
		if got := servedBy(r); got == victimName {
			t.Errorf("%s served by the killed node", id)
		} else {
			t.Logf("%s (with network) came back on %s %v after the kill", id, got, time.Since(killedAt).Round(time.Millisecond))
		}
		g := c.call(t, c.other(i+1, v), request{method: "GET", path: "/v1/sessions/" + id, key: netKey})
		if nw, _ := g.json(t)["network"].(map[string]any); nw["enabled"] != true || fmt.Sprint(nw["allowed_domains"]) != "[www.allowed.test]" {
			t.Errorf("%s after the takeover: network %v, want enabled with its allow-list", id, g.json(t)["network"])
		}
		if n := c.denies(t, c.other(i+2, v), netKey, id); n < 2 {
			t.Errorf("%s: %d refusals in its audit after the takeover, want the one before and the one after", id, n)
		}
	}
	if movedNet == 0 {
		t.Errorf("no session with network was on %s: placement did not spread them (%v)", victimName, netOwners)
	}
	for _, id := range vs {
		if got := w.mountedUnder(id); len(got) != 2 || !slices.Contains(got, victim.dataDir) {
			t.Errorf("the watcher saw %s mounted under %v: want the killed node's and its new holder's data dirs", id, got)
		}
	}

	t.Run("the restarted node rejoins and takes new sessions", func(t *testing.T) {
		startAt := time.Now()
		victim.start()
		restartedAt := time.Now()
		t.Logf("%s answered /healthz %v after its start", victimName, restartedAt.Sub(startAt).Round(time.Millisecond))
		var after nodeState
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			n, err := st.GetNode(ctx, victimName)
			if err == nil && n.Epoch > before.Epoch && n.Alive(time.Now()) {
				after = nodeState{n.Epoch, n.Free}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not register again: %+v %v (epoch before the kill %d)", victimName, n, err, before.Epoch)
			}
		}
		t.Logf("%s rejoined with epoch %d (was %d), %d free, %v after its start", victimName, after.epoch, before.Epoch, after.free, time.Since(startAt).Round(time.Millisecond))
		// The networks its sessions had when it was killed are its
		// own to remove: those sessions live elsewhere now.
		var left []string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			if left = c.egress[v].leftovers(t); len(left) == 0 {
				t.Logf("%s removed the networks of its moved sessions within %v of its restart", victimName, time.Since(restartedAt).Round(time.Millisecond))
				break
			}
		}
		if len(left) != 0 {
			t.Errorf("30 s after its restart, %s still holds session networks of sessions that moved: %v", victimName, left)
		}
		// It holds nothing and the others hold the old sessions: the
		// next session goes to it, wherever it is created.
		fresh := c.key(t, "ULTRA")
		i := c.other(v+1, v)
		id, owner := c.create(t, i, fresh, map[string]any{"language": "python3"})
		if owner != victimName {
			t.Errorf("a new session created through %s went to %s, want the rejoined %s", c.names[i], owner, victimName)
		}
		r := c.exec(t, c.other(v+2, v), fresh, id, "print(6*7)")
		if r.json(t)["stdout"] != "42\n" || servedBy(r) != owner {
			t.Errorf("execute in the new session: served by %s: %s", servedBy(r), r.body)
		}
		// The old sessions, through the rejoined node: forwarded.
		for _, id := range vs {
			if r := c.exec(t, v, key, id, probe); servedBy(r) != owners[id] {
				t.Errorf("%s through the rejoined node served by %s, want %s", id, servedBy(r), owners[id])
			}
		}
		c.deleteAll(t, fresh, []string{id})
	})
	w.check(t)
}

type nodeState struct {
	epoch int64
	free  int
}

// homeMounts counts the session homes mounted under a node's data dir.
func homeMounts(dataDir string) int {
	n := 0
	mi, _ := readMountinfo()
	for _, l := range mi {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dataDir+"/") && homeMountPoint.MatchString(f[4]) {
			n++
		}
	}
	return n
}

func testClusterDrain(t *testing.T, c *cluster) {
	key := c.key(t, "ULTRA")
	w := c.watchMounts(t)
	held := map[string][]string{}
	var all []string
	for k := 0; k < 3; k++ {
		id, owner := c.create(t, k%len(c.nodes), key, map[string]any{"language": "bash"})
		held[owner] = append(held[owner], id)
		all = append(all, id)
		c.exec(t, k%len(c.nodes), key, id, "echo kept-"+id+" > /home/sandbox/f")
	}
	t.Cleanup(func() { c.deleteAll(t, key, all) })
	drainedName := ""
	for name, ids := range held {
		if len(ids) > len(held[drainedName]) {
			drainedName = name
		}
	}
	d := c.index(drainedName)
	t.Logf("sessions by node %v; SIGTERM to %s", held, drainedName)

	// Three clients per session call it, without pause, through the
	// nodes that stay (calls in flight at every moment of the drain).
	const clients = 3
	type outcome struct {
		mu     sync.Mutex
		calls  int
		after  int // calls sent after the drained node exited that succeeded
		failed []failedCall
		nodes  []string // serving nodes, in order, without repeats
	}
	outcomes := make([]outcome, len(all))
	stop := make(chan struct{})
	var exitedAt atomic.Pointer[time.Time]
	var wg sync.WaitGroup
	for k, id := range all {
		for cl := 0; cl < clients; cl++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := &outcomes[k]
				for n := cl; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					i := c.other(k+n, d)
					t1 := time.Now()
					r, err := c.try(i, request{method: "POST", path: "/v1/sessions/" + id + "/execute", key: key, body: map[string]any{"code": "cat /home/sandbox/f"}})
					o.mu.Lock()
					o.calls++
					switch {
					case err != nil:
						o.failed = append(o.failed, failedCall{t1, err.Error()})
					case r.status != http.StatusOK || !strings.Contains(string(r.body), `"stdout":"kept-`+id+`\n"`):
						o.failed = append(o.failed, failedCall{t1, fmt.Sprintf("through %s, answered by %s: %d %s", c.names[i], servedBy(r), r.status, r.body)})
					default:
						if len(o.nodes) == 0 || o.nodes[len(o.nodes)-1] != servedBy(r) {
							o.nodes = append(o.nodes, servedBy(r))
						}
						if at := exitedAt.Load(); at != nil && t1.After(*at) {
							o.after++
						}
					}
					o.mu.Unlock()
				}
			}()
		}
	}
	// waitAll waits until every session's outcome satisfies ok: on a
	// loaded machine a call can take seconds, so a fixed pause could end
	// before any call of a session was served.
	waitAll := func(what string, ok func(o *outcome) bool) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			n := 0
			for k := range outcomes {
				o := &outcomes[k]
				o.mu.Lock()
				if ok(o) {
					n++
				}
				o.mu.Unlock()
			}
			if n == len(outcomes) {
				return
			}
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("%s: %d of %d sessions after 90 s", what, n, len(outcomes))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Every session is served by its holder before the SIGTERM, so that
	// a handover shows as a change of the serving node.
	waitAll("a call served before the SIGTERM", func(o *outcome) bool { return len(o.nodes) > 0 })
	drained := c.nodes[d]
	sigAt := time.Now()
	if err := drained.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-drained.exited:
	case <-time.After(90 * time.Second):
		close(stop)
		wg.Wait()
		t.Fatalf("%s did not exit within 90 s of SIGTERM", drainedName)
	}
	exitedAfter := time.Since(sigAt)
	now := time.Now()
	exitedAt.Store(&now)
	// Every session, the handed-over ones included, keeps serving after
	// the drained node is gone.
	waitAll("three calls served after the drained node exited", func(o *outcome) bool { return o.after >= 3 })
	close(stop)
	wg.Wait()
	w.check(t)
	if code := drained.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("%s exited with %d after SIGTERM", drainedName, code)
	}
	t.Logf("%s exited %v after SIGTERM", drainedName, exitedAfter.Round(time.Millisecond))
	for k, id := range all {
		o := &outcomes[k]
		t.Logf("%s: %d calls, served by %v", id, o.calls, o.nodes)
		for j, f := range o.failed {
			if j == 5 {
				t.Errorf("%s: %d more failed calls", id, len(o.failed)-5)
				break
			}
			t.Errorf("%s: a call sent %v after the SIGTERM failed: %s", id, f.at.Sub(sigAt).Round(time.Millisecond), f.what)
		}
		if o.calls < 5 {
			t.Errorf("%s: only %d calls", id, o.calls)
		}
		if slices.Contains(held[drainedName], id) {
			if len(o.nodes) < 2 || o.nodes[0] != drainedName || o.nodes[len(o.nodes)-1] == drainedName {
				t.Errorf("%s, held by %s, was served by %v: want it handed over to another node", id, drainedName, o.nodes)
			}
		}
	}
	drained.waitNoLeftovers(t)
}

// failedCall is a call of the drain test's clients that failed.
type failedCall struct {
	at   time.Time // when it was sent
	what string
}
