package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// fakeForkLimit is how many sessions an owner may hold when forking in the
// fake (the plan's quota: 429 quota_exceeded past it).
const fakeForkLimit = 4

// networkOrFork is the fake's PATCH .../network and POST .../fork (called
// with f.mu held).
func (f *fakeAPI) networkOrFork(w http.ResponseWriter, r *http.Request, owner, id, sub string) {
	s := f.sessions[id]
	if sub == "fork" {
		n := 0
		for _, o := range f.sessions {
			if o.owner == owner {
				n++
			}
		}
		if n >= fakeForkLimit {
			apiFail(w, http.StatusTooManyRequests, "quota_exceeded")
			return
		}
		f.n++
		sid := fmt.Sprintf("sess_%03d", f.n)
		f.sessions[sid] = &fakeSession{owner: owner, state: "hibernated", files: maps.Clone(s.files), network: s.network}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(wire.Session{ID: sid, Language: "python3", State: "hibernated", IdleTTL: 300, ForkedFrom: id})
		return
	}
	if r.Method != http.MethodPatch {
		apiFail(w, http.StatusMethodNotAllowed, "method_not_allowed")
		return
	}
	var n wire.Network
	if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
		apiFail(w, http.StatusBadRequest, "invalid_json")
		return
	}
	for _, d := range append(append([]string{}, n.AllowedDomains...), n.Denied...) {
		if strings.Contains(d, "bad") {
			apiFail(w, http.StatusBadRequest, "invalid_allowed_domains")
			return
		}
	}
	if n.Enabled && !s.network.Enabled && s.state == "running" {
		apiFail(w, http.StatusConflict, "network_not_attached")
		return
	}
	s.network = n
	_ = json.NewEncoder(w).Encode(wire.Session{ID: id, State: s.state, Network: n})
}

func (f *fakeAPI) network(id string) wire.Network {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions[id].network
}

func boolp(b bool) *bool { return &b }

