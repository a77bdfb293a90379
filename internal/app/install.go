package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/installer"
	"github.com/sandboxapi/sandboxapi/internal/lifecycle"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/readiness"
	"github.com/sandboxapi/sandboxapi/store"
)

var (
	_ installer.Runner          = (*executor.Jobs)(nil)
	_ installer.Catalog         = mirrorCatalog{}
	_ installer.Network         = installNetwork{}
	_ api.Installer             = (*installer.Installer)(nil)
	_ api.Gate                  = readinessReporter{}
	_ api.ReadinessReporter     = readinessReporter{}
	_ readiness.FirewallChecker = (*egress.Network)(nil)
	_ readiness.MirrorIndex     = mirrorIndex{}
	_ readiness.OSVSource       = mirrorOSV{}
)

// installParts is what the installer unit built: the installer the API
// calls, and the installer's own fenced network with the installer on it
// (both nil without one: not root, no nft; then nwErr says why).
type installParts struct {
	api   api.Installer
	nw    *egress.Network
	inst  *installer.Installer
	nwErr error
}

// installerUnit builds the installer on its own fenced network serving
// the mirror. Without an installer network installs stay closed (the
// readiness unit's firewall and topology checks fail). Start keeps a spare
// installer network ready for the next install; Stop removes it (one left
// by a process that dies is removed by the next start's Reconcile).
func (p *parts) installerUnit() lifecycle.Unit {
	return lifecycle.Unit{
		Name:  "installer",
		Needs: []string{"executor", "sessions", "mirror", "store", "metrics"},
		Provision: func(ctx context.Context) error {
			log := p.env.Log.With("component", "installer")
			icfg := p.env.Config.Installer
			nw, err := egress.NewServiceNetwork(ctx, icfg.Pool, icfg.Table, icfg.Prefix, icfg.Port, p.env.Log.With("component", "installer-network"))
			if err != nil {
				log.Error("installer network unavailable; installs stay closed", "err", err)
				p.inst = installParts{api: closedInstaller{}, nwErr: err}
				return nil
			}
			inst := installer.New(icfg, mirrorCatalog{p.mir}, p.ex.Jobs(), installNetwork{nw}, p.m.InstrumentMirror(p.front.handler), log)
			p.inst = installParts{nw: nw, inst: inst,
				api: recordingInstaller{next: inst, st: p.st, mir: p.mir, log: log, observe: p.m.ObserveInstall}}
			return nil
		},
		Start: func(ctx context.Context) error {
			if p.inst.inst != nil {
				p.inst.inst.Start(ctx)
			}
			return nil
		},
		Stop: func(ctx context.Context) error {
			if p.inst.inst == nil {
				return nil
			}
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return p.inst.inst.Stop(ctx)
		},
	}
}

// readinessUnit builds the readiness checks, which gate the installer and
// make /readyz: the runtimes, the store, the mirror and the OSV database
// and, with an installer network, the firewall and topology of the
// installer's network and (egress on) of the sessions' networks. Start
// runs them once the server listens (the mirror check may ask the server
// itself); Stop ends them.
func (p *parts) readinessUnit() lifecycle.Unit {
	var svc lifecycle.Component
	return lifecycle.Unit{
		Name:  "readiness",
		Needs: []string{"installer", "executor", "sessions", "egress", "mirror", "store"},
		Provision: func(ctx context.Context) error {
			p.chk = newChecks(ctx, p.env, p.inst, p.eg.sessions, p.ex, p.mir, p.front, p.st)
			svc = p.chk.Service(func(ctx context.Context) { waitListening(ctx, LoopbackAddr(p.env.Config.Listen), 30*time.Second) })
			return nil
		},
		Start: func(ctx context.Context) error { return svc.Start(ctx) },
		Stop:  func(ctx context.Context) error { return svc.Stop(ctx) },
	}
}

