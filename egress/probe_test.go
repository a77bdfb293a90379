package egress

import (
	"strings"
	"testing"
)

func TestJudgeSessionProbe(t *testing.T) {
	must := []string{"10.0.0.1:3128", "10.0.0.1:443", "DNS 10.0.0.1:53"}
	forbidden := []string{"10.0.0.1:4000", "10.0.0.1:22", "192.0.2.2:3128", "DNS 192.0.2.2:53"}
	good := map[string]string{
		"10.0.0.1:3128": "open", "10.0.0.1:443": "open", "DNS 10.0.0.1:53": "answered rcode 3",
		"10.0.0.1:4000": "ConnectionRefusedError: refused", "10.0.0.1:22": "ConnectionRefusedError: refused",
		"192.0.2.2:3128": "TimeoutError: timed out", "DNS 192.0.2.2:53": "ConnectionRefusedError: refused",
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		m[k] = v
		return m
	}
	cases := []struct {
		name string
		got  map[string]string
		want string // "" = pass
	}{
		{"fenced", good, ""},
		{"proxy down", with("10.0.0.1:3128", "ConnectionRefusedError: refused"), "10.0.0.1:3128 not reachable"},
		{"dns silent", with("DNS 10.0.0.1:53", "TimeoutError: timed out"), "DNS 10.0.0.1:53 not reachable"},
		{"missing observation", with("10.0.0.1:443", ""), "10.0.0.1:443 not reachable"},
		{"decoy reached", with("10.0.0.1:4000", "open"), "10.0.0.1:4000 reachable"},
		{"ssh reached", with("10.0.0.1:22", "open"), "10.0.0.1:22 reachable"},
		{"other address answers dns", with("DNS 192.0.2.2:53", "answered rcode 0"), "DNS 192.0.2.2:53 reachable"},
		{"http answer counts", with("192.0.2.2:3128", "status 200"), "192.0.2.2:3128 reachable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			detail, err := judgeSessionProbe(c.got, must, forbidden)
			if c.want == "" {
				if err != nil || !strings.Contains(detail, "4 other addresses refused") {
					t.Fatalf("want pass: %q %v", detail, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want failure naming %q, got %q %v", c.want, detail, err)
			}
		})
	}
}
