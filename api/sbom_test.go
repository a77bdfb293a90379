package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type fakeSBOMs struct{ asked *[]string }

func (f fakeSBOMs) SessionSBOM(ctx context.Context, owner, id string) ([]byte, string, error) {
	*f.asked = append(*f.asked, owner+"/"+id)
	return []byte(`{"bomFormat":"CycloneDX","specVersion":"1.6","version":1}`), "application/vnd.cyclonedx+json; version=1.6", nil
}

// TestSessionSBOMRoute: the owner gets the document with its CycloneDX
// media type; another key, an unknown session and no key never reach the
// builder.
func TestSessionSBOMRoute(t *testing.T) {
	var asked []string
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) { d.EgressLog, d.SBOMs = fakeEgressLog{}, fakeSBOMs{asked: &asked} })
	ts := httptest.NewServer(srv)
	defer ts.Close()
	send := func(method, path, key, body string) (*http.Response, string) {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := send("POST", "/v1/sessions", "key-PRO", `{"language":"bash"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	id := body[strings.Index(body, `"id":"`)+6:]
	id = id[:strings.IndexByte(id, '"')]
	tests := []struct {
		name, key, id string
		status        int
	}{
		{"owner", "key-PRO", id, http.StatusOK},
		{"other key", "key-ULTRA", id, http.StatusNotFound},
		{"unknown session", "key-PRO", "s-never", http.StatusNotFound},
		{"no key", "", id, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := send("GET", "/v1/sessions/"+tt.id+"/sbom", tt.key, "")
			if resp.StatusCode != tt.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tt.status)
			}
			if tt.status == http.StatusOK && (!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/vnd.cyclonedx+json") || !strings.Contains(body, `"specVersion":"1.6"`)) {
				t.Fatalf("content type %q body %s", resp.Header.Get("Content-Type"), body)
			}
		})
	}
	if len(asked) != 1 || asked[0] != "id-PRO/"+id {
		t.Fatalf("builder asked for %v", asked)
	}
}