// newChecks registers readiness's checks (see readinessUnit). sessions is
// egress's session networking (nil while egress is off).
func newChecks(ctx context.Context, env *Env, ip installParts, sessions *egress.Sessions, ex *executor.Executor, mir *mirror.Mirror, front mirrorFront, st *store.Store) *readiness.Checker {
	chk := readiness.New(env.Config.Readiness, env.Log.With("component", "readiness"))
	chk.Register("runtimes", func(context.Context) (string, error) { return runtimesCheck(ex.RuntimeList(), time.Now()) })
	if ip.nw == nil {
		err := ip.nwErr
		chk.Register("firewall", func(context.Context) (string, error) { return "", fmt.Errorf("installer network unavailable: %w", err) })
		chk.Register("topology", func(context.Context) (string, error) { return "", errors.New("installer network unavailable") })
	} else {
		nw, inst := ip.nw, ip.inst
		fences := map[string]readiness.FirewallChecker{"installer": nw.HealingCheck(), "installer-chains": nw.ChainsCheck()}
		closeOnRepair(ctx, chk, nw)
		probes := map[string]readiness.Probe{
			"installer": func(ctx context.Context) (string, error) { return inst.Probe(ctx) },
		}
		// With egress on, session networks are fenced and measured too.
		if sessions != nil {
			fences["sessions"] = sessions.Network().HealingCheck()
			closeOnRepair(ctx, chk, sessions.Network())
			fences["sessions-chains"] = sessions.Network().ChainsCheck()
			probes["sessions"] = func(ctx context.Context) (string, error) { return sessions.Probe(ctx, ex.Jobs()) }
			// A live session whose proxy listener died can reach nothing:
			// the proxy says so, and readiness shows it within a check
			// interval (the topology canary only sees fresh networks).
			chk.Register("egress", func(context.Context) (string, error) {
				if err := sessions.Health(); err != nil {
					return "", err
				}
				return "every live session's proxy listeners are serving", nil
			})
		}
		chk.Register("firewall", readiness.Firewall(fences))
		chk.RegisterEvery("topology", env.Config.Readiness.TopologyInterval.D(), readiness.Topology(probes))
	}
	// Installs record rows: a store that cannot be reached closes them.
	chk.Register("store", storeCheck(st, env.Log.With("component", "readiness")))
	chk.Register("mirror", readiness.Mirror(mirrorIndex{mir}, front.base, 3))
	chk.Register("osv", readiness.OSV(mirrorOSV{m: mir, maxRecord: env.Config.Mirror.OSVMaxRecordAge.D()}))
	return chk
}

