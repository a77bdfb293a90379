package egress

import (
	"testing"

	"github.com/sandboxapi/sandboxapi/egress/policy"
)

func TestReasonClassIsBounded(t *testing.T) {
	cases := []struct {
		d    Decision
		want string
	}{
		{Decision{Outcome: OutcomeAllow, Reason: policy.ReasonAllowedPattern + "*.example.com"}, "allowed"},
		{Decision{Outcome: OutcomeDeny, Reason: policy.ReasonNotAllowed}, "not_allowed"},
		{Decision{Outcome: OutcomeDeny, Reason: policy.ReasonNetworkDisabled}, "network_disabled"},
		{Decision{Outcome: OutcomeDeny, Reason: "resolved to forbidden address (loopback)"}, "forbidden_address"},
		{Decision{Outcome: OutcomeDeny, Reason: "resolving: evil.test: no such host"}, "unresolvable"},
		{Decision{Outcome: OutcomeError, Reason: "resolver failure: i/o timeout"}, "resolver_failure"},
		{Decision{Outcome: OutcomeDeny, Reason: ReasonSNIMismatch}, "sni_mismatch"},
		{Decision{Outcome: OutcomeDeny, Reason: ReasonSNIMismatch + ` ("other.evil.test")`}, "sni_mismatch"},
		{Decision{Outcome: OutcomeDeny, Reason: ReasonNotTLS + ": reading ClientHello: i/o timeout"}, "not_tls"},
		{Decision{Outcome: OutcomeDeny, Reason: ReasonPendingLimit}, "pending_limit"},
		{Decision{Outcome: OutcomeDeny, Reason: ErrUnknownSession.Error()}, "unknown_session"},
		{Decision{Outcome: OutcomeDeny, Reason: ErrStopped.Error()}, "stopped"},
		{Decision{Outcome: OutcomeDeny, Reason: "host names a session"}, "bad_target"},
		{Decision{Outcome: OutcomeDeny, Reason: ReasonNoSNI}, "no_sni"},
		{Decision{Outcome: OutcomeDeny, Reason: ReasonNotTLS}, "not_tls"},
		{Decision{Outcome: OutcomeDeny, Reason: ReasonTunnelLimit}, "tunnel_limit"},
		{Decision{Outcome: OutcomeDeny, Mode: ModePlainHTTP, Reason: "plain HTTP is not allowed"}, "plain_http"},
		{Decision{Outcome: OutcomeDeny, Reason: ErrWrongSourceAddr.Error()}, "unknown_session"},
		{Decision{Outcome: OutcomeError, Reason: "dialing 192.0.2.1:443: refused"}, "dial_failed"},
		{Decision{Outcome: OutcomeDeny, Reason: `host "a b": control or space byte`}, "bad_target"},
		{Decision{Outcome: OutcomeError, Reason: "writing CONNECT reply: broken pipe"}, "error"},
	}
	for _, c := range cases {
		if got := ReasonClass(c.d); got != c.want {
			t.Errorf("ReasonClass(%q) = %q, want %q", c.d.Reason, got, c.want)
		}
	}
}
