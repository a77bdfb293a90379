package app

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/readiness"
)

// The session networks' table deleted from outside: the next readiness
// run rebuilds it and fails (installs closed), the one after verifies it;
// a session set up while the rules are gone rebuilds them too and closes
// the gate at once (firewall and topology fail) until both checks have
// run again. Real nft, a real readiness.Checker.
func TestFirewallHealsAndGateWaitsForVerification(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skip(t, "needs root for nft and netns")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		testenv.Skip(t, "needs nft: %v", err)
	}
	ctx := context.Background()
	tn := testenv.NewNet(t, 'g')
	cfg := egress.DefaultConfig()
	cfg.Resolvers = []string{"127.0.0.1"}
	cfg.Network.Pool, cfg.Network.Table, cfg.Network.Prefix = tn.Pool, tn.Table, tn.Prefix
	nw, err := egress.NewNetwork(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := nw.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	rcfg := readiness.DefaultConfig()
	rcfg.MinRefresh = 0
	chk := readiness.New(rcfg, nil)
	chk.Register("firewall", readiness.Firewall(map[string]readiness.FirewallChecker{"sessions": nw.HealingCheck()}))
	// The topology canary re-measuring rebuilt rules takes a while: the
	// test holds it until it has looked at the gate.
	var held sync.Mutex
	var release chan struct{} // nil: the probe answers at once
	hold := func() { held.Lock(); release = make(chan struct{}); held.Unlock() }
	letGo := func() { held.Lock(); close(release); release = nil; held.Unlock() }
	chk.Register("topology", func(ctx context.Context) (string, error) {
		held.Lock()
		r := release
		held.Unlock()
		if r != nil {
			select {
			case <-r:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "fenced", nil
	})
	closeOnRepair(ctx, chk, nw)
	if rep := chk.RunAll(ctx); !rep.Ready {
		t.Fatalf("at start: %+v", rep)
	}
	live := "sess_live"
	if _, err := nw.Setup(ctx, live); err != nil {
		t.Fatal(err)
	}
	defer nw.Teardown(ctx, live)
	deleteTable := func() {
		t.Helper()
		if out, err := exec.Command("nft", "delete", "table", "inet", tn.Table).CombinedOutput(); err != nil {
			t.Fatalf("deleting the table: %v %s", err, out)
		}
	}
	gateClosed := func(when string) {
		t.Helper()
		// The gate re-runs failing checks on demand; the held topology
		// check keeps that run from ending, so the caller gives up waiting
		// and sees the gate as it stands.
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		ok, failing := chk.Ready(rctx)
		if ok || !strings.Contains(detailOfResults(failing, "topology"), "rebuilt") {
			t.Fatalf("%s: gate open or not saying why: %v %+v", when, ok, failing)
		}
	}

	// The readiness run's firewall check notices, rebuilds and fails; the
	// gate stays closed until the checks have run again.
	hold()
	deleteTable()
	fw := nw.HealingCheck()
	if err := fw.FirewallIntact(ctx); !errors.Is(err, egress.ErrFirewallRepaired) {
		t.Fatalf("the check that rebuilt: %v", err)
	}
	gateClosed("after a readiness run rebuilt")
	if err := fw.FirewallIntact(ctx); err != nil {
		t.Fatalf("the next check: %v", err)
	}
	letGo()
	if rep := waitReady(ctx, chk, 10*time.Second); !rep.Ready {
		t.Fatalf("after verification: %+v", rep)
	}

	// A new session while the table is gone works, and closes the gate
	// until the checks have run again.
	hold()
	deleteTable()
	if _, err := nw.Setup(ctx, "sess_new"); err != nil {
		t.Fatalf("a new session after the table was deleted: %v", err)
	}
	defer nw.Teardown(ctx, "sess_new")
	gateClosed("after Setup rebuilt")
	if err := nw.FirewallIntact(ctx); err != nil {
		t.Fatalf("rules after Setup's rebuild (the live session's included): %v", err)
	}
	letGo()
	if rep := waitReady(ctx, chk, 10*time.Second); !rep.Ready {
		t.Fatalf("after verification: %+v", rep)
	}
}

func detailOf(rep readiness.Report, name string) string { return detailOfResults(rep.Checks, name) }

func detailOfResults(rs []readiness.Result, name string) string {
	for _, r := range rs {
		if r.Name == name {
			return string(r.Status) + ": " + r.Detail
		}
	}
	return ""
}

func waitReady(ctx context.Context, chk *readiness.Checker, limit time.Duration) readiness.Report {
	deadline := time.Now().Add(limit)
	rep := chk.RunAll(ctx)
	for !rep.Ready && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		rep = chk.RunAll(ctx)
	}
	return rep
}
