package executor

import "testing"

// TestMountSource reads a mount's source from mountinfo: what unmountHome
// waits on (the loop device) after an unmount.
func TestMountSource(t *testing.T) {
	if got := mountSource("/proc"); got != "proc" {
		t.Errorf("source of /proc = %q, want proc", got)
	}
	if got := mountSource("/no/such/mount/point"); got != "" {
		t.Errorf("source of nothing mounted = %q, want empty", got)
	}
}
