package api

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/seal"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

func testKeys(t *testing.T) *seal.Keys {
	t.Helper()
	k, err := seal.NewKeys([]byte(strings.Repeat("k", seal.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func credNetwork(domains []string, creds ...map[string]string) map[string]any {
	return map[string]any{"enabled": true, "allowed_domains": domains, "credentials": creds}
}

func cred(host, header, value string) map[string]string {
	return map[string]string{"host": host, "header": header, "value": value}
}

// TestCredentialsHostile: credentials that would inject headers, steer
// the proxy or reach a host the session may not are refused with 400
// invalid_credentials, at create and through PATCH .../network alike;
// the reply never quotes the value, no session is made and a PATCHed
// session's network (and the executor) is left as it was.
func TestCredentialsHostile(t *testing.T) {
	t.Parallel()
	api := []string{"api.example.test"}
	many := make([]map[string]string, sandbox.MaxCredentials+1)
	for i := range many {
		many[i] = cred("api.example.test", "X-Key-"+strings.Repeat("a", i+1), "v")
	}
	cases := []struct {
		name    string
		network map[string]any
		code    string
	}{
		{"CR LF in value", credNetwork(api, cred("api.example.test", "Authorization", "Bearer x\r\nHost: evil.test")), "invalid_credentials"},
		{"LF in value", credNetwork(api, cred("api.example.test", "Authorization", "Bearer x\nX-Evil: 1")), "invalid_credentials"},
		{"NUL in value", credNetwork(api, cred("api.example.test", "Authorization", "Bearer \x00x")), "invalid_credentials"},
		{"DEL in value", credNetwork(api, cred("api.example.test", "Authorization", "Bearer \x7fx")), "invalid_credentials"},
		{"empty value", credNetwork(api, cred("api.example.test", "Authorization", "")), "invalid_credentials"},
		{"padded value", credNetwork(api, cred("api.example.test", "Authorization", " Bearer x")), "invalid_credentials"},
		{"CR LF in name", credNetwork(api, cred("api.example.test", "X-A\r\nHost", "v")), "invalid_credentials"},
		{"colon in name", credNetwork(api, cred("api.example.test", "X-A: b", "v")), "invalid_credentials"},
		{"space in name", credNetwork(api, cred("api.example.test", "X A", "v")), "invalid_credentials"},
		{"empty name", credNetwork(api, cred("api.example.test", "", "v")), "invalid_credentials"},
		{"non-ASCII name", credNetwork(api, cred("api.example.test", "X-Ä", "v")), "invalid_credentials"},
		{"Host", credNetwork(api, cred("api.example.test", "host", "evil.test")), "invalid_credentials"},
		{"Proxy-Authorization", credNetwork(api, cred("api.example.test", "Proxy-Authorization", "Basic x")), "invalid_credentials"},
		{"Proxy-anything", credNetwork(api, cred("api.example.test", "proxy-x", "v")), "invalid_credentials"},
		{"Connection", credNetwork(api, cred("api.example.test", "Connection", "close")), "invalid_credentials"},
		{"Keep-Alive", credNetwork(api, cred("api.example.test", "Keep-Alive", "1")), "invalid_credentials"},
		{"TE", credNetwork(api, cred("api.example.test", "TE", "trailers")), "invalid_credentials"},
		{"Trailer", credNetwork(api, cred("api.example.test", "Trailer", "x")), "invalid_credentials"},
		{"Transfer-Encoding", credNetwork(api, cred("api.example.test", "Transfer-Encoding", "chunked")), "invalid_credentials"},
		{"Upgrade", credNetwork(api, cred("api.example.test", "Upgrade", "websocket")), "invalid_credentials"},
		{"Content-Length", credNetwork(api, cred("api.example.test", "Content-Length", "0")), "invalid_credentials"},
		{"Cookie", credNetwork(api, cred("api.example.test", "Cookie", "a=b")), "invalid_credentials"},
		{"huge value", credNetwork(api, cred("api.example.test", "Authorization", strings.Repeat("v", sandbox.MaxCredentialValueBytes+1))), "invalid_credentials"},
		{"far too huge value", credNetwork(api, cred("api.example.test", "Authorization", strings.Repeat("v", 600000))), "invalid_credentials"},
		{"huge name", credNetwork(api, cred("api.example.test", strings.Repeat("X", sandbox.MaxCredentialHeaderBytes+1), "v")), "invalid_credentials"},
		{"too many", credNetwork(api, many...), "invalid_credentials"},
		{"twice for one host and header", credNetwork(api, cred("api.example.test", "Authorization", "a"), cred("API.example.test.", "authorization", "b")), "invalid_credentials"},
		{"host not allowed", credNetwork(api, cred("other.example.test", "Authorization", "v")), "invalid_credentials"},
		{"wildcard host", credNetwork([]string{"*.example.test"}, cred("*.example.test", "Authorization", "v")), "invalid_credentials"},
		{"apex of a wildcard", credNetwork([]string{"*.example.test"}, cred("example.test", "Authorization", "v")), "invalid_credentials"},
		{"IP host", credNetwork(nil, cred("93.184.216.34", "Authorization", "v")), "invalid_credentials"},
		{"host with port", credNetwork(api, cred("api.example.test:443", "Authorization", "v")), "invalid_credentials"},
		{"host with path", credNetwork(api, cred("api.example.test/x", "Authorization", "v")), "invalid_credentials"},
		{"sealed from the client", credNetwork(api, map[string]string{"host": "api.example.test", "header": "Authorization", "sealed": "v1.x.y"}), "invalid_credentials"},
		{"network disabled", map[string]any{"enabled": false, "credentials": []map[string]string{cred("api.example.test", "Authorization", "v")}}, "invalid_credentials"},
	}
	for _, tc := range cases {
		for _, verb := range []string{"create", "PATCH"} {
			t.Run(verb+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				nw := &fakeNetworks{}
				srv, sb := newFakeServerDeps(t, nil, func(d *Deps) { d.Credentials = testKeys(t); d.Network = nw })
				nw.sb = sb
				var rec *httptest.ResponseRecorder
				var before sandbox.Session
				if verb == "create" {
					rec = send(t, srv, "POST", "/v1/sessions", mustJSON(map[string]any{"language": "python3", "network": tc.network}), map[string]string{"X-API-Key": "key-ULTRA"})
				} else {
					good := credNetwork(api, cred("api.example.test", "Authorization", "Bearer good"))
					rec = send(t, srv, "POST", "/v1/sessions", mustJSON(map[string]any{"language": "python3", "network": good}), map[string]string{"X-API-Key": "key-ULTRA"})
					var s struct{ ID string }
					if err := json.Unmarshal(rec.Body.Bytes(), &s); rec.Code != 201 || err != nil {
						t.Fatalf("create: %d %s", rec.Code, rec.Body)
					}
					before, _ = sb.GetSession(t.Context(), "id-ULTRA", s.ID)
					rec = send(t, srv, "PATCH", "/v1/sessions/"+s.ID+"/network", mustJSON(tc.network), map[string]string{"X-API-Key": "key-ULTRA"})
				}
				var doc struct {
					Error struct{ Code, Message string }
				}
				_ = json.Unmarshal(rec.Body.Bytes(), &doc)
				if rec.Code != 400 || doc.Error.Code != tc.code {
					t.Fatalf("%d %s, want 400 %s", rec.Code, rec.Body, tc.code)
				}
				for _, secret := range []string{"Bearer", "evil.test", "vvvvvvvvvv"} {
					if strings.Contains(doc.Error.Message, secret) && !strings.Contains(tc.name, "host") {
						t.Fatalf("message quotes the value: %s", doc.Error.Message)
					}
				}
				if rec.Body.Len() > 1024 {
					t.Fatalf("reply of %d bytes", rec.Body.Len())
				}
				if verb == "create" {
					if n := len(sb.ListSessions(t.Context(), "id-ULTRA")); n != 0 {
						t.Fatalf("%d sessions made", n)
					}
					return
				}
				if nw.callCount() != 0 {
					t.Fatalf("the executor was asked to change the network")
				}
				after, _ := sb.GetSession(t.Context(), "id-ULTRA", before.ID)
				if !reflect.DeepEqual(before.Network, after.Network) {
					t.Fatalf("network changed from %+v to %+v", before.Network, after.Network)
				}
			})
		}
	}
}

// TestCredentialsSealed: a good credential reaches the sandboxes sealed
// (the value opens with the server's key and nowhere in the clear), the
// reply shows host and header only, and plans and a server without a
// key refuse.
func TestCredentialsSealed(t *testing.T) {
	t.Parallel()
	keys := testKeys(t)
	srv, sb := newFakeServerDeps(t, nil, func(d *Deps) { d.Credentials = keys })
	const secret = "Bearer top-secret-1234"
	body := mustJSON(map[string]any{"language": "python3", "network": credNetwork([]string{"*.example.test"}, cred("API.example.test.", "authorization", secret))})
	rec := send(t, srv, "POST", "/v1/sessions", body, map[string]string{"X-API-Key": "key-ULTRA"})
	if rec.Code != 201 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "top-secret") || strings.Contains(rec.Body.String(), "sealed") || !strings.Contains(rec.Body.String(), `"credentials":[{"host":"api.example.test","header":"Authorization"}]`) {
		t.Fatalf("reply %s", rec.Body)
	}
	var got struct{ ID string }
	_ = json.Unmarshal(rec.Body.Bytes(), &got)
	s, err := sb.GetSession(t.Context(), "id-ULTRA", got.ID)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Network.Credentials
	if len(c) != 1 || c[0].Value != "" || c[0].Sealed == "" || strings.Contains(string(s.Network.JSON()), "top-secret") {
		t.Fatalf("stored %+v", c)
	}
	if v, err := keys.Open(c[0].Sealed, c[0].SealContext()); err != nil || v != secret {
		t.Fatalf("opened %q %v", v, err)
	}
	rec = send(t, srv, "GET", "/v1/sessions/"+got.ID, "", map[string]string{"X-API-Key": "key-ULTRA"})
	if strings.Contains(rec.Body.String(), "sealed") || strings.Contains(rec.Body.String(), "top-secret") {
		t.Fatalf("GET %s", rec.Body)
	}

	// A plan without credentials: 403 naming the plan that has them.
	rec = send(t, srv, "POST", "/v1/sessions", mustJSON(map[string]any{"language": "python3", "network": map[string]any{"enabled": true,
		"credentials": []map[string]string{cred("api.example.test", "Authorization", "x")}}}), map[string]string{"X-API-Key": "key-PRO"})
	if rec.Code != 403 || !strings.Contains(rec.Body.String(), "plan_forbidden") {
		t.Fatalf("PRO: %d %s", rec.Code, rec.Body)
	}
	// A server without a credentials key: 503.
	nokey, _ := newFakeServer(t)
	rec = send(t, nokey, "POST", "/v1/sessions", body, map[string]string{"X-API-Key": "key-ULTRA"})
	if rec.Code != 503 {
		t.Fatalf("no key: %d %s", rec.Code, rec.Body)
	}
}

// TestPatchCredentials: PATCH .../network gives, replaces and removes a
// session's credentials by the same rules as create: values reach the
// executor sealed (bound to host and header) and are never in the reply
// or the log line of the change; a plan without credentials is 403 and
// a server without a key 503, the executor untouched.
func TestPatchCredentials(t *testing.T) {
	t.Parallel()
	keys := testKeys(t)
	nw := &fakeNetworks{}
	logs := &testenv.LogBuffer{}
	srv, sb := newFakeServerDeps(t, nil, func(d *Deps) {
		d.Credentials = keys
		d.Network = nw
		d.Log = slog.New(slog.NewJSONHandler(logs, nil))
	})
	nw.sb = sb
	ultra := map[string]string{"X-API-Key": "key-ULTRA"}
	rec := send(t, srv, "POST", "/v1/sessions", mustJSON(map[string]any{"language": "python3", "network": credNetwork([]string{"*.example.test"})}), ultra)
	var s struct{ ID string }
	if err := json.Unmarshal(rec.Body.Bytes(), &s); rec.Code != 201 || err != nil {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	stored := func() []sandbox.Credential {
		t.Helper()
		got, err := sb.GetSession(t.Context(), "id-ULTRA", s.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Network.Credentials
	}

	// Added: sealed for its host and header.
	const secret = "Bearer patched-secret-5678"
	rec = send(t, srv, "PATCH", "/v1/sessions/"+s.ID+"/network", mustJSON(credNetwork([]string{"*.example.test"},
		cred("API.example.test", "x-api-key", secret), cred("b.example.test", "Authorization", "Basic other-secret"))), ultra)
	if rec.Code != 200 || strings.Contains(rec.Body.String(), "secret") || strings.Contains(rec.Body.String(), "sealed") ||
		!strings.Contains(rec.Body.String(), `"credentials":[{"host":"api.example.test","header":"X-Api-Key"},{"host":"b.example.test","header":"Authorization"}]`) {
		t.Fatalf("PATCH add: %d %s", rec.Code, rec.Body)
	}
	c := stored()
	if len(c) != 2 || c[0].Value != "" || c[0].Sealed == "" {
		t.Fatalf("stored %+v", c)
	}
	if v, err := keys.Open(c[0].Sealed, c[0].SealContext()); err != nil || v != secret {
		t.Fatalf("opened %q %v", v, err)
	}
	// Bound to host and header: the first value does not open as the second.
	if _, err := keys.Open(c[0].Sealed, c[1].SealContext()); err == nil {
		t.Fatal("a sealed value opened for another host and header")
	}

	// Replaced by a list without them: gone.
	rec = send(t, srv, "PATCH", "/v1/sessions/"+s.ID+"/network", mustJSON(credNetwork([]string{"*.example.test"})), ultra)
	if rec.Code != 200 || strings.Contains(rec.Body.String(), "credentials") {
		t.Fatalf("PATCH remove: %d %s", rec.Code, rec.Body)
	}
	if c := stored(); len(c) != 0 {
		t.Fatalf("still stored after removal: %+v", c)
	}
	if calls := nw.callCount(); calls != 2 {
		t.Fatalf("%d executor calls, want 2", calls)
	}
	if l := logs.String(); strings.Contains(l, "secret") || !strings.Contains(l, `"credentials_before":2`) {
		t.Fatalf("log: %s", l)
	}

	// A plan without credentials: 403 plan_forbidden, nothing changed.
	rec = send(t, srv, "POST", "/v1/sessions", `{"language":"python3","network":{"enabled":true}}`, map[string]string{"X-API-Key": "key-PRO"})
	var pro struct{ ID string }
	if err := json.Unmarshal(rec.Body.Bytes(), &pro); rec.Code != 201 || err != nil {
		t.Fatalf("PRO create: %d %s", rec.Code, rec.Body)
	}
	rec = send(t, srv, "PATCH", "/v1/sessions/"+pro.ID+"/network", mustJSON(map[string]any{"enabled": true,
		"credentials": []map[string]string{cred("api.example.test", "Authorization", "x")}}), map[string]string{"X-API-Key": "key-PRO"})
	if rec.Code != 403 || !strings.Contains(rec.Body.String(), "plan_forbidden") {
		t.Fatalf("PRO PATCH: %d %s", rec.Code, rec.Body)
	}
	if calls := nw.callCount(); calls != 2 {
		t.Fatalf("the executor was called for a refused PATCH (%d calls)", calls)
	}

	// A server without a credentials key: 503, the executor untouched.
	nokeyNW := &fakeNetworks{}
	nokey, nokeySB := newFakeServerDeps(t, nil, func(d *Deps) { d.Network = nokeyNW })
	nokeyNW.sb = nokeySB
	rec = send(t, nokey, "POST", "/v1/sessions", mustJSON(map[string]any{"language": "python3", "network": credNetwork([]string{"*.example.test"})}), ultra)
	if err := json.Unmarshal(rec.Body.Bytes(), &s); rec.Code != 201 || err != nil {
		t.Fatalf("create without a key: %d %s", rec.Code, rec.Body)
	}
	rec = send(t, nokey, "PATCH", "/v1/sessions/"+s.ID+"/network", mustJSON(credNetwork([]string{"*.example.test"}, cred("api.example.test", "Authorization", "x"))), ultra)
	if rec.Code != 503 || nokeyNW.callCount() != 0 {
		t.Fatalf("PATCH without a key: %d %s (%d executor calls)", rec.Code, rec.Body, nokeyNW.callCount())
	}
}
