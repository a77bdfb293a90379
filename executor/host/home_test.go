package host

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMountSource reads a mount's source from mountinfo: what UnmountHome
// waits on (the loop device) after an unmount.
func TestMountSource(t *testing.T) {
	if got := mountSource("/proc"); got != "proc" {
		t.Errorf("source of /proc = %q, want proc", got)
	}
	if got := mountSource("/no/such/mount/point"); got != "" {
		t.Errorf("source of nothing mounted = %q, want empty", got)
	}
}

// holdsMount matches only the device at the path: another node's mount of
// the same image (same device, its own path) and another device at the
// path are not copies of ours.
func TestHoldsMount(t *testing.T) {
	dir := t.TempDir()
	info := filepath.Join(dir, "mountinfo")
	lines := "26 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n" +
		"44 26 7:3 / /data/sessions/s1/home rw,nosuid - ext4 /dev/loop3 rw\n" +
		"45 26 7:4 / /data/sessions/s2/home rw,nosuid - ext4 /dev/loop4 rw\n" +
		"46 26 7:5 / /data/with\\040space/home rw - ext4 /dev/loop5 rw\n" +
		"47 26 7:6 / /other/node/home rw - ext4 /dev/loop6 rw\n" +
		"short line\n"
	if err := os.WriteFile(info, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		majmin, mnt string
		want        bool
	}{
		{"7:3", "/data/sessions/s1/home", true},
		{"7:4", "/data/sessions/s1/home", false}, // another device at our path
		{"7:3", "/data/sessions/s2/home", false}, // our device elsewhere
		{"7:6", "/data/sessions/s1/home", false},
		{"7:5", "/data/with space/home", true},
		{"7:5", "/data/with\\040space/home", false},
		{"7:3", "/data/sessions/s1", false},
		{"7:3", "", false},
		{"", "/data/sessions/s1/home", false},
	} {
		if got := holdsMount(info, c.majmin, c.mnt); got != c.want {
			t.Errorf("holdsMount(%q, %q) = %v, want %v", c.majmin, c.mnt, got, c.want)
		}
	}
	if holdsMount(filepath.Join(dir, "missing"), "7:3", "/data/sessions/s1/home") {
		t.Error("a process that is gone holds nothing")
	}
}
