package cli

import (
	"errors"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/internal/app"
)

func TestEgressConfig(t *testing.T) {
	cfg, err := app.ParseConfig(nil, "empty")
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if cfg.Egress.Enabled || cfg.Egress.ConnectPort != 3128 || cfg.Egress.Network.Pool == "" {
		t.Fatalf("egress defaults: %+v", cfg.Egress)
	}
	if _, err := app.ParseConfig([]byte("egress:\n  enabled: true\n"), "no resolvers"); !errors.Is(err, egress.ErrInvalidConfig) {
		t.Fatalf("enabled without resolvers: %v", err)
	}
	cfg, err = app.ParseConfig([]byte("egress:\n  enabled: true\n  resolvers: [192.0.2.53]\n  idle_timeout: 90s\n  network:\n    prefix: abc\n"), "enabled")
	if err != nil {
		t.Fatalf("enabled: %v", err)
	}
	if cfg.Egress.IdleTimeout != 90*time.Second || cfg.Egress.Network.Prefix != "abc" || cfg.Egress.Network.Table != "sandboxapi" || cfg.Egress.DNSPort != 53 {
		t.Fatalf("decoded: %+v", cfg.Egress)
	}
	if _, err := app.ParseConfig([]byte("egress:\n  enabeld: true\n"), "typo"); err == nil {
		t.Fatal("unknown egress field accepted")
	}
}
