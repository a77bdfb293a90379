package app

import (
	"strings"
	"testing"
)

// TestExecutorSectionComposed: the executor validates its own section and
// the root config reports each problem under "executor.", every one at
// once, as before the section moved into the executor.
func TestExecutorSectionComposed(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{name: "every problem at once", yaml: "executor:\n  runsc: \"\"\n  platform: nope\n  max_sandboxes: 0\n  warm_pool: 65\n",
			want: []string{"executor.runsc: required", `executor.platform: must be systrap, ptrace or kvm, got "nope"`,
				"executor.max_sandboxes: must be at least 1", "executor.warm_pool: must be between 0 and 64"}},
		{name: "home size", yaml: "executor:\n  home_size: 1M\n", want: []string{"executor.home_size: must be at least 16M"}},
		{name: "bad home size", yaml: "executor:\n  home_size: lots\n", want: []string{`executor.home_size: "lots" is not a size like 256M`}},
		{name: "disk below one home", yaml: "executor:\n  home_size: 512M\n  max_disk: 100M\n", want: []string{"executor.max_disk: must hold at least one home (512M)"}},
		{name: "hibernate", yaml: "executor:\n  hibernate_after: 10ms\n", want: []string{"executor.hibernate_after: must be at least 1s (or 0s)"}},
		{name: "relative homes", yaml: "executor:\n  homes_dir: homes\n", want: []string{`executor.homes_dir: must be an absolute path, got "homes"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte("version: v1\n"+tc.yaml), "test")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestExecutorConfigResolved: sizes and limits land in the executor's
// config in bytes and durations.
func TestExecutorConfigResolved(t *testing.T) {
	c, err := ParseConfig([]byte("version: v1\nexecutor:\n  home_size: 64M\n  max_disk: 1G\n  memory_mb: 128\n  homes_dir: /shared/homes\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	ec, err := c.ExecutorConfig("/rootfs", "/rootfs/versions.json")
	if err != nil {
		t.Fatal(err)
	}
	if ec.HomeBytes != 64<<20 || ec.MaxDisk != 1<<30 || ec.MemoryBytes != 128<<20 || ec.Rootfs != "/rootfs" ||
		ec.DataDir != c.DataDir || ec.MaxTimeout != c.Limits.MaxTimeout.D() || ec.ReapInterval != c.Server.ReapInterval.D() ||
		ec.HomesDir != "/shared/homes" {
		t.Errorf("resolved %+v", ec)
	}
}
