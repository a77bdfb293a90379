package app

import (
	"net"
	"strings"
	"testing"
)

func instanceConfig(t *testing.T, dataDir, listen string) *Config {
	t.Helper()
	cfg, err := ParseConfig(nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.Listen = dataDir, listen
	cfg.Installer.Table = "h5test_inst"
	cfg.Egress.Enabled = true
	cfg.Egress.Network.Table = "h5test_egr"
	return cfg
}

// TestClaimInstance: a second serve on the same data dir, nftables tables
// and listen address fails before anything starts, with one message that
// names every setting to change; with its own it starts; after the first
// releases, the same settings are free again.
func TestClaimInstance(t *testing.T) {
	locks := t.TempDir()
	dir := t.TempDir()
	first, err := claimInstance(instanceConfig(t, dir, "127.0.0.1:0"), locks)
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = claimInstance(instanceConfig(t, dir, taken.Addr().String()), locks)
	if err == nil {
		t.Fatal("a second instance on the same data dir, tables and address was let through")
	}
	msg := err.Error()
	for _, want := range []string{"--data-dir", "SANDBOXAPI_DATA_DIR", "installer.table", "egress.network.table", "--listen", "SANDBOXAPI_LISTEN",
		"nftables table inet h5test_inst", "nftables table inet h5test_egr", taken.Addr().String(), "pid "} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	// Its own data dir, tables and a free address: fine.
	other := instanceConfig(t, t.TempDir(), "127.0.0.1:0")
	other.Installer.Table, other.Egress.Network.Table = "h5test_inst2", "h5test_egr2"
	second, err := claimInstance(other, locks)
	if err != nil {
		t.Fatalf("an instance with its own settings: %v", err)
	}
	second.release()
	// Egress off: its table is not claimed.
	noEgress := instanceConfig(t, t.TempDir(), "127.0.0.1:0")
	noEgress.Installer.Table, noEgress.Egress.Enabled = "h5test_inst3", false
	if c, err := claimInstance(noEgress, locks); err != nil {
		t.Fatalf("egress off, same egress table: %v", err)
	} else {
		c.release()
	}
	first.release()
	again, err := claimInstance(instanceConfig(t, dir, "127.0.0.1:0"), locks)
	if err != nil {
		t.Fatalf("after the first released: %v", err)
	}
	again.release()
}
