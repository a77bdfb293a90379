package doctor

import (
	"os"
	"strings"
	"testing"
)

// TestDoctorHomesWithoutTools: with no mkfs.ext4 on PATH the homes check
// fails and says what to install.
func TestDoctorHomesWithoutTools(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("doctor's checks need root")
	}
	cfg := &Config{DataDir: t.TempDir(), HomeSize: "256M"}
	t.Setenv("PATH", t.TempDir())
	r := checkHomes(t.Context(), cfg)
	if r.Status != Fail || !strings.Contains(r.Detail, "mkfs.ext4 not found") || !strings.Contains(r.Fix, "e2fsprogs") {
		t.Errorf("homes without mkfs.ext4 = %+v", r)
	}
	if ents, _ := os.ReadDir(cfg.DataDir); len(ents) != 0 {
		t.Errorf("the check left %d entries in the data dir", len(ents))
	}
}
