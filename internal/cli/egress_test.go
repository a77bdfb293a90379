package cli

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/internal/config"
)

func TestSandboxProxyEnv(t *testing.T) {
	att := &egress.Attachment{HostAddr: netip.MustParseAddr("10.200.0.1"), SandboxAddr: netip.MustParseAddr("10.200.0.2")}
	env := sandboxProxyEnv(att, 3128)
	const u = "http://10.200.0.1:3128"
	for _, want := range []string{
		"HTTPS_PROXY=" + u, "https_proxy=" + u, "HTTP_PROXY=" + u, "http_proxy=" + u,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
		"npm_config_https_proxy=" + u, "npm_config_proxy=" + u, "PIP_PROXY=" + u,
	} {
		if !slices.Contains(env, want) {
			t.Errorf("missing %s in %q", want, env)
		}
	}
	seen := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if seen[k] {
			t.Errorf("%s set twice in %q", k, env)
		}
		seen[k] = true
	}
}

func TestParseNetworkRequest(t *testing.T) {
	cases := []struct {
		name    string
		raw     string
		allows  string
		denies  string
		wantErr bool
	}{
		{name: "any public host", raw: `{"enabled":true}`, allows: "example.org"},
		{name: "list", raw: `{"enabled":true,"allowed_domains":["*.example.com"]}`, allows: "a.example.com", denies: "example.com"},
		{name: "disabled", raw: `{"enabled":false}`, denies: "example.org"},
		{name: "bad entry", raw: `{"enabled":true,"allowed_domains":["*"]}`, wantErr: true},
		{name: "not json", raw: `{`, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := parseNetworkRequest(json.RawMessage(tc.raw))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.allows != "" {
				if _, ok := pol.Allows(tc.allows); !ok {
					t.Errorf("%s denied", tc.allows)
				}
			}
			if tc.denies != "" {
				if _, ok := pol.Allows(tc.denies); ok {
					t.Errorf("%s allowed", tc.denies)
				}
			}
		})
	}
}

func TestEgressConfig(t *testing.T) {
	cfg, err := config.Parse(nil, "empty")
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if cfg.Egress.Enabled || cfg.Egress.ConnectPort != 3128 || cfg.Egress.Network.Pool == "" {
		t.Fatalf("egress defaults: %+v", cfg.Egress)
	}
	if _, err := config.Parse([]byte("egress:\n  enabled: true\n"), "no resolvers"); !errors.Is(err, egress.ErrInvalidConfig) {
		t.Fatalf("enabled without resolvers: %v", err)
	}
	cfg, err = config.Parse([]byte("egress:\n  enabled: true\n  resolvers: [192.0.2.53]\n  idle_timeout: 90s\n  network:\n    prefix: abc\n"), "enabled")
	if err != nil {
		t.Fatalf("enabled: %v", err)
	}
	if cfg.Egress.IdleTimeout != 90*time.Second || cfg.Egress.Network.Prefix != "abc" || cfg.Egress.Network.Table != "sandboxapi" || cfg.Egress.DNSPort != 53 {
		t.Fatalf("decoded: %+v", cfg.Egress)
	}
	if _, err := config.Parse([]byte("egress:\n  enabeld: true\n"), "typo"); err == nil {
		t.Fatal("unknown egress field accepted")
	}
}
