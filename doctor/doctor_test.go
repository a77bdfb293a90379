package doctor

import (
	"os"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/config"
)

// TestDoctorHomesWithoutTools: with no mkfs.ext4 on PATH the homes check
// fails and says what to install.
func TestDoctorHomesWithoutTools(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("doctor's checks need root")
	}
	cfg, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	t.Setenv("PATH", t.TempDir())
	r := checkHomes(t.Context(), cfg)
	if r.Status != Fail || !strings.Contains(r.Detail, "mkfs.ext4 not found") || !strings.Contains(r.Fix, "e2fsprogs") {
		t.Errorf("homes without mkfs.ext4 = %+v", r)
	}
	if ents, _ := os.ReadDir(cfg.DataDir); len(ents) != 0 {
		t.Errorf("the check left %d entries in the data dir", len(ents))
	}
}
