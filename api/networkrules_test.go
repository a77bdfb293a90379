package api

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// TestNetworkAddressRulesAndDenied checks the network block's address
// entries and denied list at the API: accepted entries are stored once
// in canonical order and shown by create and GET; bad ones are 400s with
// the list's code naming the entry; denied needs network.enabled; the
// caps of allowed_domains apply to denied.
func TestNetworkAddressRulesAndDenied(t *testing.T) {
	t.Parallel()
	srv, sb := newFakeServer(t)
	create := func(key string, network map[string]any) (int, wire.Session, string) {
		t.Helper()
		rec := send(t, srv, "POST", "/v1/sessions", mustJSON(map[string]any{"language": "python3", "network": network}), map[string]string{"X-API-Key": key})
		var s wire.Session
		if rec.Code == 201 {
			if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
				t.Fatal(err)
			}
		}
		return rec.Code, s, rec.Body.String()
	}

	code, s, body := create("key-ULTRA", map[string]any{"enabled": true,
		"allowed_domains": []string{"203.0.113.7", "203.0.113.7/32", "::ffff:203.0.113.7", "198.51.100.0/24", "2001:DB8::/32", "*.example.com"},
		"denied":          []string{"evil.example.com", "198.51.100.9", "198.51.100.9/32", "*.bad.example.com"}})
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	wantAllowed := []string{"203.0.113.7", "198.51.100.0/24", "2001:DB8::/32", "*.example.com"}
	wantDenied := []string{"evil.example.com", "198.51.100.9", "*.bad.example.com"}
	if !slices.Equal(s.Network.AllowedDomains, wantAllowed) || !slices.Equal(s.Network.Denied, wantDenied) {
		t.Fatalf("reply network = %+v, want allowed %q denied %q", s.Network, wantAllowed, wantDenied)
	}
	stored, err := sb.GetSession(t.Context(), "id-ULTRA", s.ID)
	if err != nil || !slices.Equal(stored.Network.Denied, wantDenied) {
		t.Fatalf("executor got denied %q (%v), want %q", stored.Network.Denied, err, wantDenied)
	}
	rec := send(t, srv, "GET", "/v1/sessions/"+s.ID, "", map[string]string{"X-API-Key": "key-ULTRA"})
	var got struct {
		Network map[string]any `json:"network"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 || fmt.Sprint(got.Network["denied"]) != fmt.Sprint(wantDenied) {
		t.Fatalf("GET: %d %s", rec.Code, rec.Body)
	}

	// Deny entries only narrow: a plan with network but without
	// allowed_domains may send them.
	if code, s, body := create("key-PRO", map[string]any{"enabled": true, "denied": []string{"203.0.113.0/24"}}); code != 201 || !slices.Equal(s.Network.Denied, []string{"203.0.113.0/24"}) {
		t.Fatalf("denied on PRO: %d %s", code, body)
	}
	// An address entry is an allowed_domains entry: the plan must have them.
	if code, _, body := create("key-PRO", map[string]any{"enabled": true, "allowed_domains": []string{"203.0.113.7"}}); code != 403 {
		t.Fatalf("address entry on PRO: %d %s", code, body)
	}

	long := strings.Repeat("a", sandbox.MaxDomainEntryBytes) + ".com"
	many := make([]string, sandbox.MaxAllowedDomains+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.%d.%d.1", i/250, i%250)
	}
	bad := []struct {
		name    string
		network map[string]any
		code    string
		names   string // the message quotes it
	}{
		{name: "allowed host bits", network: map[string]any{"enabled": true, "allowed_domains": []string{"10.0.0.1/8"}}, code: "invalid_allowed_domains", names: `"10.0.0.1/8"`},
		{name: "allowed /33", network: map[string]any{"enabled": true, "allowed_domains": []string{"203.0.113.0/33"}}, code: "invalid_allowed_domains", names: `"203.0.113.0/33"`},
		{name: "allowed octal", network: map[string]any{"enabled": true, "allowed_domains": []string{"0177.0.0.1"}}, code: "invalid_allowed_domains", names: `"0177.0.0.1"`},
		{name: "allowed short", network: map[string]any{"enabled": true, "allowed_domains": []string{"127.1"}}, code: "invalid_allowed_domains", names: `"127.1"`},
		{name: "allowed hex", network: map[string]any{"enabled": true, "allowed_domains": []string{"0x7f000001"}}, code: "invalid_allowed_domains", names: `"0x7f000001"`},
		{name: "allowed with port", network: map[string]any{"enabled": true, "allowed_domains": []string{"203.0.113.7:443"}}, code: "invalid_allowed_domains", names: `"203.0.113.7:443"`},
		{name: "allowed bracketed", network: map[string]any{"enabled": true, "allowed_domains": []string{"[2001:db8::1]"}}, code: "invalid_allowed_domains", names: `"[2001:db8::1]"`},
		{name: "denied zone", network: map[string]any{"enabled": true, "denied": []string{"fe80::1%eth0"}}, code: "invalid_denied", names: `"fe80::1%eth0"`},
		{name: "denied mapped too short", network: map[string]any{"enabled": true, "denied": []string{"::ffff:0:0/95"}}, code: "invalid_denied", names: `"::ffff:0:0/95"`},
		{name: "denied star", network: map[string]any{"enabled": true, "denied": []string{"*"}}, code: "invalid_denied", names: `"*"`},
		{name: "denied public suffix", network: map[string]any{"enabled": true, "denied": []string{"*.com"}}, code: "invalid_denied", names: `"*.com"`},
		{name: "denied entry over its cap", network: map[string]any{"enabled": true, "denied": []string{long}}, code: "invalid_denied", names: "bytes"},
		{name: "denied over the cap", network: map[string]any{"enabled": true, "denied": many}, code: "invalid_denied", names: "at most"},
		{name: "denied without network", network: map[string]any{"enabled": false, "denied": []string{"evil.example.com"}}, code: "invalid_request", names: "denied needs network.enabled"},
		{name: "denied with network omitted", network: map[string]any{"denied": []string{"evil.example.com"}}, code: "invalid_request", names: "denied needs network.enabled"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := len(sb.ListSessions(t.Context(), "id-MEGA"))
			code, _, body := create("key-MEGA", tc.network)
			var doc struct {
				Error struct{ Code, Message string }
			}
			_ = json.Unmarshal([]byte(body), &doc)
			if code != 400 || doc.Error.Code != tc.code || !strings.Contains(doc.Error.Message, tc.names) {
				t.Fatalf("create: %d %s, want 400 %s naming %s", code, body, tc.code, tc.names)
			}
			if len(body) > 2048 {
				t.Fatalf("a %d-byte error reply", len(body))
			}
			if after := len(sb.ListSessions(t.Context(), "id-MEGA")); after != before {
				t.Fatalf("a refused create left a session: %d -> %d", before, after)
			}
		})
	}
}
