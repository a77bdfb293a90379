package host

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Cgroups of sandboxes: runsc makes one per sandbox under /sandboxapi in
// every controller; these read them and remove those runsc left.

// CgroupDirs lists the per-sandbox cgroups under every controller.
func CgroupDirs() []string {
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/*/sandboxapi/*", "/sys/fs/cgroup/sandboxapi/*"} {
		m, _ := filepath.Glob(pat)
		for _, p := range m {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				out = append(out, p)
			}
		}
	}
	return out
}

// RemoveStaleCgroups removes the empty cgroups of this executor's
// sandboxes (own) that no longer run (not in keep); runsc removes them
// itself unless it was killed. Cgroups of other servers' sandboxes on the
// host are left alone.
func RemoveStaleCgroups(own, keep map[string]bool) {
	for _, p := range CgroupDirs() {
		if id := filepath.Base(p); own[id] && !keep[id] {
			_ = os.Remove(p)
		}
	}
}

// HostOOM reports whether the sandbox's memory cgroup (named cg under
// /sandboxapi) hit its limit.
func HostOOM(cg string) bool { return CgroupOOM("/sys/fs/cgroup", cg) }

// CgroupOOM reads the sandbox's memory cgroup under root: cgroup v1
// (memory/sandboxapi/<id>/memory.oom_control's oom_kill count, or
// memory.failcnt) or v2 (sandboxapi/<id>/memory.events, its oom and
// oom_kill counts). On recent kernels a v1 group whose task the OOM
// killer took can show failcnt 0: oom_control is what tells.
func CgroupOOM(root, id string) bool {
	v1 := root + "/memory/sandboxapi/" + id + "/"
	if b, err := os.ReadFile(v1 + "memory.failcnt"); err == nil && strings.TrimSpace(string(b)) != "0" {
		return true
	}
	if b, err := os.ReadFile(v1 + "memory.oom_control"); err == nil && countNonZero(b, "oom_kill", "under_oom") {
		return true
	}
	b, err := os.ReadFile(root + "/sandboxapi/" + id + "/memory.events")
	return err == nil && countNonZero(b, "oom", "oom_kill")
}

// countNonZero reports whether a "name value" file has a non-zero value
// for one of names.
func countNonZero(b []byte, names ...string) bool {
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[1] != "0" && slices.Contains(names, f[0]) {
			return true
		}
	}
	return false
}

// reapWait bounds how long ReapCgroups waits for killed sandboxes to leave
// their cgroups.
const reapWait = 15 * time.Second

// cgroupsLeft reports whether a cgroup of one of names is still there.
func cgroupsLeft(names map[string]bool) bool {
	for _, p := range CgroupDirs() {
		if names[filepath.Base(p)] {
			return true
		}
	}
	return false
}

// LiveSandboxes counts the ids of own that have a folder among cgroupDirs
// (one folder per running sandbox under each controller).
func LiveSandboxes(own, cgroupDirs []string) int {
	running := map[string]bool{}
	for _, dir := range cgroupDirs {
		running[filepath.Base(dir)] = true
	}
	n := 0
	for _, id := range own {
		if running[id] {
			n++
		}
	}
	return n
}

// ReapCgroups removes the cgroups names of killed sandboxes (runsc
// removes a sandbox's cgroups itself only when it is not killed). A
// cgroup can be removed only once the sandbox's last thread has exited,
// which on a loaded host takes seconds (a systrap sandbox has many
// threads; CI saw more than the two seconds this once waited), so the
// removal is tried again until the cgroups are gone or reapWait passes.
func ReapCgroups(names map[string]bool) {
	if len(names) == 0 {
		return
	}
	for deadline := time.Now().Add(reapWait); ; time.Sleep(50 * time.Millisecond) {
		RemoveStaleCgroups(names, nil)
		if !cgroupsLeft(names) || time.Now().After(deadline) {
			return
		}
	}
}