func waitListening(ctx context.Context, addr string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// installNetwork adapts egress.Network to installer.Network.
type installNetwork struct{ n *egress.Network }

func (n installNetwork) Setup(ctx context.Context, id string) (installer.Endpoint, error) {
	att, err := n.n.Setup(ctx, id)
	if err != nil {
		return installer.Endpoint{}, err
	}
	return installer.Endpoint{NetnsPath: att.NetnsPath, HostAddr: att.HostAddr}, nil
}

func (n installNetwork) Teardown(ctx context.Context, id string) error { return n.n.Teardown(ctx, id) }

// mirrorCatalog adapts the mirror to installer.Catalog.
type mirrorCatalog struct{ m *mirror.Mirror }

func (c mirrorCatalog) Lookup(ctx context.Context, m installer.Manager, name, version string) (installer.Artifact, error) {
	a, err := c.m.Lookup(ctx, mirror.Manager(m), name, version)
	out := installer.Artifact{Name: a.Name, Version: a.Version, Filename: a.Filename, SHA256: a.SHA256, Integrity: a.Integrity,
		Size: a.Size, URLPath: a.URLPath, Status: string(a.Status), Reasons: a.Reasons, Stripped: a.Stripped, Dependencies: a.Dependencies}
	switch {
	case errors.Is(err, mirror.ErrNotFound):
		return out, fmt.Errorf("%w: %w", installer.ErrNotFound, err)
	case errors.Is(err, mirror.ErrNotAdmitted):
		return out, fmt.Errorf("%w: %w", installer.ErrNotAdmitted, err)
	case err != nil:
		return out, err
	}
	if out.Requires, err = c.m.RequiresDist(ctx, a); err != nil {
		return out, err
	}
	return out, nil
}

func (c mirrorCatalog) Versions(ctx context.Context, m installer.Manager, name string) ([]string, []string, error) {
	return c.m.Versions(ctx, mirror.Manager(m), name)
}

func (c mirrorCatalog) Satisfying(ctx context.Context, name, rng string) ([]string, []string, error) {
	admitted, known, err := c.m.Satisfying(ctx, name, rng)
	if errors.Is(err, mirror.ErrRange) {
		return nil, nil, fmt.Errorf("%w: %w", installer.ErrRange, err)
	}
	return admitted, known, err
}

// mirrorIndex adapts the mirror to readiness.MirrorIndex.
type mirrorIndex struct{ m *mirror.Mirror }

func (x mirrorIndex) Admitted(ctx context.Context) ([]readiness.MirrorFile, error) {
	as, err := x.m.List(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []readiness.MirrorFile
	for _, a := range as {
		if a.Status == mirror.StatusAdmitted {
			out = append(out, readiness.MirrorFile{Manager: string(a.Manager), Name: a.Name, Version: a.Version, Filename: a.Filename, SHA256: a.SHA256, URLPath: a.URLPath})
		}
	}
	return out, nil
}

// mirrorOSV adapts the mirror to readiness.OSVSource.
type mirrorOSV struct {
	m         *mirror.Mirror
	maxRecord time.Duration
}

func (o mirrorOSV) OSVInfo(ctx context.Context) (readiness.OSVInfo, error) {
	st, err := o.m.OSVStatus(ctx)
	if err != nil {
		return readiness.OSVInfo{}, err
	}
	return readiness.OSVInfo{SnapshotID: st.SnapshotID, ImportedAt: st.ImportedAt, NewestModified: st.NewestModified,
		Records: st.Records, Age: st.Age, MaxAge: st.MaxAge, Stale: st.Stale, MaxRecordAge: o.maxRecord}, nil
}

func (o mirrorOSV) Judge(ctx context.Context) (int, int, error) {
	res, err := o.m.Recheck(ctx)
	return res.Checked, len(res.Quarantined), err
}

// readinessReporter adapts the checker to the API's reporter and gate.
type readinessReporter struct{ c *readiness.Checker }

func toAPIChecks(rs []readiness.Result) []api.CheckResult {
	out := make([]api.CheckResult, 0, len(rs))
	for _, r := range rs {
		out = append(out, api.CheckResult{Name: r.Name, Status: string(r.Status), Detail: r.Detail, LastRun: r.LastRun, DurationMS: r.DurationMS})
	}
	return out
}

func (r readinessReporter) Checks(ctx context.Context, refresh bool) (bool, []api.CheckResult) {
	rep := r.c.Report()
	if refresh {
		rep = r.c.Refresh(ctx)
	}
	return rep.Ready, toAPIChecks(rep.Checks)
}

func (r readinessReporter) Ready(ctx context.Context) (bool, []api.CheckResult) {
	ok, failing := r.c.Ready(ctx)
	return ok, toAPIChecks(failing)
}

// closedInstaller stands in when there is no installer network; the gate
// answers first, so it is never reached in practice.
type closedInstaller struct{}

func (closedInstaller) Install(context.Context, string, string, sandbox.InstallRequest, time.Duration) (sandbox.InstallReply, error) {
	return sandbox.InstallReply{}, fmt.Errorf("%w: no installer network", sandbox.ErrInstallFailed)
}

// closeOnRepair makes a rebuild of n's rules (noticed by a session's or an
// installer's network setup between readiness runs) close the install
// gate at once: the firewall and topology checks fail until they run
// again, which is started right away.
func closeOnRepair(ctx context.Context, chk *readiness.Checker, n *egress.Network) {
	n.OnRepair(func(reason string) {
		detail := egress.ErrFirewallRepaired.Error() + " (" + reason + "); verifying them"
		chk.Fail("firewall", detail)
		chk.Fail("topology", detail)
		go chk.RunAll(ctx)
	})
}

// storeCheck is readiness's store check: SELECT 1 within
// store.PingTimeout. Its detail names the engine, never the cause (which
// may name the database's host and user: /readyz needs no key); the cause
// goes to the log.
func storeCheck(st *store.Store, log *slog.Logger) readiness.Func {
	return func(ctx context.Context) (string, error) {
		start := time.Now()
		if err := st.Ping(ctx); err != nil {
			log.Warn("store check failed", "err", err)
			if errors.Is(err, store.ErrUnavailable) {
				return "", fmt.Errorf("%s cannot be reached (the cause is in the node's log)", st.Dialect())
			}
			return "", fmt.Errorf("%s does not answer SELECT 1 (the cause is in the node's log)", st.Dialect())
		}
		return fmt.Sprintf("%s answers SELECT 1 in %d ms", st.Dialect(), time.Since(start).Milliseconds()), nil
	}
}
