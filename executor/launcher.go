package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/store"
)

// launcher knows where a sandbox's files live under the data dir and how
// to start one: its paths, its cgroup, its OCI bundle, runsc run with an
// agent channel. It knows no session state. Every field is set by New and
// never changed, so it is safe for concurrent use; its zero value is not
// usable.
type launcher struct {
	cfg    Config
	runsc  *host.Runsc
	store  *store.Store
	agents *agent.Transport
	log    *slog.Logger
}

// home returns where session (or warm sandbox) id's home lives.
func (l *launcher) home(id string) host.Home {
	return host.Home{Dir: l.dir(id), ImgDir: filepath.Join(l.homesDir(), id)}
}

// sessionsDir holds every session's (and warm sandbox's) folder.
func (l *launcher) sessionsDir() string { return filepath.Join(l.cfg.DataDir, "sessions") }

// homesDir is where the home images are (executor.homes_dir).
func (l *launcher) homesDir() string {
	if l.cfg.HomesDir == "" {
		return l.sessionsDir()
	}
	return l.cfg.HomesDir
}

// guestDir holds the guest binary every sandbox mounts.
func (l *launcher) guestDir() string { return filepath.Join(l.cfg.DataDir, "guest") }

// cgroupName is the cgroup (under /sandboxapi) of sandbox id: the id
// itself on a single node; on a cluster node the id after the node's name,
// because nodes sharing a host may each hold a sandbox of one session (the
// new owner's, and the stale one a dead node left and removes when it
// starts again), and a removal must never reach the other's cgroup.
func (l *launcher) cgroupName(id string) string {
	if n := l.store.Node(); n != "" {
		return n + "." + id
	}
	return id
}

// cgroupNames maps a set of sandbox ids to their cgroup names.
func (l *launcher) cgroupNames(ids map[string]bool) map[string]bool {
	out := make(map[string]bool, len(ids))
	for id, v := range ids {
		out[l.cgroupName(id)] = v
	}
	return out
}

// jobsDir holds the installer jobs' bundles.
func (l *launcher) jobsDir() string { return filepath.Join(l.cfg.DataDir, "jobs") }

// dir is session (or warm sandbox) id's folder.
func (l *launcher) dir(id string) string { return filepath.Join(l.sessionsDir(), id) }

// startSandbox writes the bundle and starts the sandbox.
func (l *launcher) startSandbox(ctx context.Context, id, dir, netns string) error {
	bundle, err := l.writeBundle(id, dir, netns)
	if err != nil {
		return err
	}
	return l.runSandbox(ctx, id, bundle, netns != "")
}

// writeBundle writes the sandbox's OCI bundle under dir and returns its
// folder.
func (l *launcher) writeBundle(id, dir, netns string) (string, error) {
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return "", fmt.Errorf("creating bundle: %w", err)
	}
	spec := host.SandboxSpec(host.SpecParams{
		ID: id, Cgroup: l.cgroupName(id), Rootfs: l.cfg.Rootfs, Home: host.HomeMount(dir), GuestDir: l.guestDir(),
		MemoryBytes: l.hostMemory(), Pids: l.cfg.Pids*2 + 128, CPUs: l.cfg.CPUs, TmpBytes: l.cfg.TmpBytes, NetNS: netns,
	})
	if netns != "" {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: resolvFile(dir), Options: []string{"rbind", "ro"}})
		if _, err := os.Stat(caBundleFile(dir)); err == nil {
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/" + systemCABundle, Type: "bind", Source: caBundleFile(dir), Options: []string{"rbind", "ro"}})
		}
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encoding spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
		return "", fmt.Errorf("writing spec: %w", err)
	}
	return bundle, nil
}

// runSandbox starts the sandbox of bundle (runsc run --detach).
func (l *launcher) runSandbox(ctx context.Context, id, bundle string, withNet bool) error {
	network := "none"
	if withNet {
		network = "sandbox"
	}
	err := l.startWithAgent(ctx, id, bundle, network)
	if err != nil && ctx.Err() == nil {
		// One retry for transient failures of runsc under host load; the
		// half-made container goes first.
		l.log.WarnContext(ctx, "starting sandbox failed, retrying once", "sandbox", id, "err", err)
		_ = l.agents.Destroy(ctx, id)
		err = l.startWithAgent(ctx, id, bundle, network)
	}
	if err != nil {
		return fmt.Errorf("starting sandbox %s: %w", id, err)
	}
	return nil
}

// startWithAgent starts the sandbox with its stdio on a fresh agent
// channel. A sandbox whose agent does not answer (its hello is awaited at
// the first run) still works, through `runsc exec`.
func (l *launcher) startWithAgent(ctx context.Context, id, bundle, network string) error {
	pipes, err := agent.NewPipes()
	if err != nil {
		return err
	}
	err = l.runsc.Start(ctx, id, bundle, network, pipes.SandboxIn, pipes.SandboxOut)
	pipes.CloseSandboxSide()
	if err != nil {
		pipes.CloseAll()
		if ctx.Err() != nil {
			// The runsc run was killed part way: its sandbox and gofer
			// may be up with no state for "runsc delete" to find.
			if n := host.KillSandboxProcesses(l.runsc.Root, map[string]bool{id: true}); n > 0 {
				l.log.Warn("killed the processes of a sandbox whose start was cut short", "sandbox", id, "processes", n)
				host.ReapCgroups(l.cgroupNames(map[string]bool{id: true}))
			}
		}
		return err
	}
	l.agents.Set(id, pipes.Conn())
	return nil
}

// hostMemory is the host cgroup limit: the guest enforces MemoryBytes on
// the sandbox's own processes; above that sit /tmp and the staging area
// (both memory-backed) and the sandbox kernel, so a bomb is stopped inside
// before the host kills the whole sandbox.
func (l *launcher) hostMemory() int64 {
	return l.cfg.MemoryBytes + l.cfg.TmpBytes + host.StagingBytes(l.cfg.TmpBytes) + 256<<20
}
