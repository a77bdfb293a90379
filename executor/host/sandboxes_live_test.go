package host

import "testing"

// TestLiveSandboxesCountsOwnOnly checks that the live count takes the
// sandboxes of this server's runsc root that have a cgroup, not every
// sandboxapi cgroup on the host.
func TestLiveSandboxesCountsOwnOnly(t *testing.T) {
	cgroups := []string{
		"/sys/fs/cgroup/pids/sandboxapi/own1", "/sys/fs/cgroup/memory/sandboxapi/own1",
		"/sys/fs/cgroup/pids/sandboxapi/own2",
		"/sys/fs/cgroup/pids/sandboxapi/other1", "/sys/fs/cgroup/memory/sandboxapi/other2",
	}
	for _, tc := range []struct {
		name string
		own  []string
		want int
	}{
		{"none of ours", nil, 0},
		{"ours, one controller or two", []string{"own1", "own2"}, 2},
		{"ours without a cgroup (stopped)", []string{"own1", "own3"}, 1},
	} {
		if got := LiveSandboxes(tc.own, cgroups); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
