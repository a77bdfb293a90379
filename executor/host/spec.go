package host

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxapi/sandboxapi/executor/guest"
)

// Paths inside every sandbox.
const (
	HomeDir  = "/home/sandbox"
	GuestDir = "/opt/sandboxapi/bin"
	GuestBin = GuestDir + "/guest"
	// SandboxUID runs user code; it owns the home.
	SandboxUID = 1000
	// stagingDir is where the guest writes each call's work folder (the
	// code, the call's files, compile outputs): a tmpfs of its own over
	// /tmp/.sbx, owned by root and closed to the user, so a full /tmp (or
	// a /tmp out of inodes) never stops the next call from being staged.
	stagingDir = guest.WorkRoot
	// minStagingBytes is the smallest staging area: it holds a stateless
	// call's files (maxStatelessFileBytes) with room to compile.
	minStagingBytes = 16 << 20
)

// StagingBytes is the size of the staging tmpfs of a sandbox whose /tmp
// holds tmp bytes: as much as /tmp, where the work folders used to live,
// and never below minStagingBytes.
func StagingBytes(tmp int64) int64 { return max(tmp, minStagingBytes) }

// guestCaps are pid 1's capabilities, the ones `runsc exec` gives a guest.
var guestCaps = []string{"CAP_CHOWN", "CAP_SETUID", "CAP_SETGID", "CAP_KILL"}

// SpecParams are the per-sandbox inputs of the OCI spec.
type SpecParams struct {
	ID          string
	Cgroup      string // its cgroup under /sandboxapi (Executor.cgroupName)
	Rootfs      string
	Home        string // host folder mounted at /home/sandbox ("" for none)
	GuestDir    string // host folder holding the guest binary
	MemoryBytes int64  // host cgroup limit (sandbox kernel included)
	Pids        int64  // host cgroup pids limit (sandbox kernel threads included)
	CPUs        float64
	TmpBytes    int64
	NetNS       string // path of a network namespace, "" for none
}

// SandboxSpec builds the OCI runtime spec of one sandbox: read-only shared
// rootfs, private /tmp, the guest's staging area, the session's home, the
// guest as pid 1, no capabilities for anything but the guest's own execs.
func SandboxSpec(p SpecParams) *specs.Spec {
	period := uint64(100000)
	quota := int64(p.CPUs * float64(period))
	pids := p.Pids
	mem := p.MemoryBytes
	swap := p.MemoryBytes
	noNewPrivs := true
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", fmt.Sprintf("size=%d", p.TmpBytes), "mode=1777"}},
		// Mounted over a folder of /tmp, after it: a mount point cannot be
		// renamed or removed, and the folder needs no rootfs change.
		{Destination: stagingDir, Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", fmt.Sprintf("size=%d", StagingBytes(p.TmpBytes)), "mode=0711", "uid=0", "gid=0"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "nodev", "noexec", "size=16m", "mode=1777"}},
		{Destination: GuestDir, Type: "bind", Source: p.GuestDir, Options: []string{"rbind", "ro", "nosuid", "nodev"}},
	}
	if p.Home != "" {
		mounts = append(mounts, specs.Mount{Destination: HomeDir, Type: "bind", Source: p.Home, Options: []string{"rbind", "rw", "nosuid", "nodev"}})
	}
	ns := []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.NetworkNamespace, Path: p.NetNS}}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User:            specs.User{UID: 0, GID: 0},
			Args:            []string{GuestBin, "init"},
			Env:             []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			Cwd:             "/",
			NoNewPrivileges: noNewPrivs,
			// The guest (pid 1, the agent) writes the work folder and hands
			// it to the user, switches to the user and kills what a run
			// left; the user's processes get none of these (setuid to a
			// non-root uid clears them, and no_new_privs keeps them off).
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  guestCaps,
				Effective: guestCaps,
				Permitted: guestCaps,
			},
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 4096}, {Type: "RLIMIT_CORE", Hard: 0, Soft: 0}},
		},
		Root:     &specs.Root{Path: p.Rootfs, Readonly: true},
		Hostname: "sandbox",
		Mounts:   mounts,
		Linux: &specs.Linux{
			CgroupsPath: "/sandboxapi/" + p.Cgroup,
			Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: &mem, Swap: &swap},
				Pids:   &specs.LinuxPids{Limit: pids},
				CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
			},
			Namespaces: ns,
		},
	}
}
