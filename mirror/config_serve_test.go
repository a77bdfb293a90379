package mirror

import (
	"strings"
	"testing"
)

func TestServeURLValidation(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"", true},
		{"http://127.0.0.1:8081", true},
		{"https://mirror.internal/", true},
		{"127.0.0.1:8081", false},
		{"ftp://mirror.internal", false},
		{"http://", false},
		{"http://mirror.internal/mirror/", false},
		{"http://mirror.internal/?x=1", false},
	} {
		c := DefaultConfig()
		c.ServeURL = tc.url
		err := c.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("serve_url %q: err %v, want ok=%v", tc.url, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "mirror.serve_url") {
			t.Errorf("serve_url %q: error does not name the key: %v", tc.url, err)
		}
	}
}
