package egress

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := func() Config {
		c := DefaultConfig()
		c.Resolvers = []string{"127.0.0.1:53", "9.9.9.9"}
		return c
	}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr []string
	}{
		{name: "defaults with resolvers", mutate: func(*Config) {}},
		{name: "no resolvers", mutate: func(c *Config) { c.Resolvers = nil }, wantErr: []string{"resolvers is empty"}},
		{name: "resolver by name", mutate: func(c *Config) { c.Resolvers = []string{"dns.google"} }, wantErr: []string{`resolver "dns.google"`}},
		{name: "bad cidr and zero timeout", mutate: func(c *Config) {
			c.ExtraAllowedCIDRs = []string{"10.0.0.1/8", "nope"}
			c.IdleTimeout = 0
		}, wantErr: []string{"host bits", `"nope"`, "idle_timeout"}},
		{name: "no ports", mutate: func(c *Config) { c.AllowedPorts = nil }, wantErr: []string{"allowed_ports"}},
		{name: "tunnel limit", mutate: func(c *Config) { c.MaxTunnelsPerSession = 0 }, wantErr: []string{"max_tunnels_per_session"}},
		{name: "no audit retention", mutate: func(c *Config) { c.AuditRetention = 0 }, wantErr: []string{"audit_retention must be positive"}},
		{name: "negative audit retention", mutate: func(c *Config) { c.AuditRetention = -time.Hour }, wantErr: []string{"audit_retention must be positive"}},
		{name: "small pool", mutate: func(c *Config) { c.Network.Pool = "10.0.0.0/30" }, wantErr: []string{"network.pool"}},
		{name: "v6 pool", mutate: func(c *Config) { c.Network.Pool = "fd00::/64" }, wantErr: []string{"network.pool"}},
		{name: "pending limit", mutate: func(c *Config) { c.MaxPendingPerSession = 0 }, wantErr: []string{"max_pending_per_session"}},
		{name: "extra cidr covers the pool", mutate: func(c *Config) { c.ExtraAllowedCIDRs = []string{"10.0.0.0/8"} },
			wantErr: []string{`extra_allowed_cidrs "10.0.0.0/8" overlaps network.pool "10.200.0.0/16"`}},
		{name: "extra cidr inside the pool", mutate: func(c *Config) { c.ExtraAllowedCIDRs = []string{"10.200.3.0/30"} },
			wantErr: []string{`extra_allowed_cidrs "10.200.3.0/30" overlaps network.pool`}},
		{name: "extra cidr equal to the pool", mutate: func(c *Config) { c.ExtraAllowedCIDRs = []string{"10.200.0.0/16"} },
			wantErr: []string{"overlaps network.pool"}},
		{name: "extra cidr of everything", mutate: func(c *Config) { c.ExtraAllowedCIDRs = []string{"10.50.0.0/24", "0.0.0.0/0"} },
			wantErr: []string{`"0.0.0.0/0" overlaps network.pool`}},
		{name: "extra cidr beside the pool", mutate: func(c *Config) { c.ExtraAllowedCIDRs = []string{"10.201.0.0/16", "10.199.255.0/24", "2001:db8::/32"} }},
		{name: "long prefix", mutate: func(c *Config) { c.Network.Prefix = "toolong" }, wantErr: []string{"network.prefix"}},
		{name: "bad table", mutate: func(c *Config) { c.Network.Table = "a b" }, wantErr: []string{"network.table"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tt.mutate(&c)
			err := c.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v is not ErrInvalidConfig", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestConfigCheckDisjoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		extra   []string
		other   string
		wantErr bool
	}{
		{name: "installer pool covered", extra: []string{"10.0.0.0/8"}, other: "10.201.0.0/16", wantErr: true},
		{name: "installer pool partly", extra: []string{"10.201.128.0/17"}, other: "10.201.0.0/16", wantErr: true},
		{name: "disjoint", extra: []string{"10.50.0.0/16", "198.18.0.0/24"}, other: "10.201.0.0/16"},
		{name: "v6 extra against v4 pool", extra: []string{"::/0"}, other: "10.201.0.0/16"},
		{name: "unparsable pool left to its own check", extra: []string{"10.0.0.0/8"}, other: "nope"},
		{name: "no extra", other: "10.201.0.0/16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			c.ExtraAllowedCIDRs = tt.extra
			err := c.CheckDisjoint("installer.pool", tt.other)
			if (err != nil) != tt.wantErr {
				t.Fatalf("CheckDisjoint = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "installer.pool")) {
				t.Fatalf("error %v: not ErrInvalidConfig or field not named", err)
			}
		})
	}
}

func TestConfigYAML(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	src := `
resolvers: ["1.1.1.1", "9.9.9.9:53"]
allowed_ports: [443, 8443]
idle_timeout: 90s
dial_timeout: 2s
max_tunnels_per_session: 16
audit_retention: 2160h
extra_allowed_cidrs: ["10.50.0.0/24"]
network:
  pool: 10.210.0.0/20
`
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.IdleTimeout != 90*time.Second || c.DialTimeout != 2*time.Second || c.Network.Prefix != "sbx" || len(c.AllowedPorts) != 2 ||
		c.AuditRetention != 90*24*time.Hour {
		t.Fatalf("decoded %+v", c)
	}
	if d := DefaultConfig().AuditRetention; d != 720*time.Hour {
		t.Fatalf("default audit_retention = %v, want 720h", d)
	}
}
