package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

func TestEgressAuditBoundsAndKeepsEnded(t *testing.T) {
	a := newEgressAudit(3)
	a.open("s1")
	for i := range 10 {
		a.record(egress.Decision{Session: "s1", Host: fmt.Sprintf("h%d", i), Outcome: egress.OutcomeAllow, Duration: 1500 * time.Millisecond})
	}
	a.record(egress.Decision{Session: "unknown", Host: "x"})
	got, _ := a.EgressDecisions(context.Background(), "s1")
	list := got.([]decisionJSON)
	if len(list) != 3 || list[0].Host != "h7" || list[2].Host != "h9" || list[2].DurationMS != 1500 {
		t.Fatalf("decisions = %+v", list)
	}
	if got, _ := a.EgressDecisions(context.Background(), "unknown"); len(got.([]decisionJSON)) != 0 {
		t.Fatalf("unknown session has decisions: %v", got)
	}
	b, _ := json.Marshal(must(a.EgressDecisions(context.Background(), "nothing")))
	if string(b) != "[]" {
		t.Fatalf("empty list encodes as %s", b)
	}

	// A tunnel closed by the session's removal reports after it ended.
	a.end("s1")
	a.record(egress.Decision{Session: "s1", Host: "late", Outcome: egress.OutcomeAllow})
	got, _ = a.EgressDecisions(context.Background(), "s1")
	if l := got.([]decisionJSON); l[len(l)-1].Host != "late" {
		t.Fatalf("late decision lost: %+v", l)
	}
	for i := range endedSessionsKept + 5 {
		id := fmt.Sprintf("e%d", i)
		a.open(id)
		a.end(id)
	}
	if _, ok := a.byID["s1"]; ok {
		t.Fatal("oldest ended session kept beyond the bound")
	}
	if len(a.byID) != endedSessionsKept {
		t.Fatalf("%d sessions kept, want %d", len(a.byID), endedSessionsKept)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
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