// TestOurNetwork: E2B's options become an allow-list or no network, and
// what would open more than an allow-list is refused, never widened.
func TestOurNetwork(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		internet *bool
		body     string
		want     wire.Network
		refused  bool
	}{
		{name: "nothing: no network", body: `{}`},
		{name: "internet off", internet: boolp(false), body: `{}`},
		{name: "internet on alone", internet: boolp(true), body: `{}`, refused: true},
		{name: "allowOut", body: `{"allowOut":["api.example.com","1.2.3.0/24"]}`,
			want: wire.Network{Enabled: true, AllowedDomains: []string{"api.example.com", "1.2.3.0/24"}, Denied: []string{}}},
		{name: "allowOut with ALL_TRAFFIC denied (E2B's allow-list idiom)", body: `{"allowOut":["a.example.com"],"denyOut":["0.0.0.0/0","::/0"]}`,
			want: wire.Network{Enabled: true, AllowedDomains: []string{"a.example.com"}, Denied: []string{}}},
		{name: "allowOut and denyOut", body: `{"allowOut":["*.example.com"],"denyOut":["203.0.113.7"]}`,
			want: wire.Network{Enabled: true, AllowedDomains: []string{"*.example.com"}, Denied: []string{"203.0.113.7"}}},
		{name: "allowOut with internet on is still an allow-list", internet: boolp(true), body: `{"allowOut":["a.example.com"]}`,
			want: wire.Network{Enabled: true, AllowedDomains: []string{"a.example.com"}, Denied: []string{}}},
		{name: "allowOut with internet off", internet: boolp(false), body: `{"allowOut":["a.example.com"]}`,
			want: wire.Network{Enabled: true, AllowedDomains: []string{"a.example.com"}, Denied: []string{}}},
		{name: "deny-list alone would open the rest", body: `{"denyOut":["10.0.0.0/8"]}`, refused: true},
		{name: "deny-list alone with internet on", internet: boolp(true), body: `{"denyOut":["10.0.0.0/8"]}`, refused: true},
		{name: "deny-list with internet off: nothing", internet: boolp(false), body: `{"denyOut":["10.0.0.0/8"]}`},
		{name: "ALL_TRAFFIC denied alone: nothing", body: `{"denyOut":["0.0.0.0/0"]}`},
		{name: "empty allowOut and internet on", internet: boolp(true), body: `{"allowOut":[]}`, refused: true},
		{name: "rules", body: `{"allowOut":["a.example.com"],"rules":{"a.example.com":[{"transform":{"headers":{"X":"y"}}}]}}`, refused: true},
		{name: "egress proxy", body: `{"allowOut":["a.example.com"],"egressProxy":{"address":"p:1080"}}`, refused: true},
		{name: "mask host", body: `{"maskRequestHost":"x"}`, refused: true},
		{name: "https ports", body: `{"httpsPorts":[443]}`, refused: true},
		{name: "public traffic flag is about ingress: accepted", body: `{"allowPublicTraffic":false}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var nb networkBody
			if err := json.Unmarshal([]byte(c.body), &nb); err != nil {
				t.Fatal(err)
			}
			got, err := ourNetwork(c.internet, nb)
			var ce *e2bError
			if c.refused {
				if err == nil || !errors.As(err, &ce) || ce.status != http.StatusBadRequest || !strings.Contains(ce.msg, "allowOut") && !strings.Contains(ce.msg, "not supported") {
					t.Fatalf("got %+v, %v; want a 400 saying what to send", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestCreateAndUpdateNetwork: create passes the allow-list to /v1, a
// refusal makes no session, and updates replace the block (an omitted
// list is cleared), with the API's refusals passed on.
func TestCreateAndUpdateNetwork(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	for _, body := range []map[string]any{
		{"allow_internet_access": true},
		{"network": map[string]any{"denyOut": []string{"10.0.0.0/8"}}},
		{"network": map[string]any{"allowOut": []string{"a.example.com"}, "allow_internet_access": true}},
		{"network": "yes"},
		{"network": map[string]any{"allowOut": []int{1}}},
		{"network": map[string]any{"allowOut": "a.example.com"}},
	} {
		wantE2BError(t, fmt.Sprint(body), g.json("POST", "/e2b/v2/sandboxes", "sk_a", body), http.StatusBadRequest)
	}
	if n := len(g.api.sessions); n != 0 {
		t.Fatalf("%d sessions made by refused creates", n)
	}
	a := g.create("sk_a", map[string]any{"network": map[string]any{"allowOut": []string{"a.example.com"}, "denyOut": []string{"0.0.0.0/0"}}})
	if n := g.api.network(a.SandboxID); !n.Enabled || !reflect.DeepEqual(n.AllowedDomains, []string{"a.example.com"}) || len(n.Denied) != 0 {
		t.Fatalf("session's network %+v", n)
	}
	off := g.create("sk_a", map[string]any{"allow_internet_access": false})
	if n := g.api.network(off.SandboxID); n.Enabled {
		t.Fatalf("internet off made network %+v", n)
	}
	for id, want := range map[string]string{
		a.SandboxID:   `"network":{"allowOut":["a.example.com"],"denyOut":["0.0.0.0/0"]}`,
		off.SandboxID: "",
	} {
		r := g.json("GET", "/e2b/sandboxes/"+id, "sk_a", nil)
		if r.status != http.StatusOK || want != "" && !strings.Contains(string(r.body), want) || want == "" && strings.Contains(string(r.body), `"network"`) {
			t.Fatalf("info of %s: %d %s, want %s", id, r.status, r.body, want)
		}
	}

	path := "/e2b/sandboxes/" + a.SandboxID + "/network"
	if r := g.json("PUT", path, "sk_a", map[string]any{"allowOut": []string{"a.example.com", "b.example.com"}, "denyOut": []string{"203.0.113.7"}}); r.status != http.StatusNoContent {
		t.Fatalf("widen: %d %s", r.status, r.body)
	}
	if n := g.api.network(a.SandboxID); !reflect.DeepEqual(n.AllowedDomains, []string{"a.example.com", "b.example.com"}) || !reflect.DeepEqual(n.Denied, []string{"203.0.113.7"}) {
		t.Fatalf("after widening: %+v", n)
	}
	if r := g.json("PUT", path, "sk_a", map[string]any{"allowOut": []string{"b.example.com"}}); r.status != http.StatusNoContent {
		t.Fatalf("narrow: %d %s", r.status, r.body)
	}
	if n := g.api.network(a.SandboxID); !reflect.DeepEqual(n.AllowedDomains, []string{"b.example.com"}) || len(n.Denied) != 0 {
		t.Fatalf("after narrowing (denyOut omitted: cleared): %+v", n)
	}
	wantE2BError(t, "update to internet", g.json("PUT", path, "sk_a", map[string]any{"allow_internet_access": true}), http.StatusBadRequest)
	wantE2BError(t, "update not JSON", g.do("PUT", path, strings.NewReader("{nope"), map[string]string{"X-API-Key": "sk_a"}), http.StatusBadRequest)
	wantE2BError(t, "update with rules", g.json("PUT", path, "sk_a", map[string]any{"allowOut": []string{"b.example.com"}, "rules": map[string]any{"b.example.com": []any{}}}), http.StatusBadRequest)
	wantE2BError(t, "update without a key", g.json("PUT", path, "", map[string]any{}), http.StatusUnauthorized)
	wantE2BError(t, "bad entry (the API's 400)", g.json("PUT", path, "sk_a", map[string]any{"allowOut": []string{"bad..example"}}), http.StatusBadRequest)
	wantE2BError(t, "another key", g.json("PUT", path, "sk_b", map[string]any{"allowOut": []string{"b.example.com"}}), http.StatusNotFound)
	wantE2BError(t, "unknown sandbox", g.json("PUT", "/e2b/sandboxes/sess_999/network", "sk_a", map[string]any{}), http.StatusNotFound)
	if n := g.api.network(a.SandboxID); !reflect.DeepEqual(n.AllowedDomains, []string{"b.example.com"}) {
		t.Fatalf("a refused update changed the network: %+v", n)
	}
	if r := g.json("PUT", path, "sk_a", map[string]any{"allow_internet_access": false}); r.status != http.StatusNoContent {
		t.Fatalf("off: %d %s", r.status, r.body)
	}
	if n := g.api.network(a.SandboxID); n.Enabled {
		t.Fatalf("internet off left network %+v", n)
	}

	// A running sandbox made without network: the API's 409 says what to do.
	r := g.json("PUT", "/e2b/sandboxes/"+off.SandboxID+"/network", "sk_a", map[string]any{"allowOut": []string{"a.example.com"}})
	wantE2BError(t, "not attached", r, http.StatusConflict)
	if !strings.Contains(string(r.body), "pause") {
		t.Fatalf("409 does not say what to do: %s", r.body)
	}
	if r := g.json("POST", "/e2b/sandboxes/"+off.SandboxID+"/pause", "sk_a", nil); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	if r := g.json("PUT", "/e2b/sandboxes/"+off.SandboxID+"/network", "sk_a", map[string]any{"allowOut": []string{"a.example.com"}}); r.status != http.StatusNoContent {
		t.Fatalf("update while paused: %d %s", r.status, r.body)
	}
}

// TestE2BNetwork: a session's network in E2B's words (getInfo).
func TestE2BNetwork(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		in   wire.Network
		want *infoNetwork
	}{
		{"off", wire.Network{}, nil},
		{"allow-list", wire.Network{Enabled: true, AllowedDomains: []string{"a.example.com"}, Denied: []string{"203.0.113.7"}},
			&infoNetwork{AllowOut: []string{"a.example.com"}, DenyOut: []string{"203.0.113.7", "0.0.0.0/0"}}},
		{"every public host (a /v1 PATCH)", wire.Network{Enabled: true, Denied: []string{"203.0.113.7"}},
			&infoNetwork{AllowOut: []string{}, DenyOut: []string{"203.0.113.7"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := e2bNetwork(c.in); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
