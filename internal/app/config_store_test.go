package app

import (
	"strings"
	"testing"
)

// TestStoreURL: store.url is empty (SQLite) or a PostgreSQL URL; anything
// else is refused at load, without echoing the URL (it may hold a password).
func TestStoreURL(t *testing.T) {
	cases := []struct {
		url string
		ok  bool
	}{
		{"", true},
		{"postgres://u:p@db:5432/sandboxapi?sslmode=require", true},
		{"postgresql://db/sandboxapi", true},
		{"mysql://u:secretpw@db/x", false},
		{"sqlite:///var/lib/x.db", false},
		{"host=db user=u password=secretpw", false},
		{"POSTGRES://db/x", false},
	}
	for _, c := range cases {
		cfg, err := LoadConfig("")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store.URL = c.url
		err = cfg.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%q: err = %v, want ok %v", c.url, err, c.ok)
		}
		if err != nil && strings.Contains(err.Error(), "secretpw") {
			t.Errorf("%q: error echoes the password: %v", c.url, err)
		}
	}
}
