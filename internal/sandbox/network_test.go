package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestCredentialNeverPrinted: no encoding of a network request carries a
// credential's clear value: JSON (what is stored and replied), fmt in
// every verb, slog; Public drops the sealed value too.
func TestCredentialNeverPrinted(t *testing.T) {
	n := NetworkRequest{Enabled: true, Credentials: []Credential{{Host: "api.example.test", Header: "Authorization", Value: "Bearer clear-secret", Sealed: "v1.k.sealed-blob"}}}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "network", n, "cred", n.Credentials[0], "list", n.Credentials)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "network", n, "cred", n.Credentials[0])
	js, _ := json.Marshal(n)
	out := string(js) + string(n.JSON()) + fmt.Sprintf("%v %+v %#v %s", n, n, n, n.Credentials) + buf.String()
	if strings.Contains(out, "clear-secret") {
		t.Fatalf("value printed: %s", out)
	}
	if !strings.Contains(string(n.JSON()), "sealed-blob") {
		t.Fatalf("stored form lost the sealed value: %s", n.JSON())
	}
	pub, _ := json.Marshal(n.Public())
	if strings.Contains(string(pub), "sealed") || !strings.Contains(string(pub), `"header":"Authorization"`) {
		t.Fatalf("public form: %s", pub)
	}
	back, err := ParseNetworkRequest(n.JSON())
	if err != nil || back.Credentials[0].Sealed != "v1.k.sealed-blob" || back.Credentials[0].Value != "" {
		t.Fatalf("round trip: %+v %v", back, err)
	}
}
