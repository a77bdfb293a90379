package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/seal"
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
// invalid_credentials, and the reply never quotes the value.
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
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, sb := newFakeServerDeps(t, nil, func(d *Deps) { d.Credentials = testKeys(t) })
			rec := send(t, srv, "POST", "/v1/sessions", mustJSON(map[string]any{"language": "python3", "network": tc.network}), map[string]string{"X-API-Key": "key-ULTRA"})
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
			if n := len(sb.ListSessions(t.Context(), "id-ULTRA")); n != 0 {
				t.Fatalf("%d sessions made", n)
			}
		})
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
