package egress

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

func TestSandboxProxyEnv(t *testing.T) {
	att := &Attachment{HostAddr: netip.MustParseAddr("10.200.0.1"), SandboxAddr: netip.MustParseAddr("10.200.0.2")}
	env := SandboxProxyEnv(att, 3128)
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

func TestSessionPolicy(t *testing.T) {
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
		{name: "denied wins", raw: `{"enabled":true,"allowed_domains":["*.example.com"],"denied":["evil.example.com"]}`, allows: "a.example.com", denies: "evil.example.com"},
		{name: "bad denied entry", raw: `{"enabled":true,"denied":["10.0.0.1/8"]}`, wantErr: true},
		{name: "not json", raw: `{`, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := sandbox.ParseNetworkRequest([]byte(tc.raw))
			pol := policy.Policy{}
			if err == nil {
				pol, err = policyFor(req)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.allows != "" {
				if !(policy.Vetter{}).Decide(policy.Args{Policy: pol, Host: tc.allows}).Allowed() {
					t.Errorf("%s denied", tc.allows)
				}
			}
			if tc.denies != "" {
				if (policy.Vetter{}).Decide(policy.Args{Policy: pol, Host: tc.denies}).Allowed() {
					t.Errorf("%s allowed", tc.denies)
				}
			}
		})
	}
}
