package store

import (
	"fmt"
	"strings"
)

// Settings is the store section of sandboxapi.yaml (store:). Data only;
// the zero value is the embedded SQLite file.
type Settings struct {
	// URL is empty for the embedded SQLite file (<data_dir>/sandboxapi.db),
	// or postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=... for a PostgreSQL
	// database that many nodes share (migrated on start, once however many
	// nodes start together). The environment variable SANDBOXAPI_STORE_URL
	// overrides it (keeps the password out of the file). A new connection
	// gives up after 5 s unless the URL sets connect_timeout (seconds):
	// while PostgreSQL cannot be reached, calls that need it answer 503
	// store_unavailable instead of waiting.
	URL string `yaml:"url"`
}

// Validate reports a URL that is neither empty nor PostgreSQL's, without
// echoing it (it may hold a password).
func (s Settings) Validate() error {
	u := s.URL
	if u == "" || strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		return nil
	}
	kind := "something that is not a URL"
	if scheme, _, ok := strings.Cut(u, "://"); ok && !strings.ContainsAny(scheme, " =@") {
		kind = fmt.Sprintf("a %q URL", scheme)
	}
	return fmt.Errorf("url: must be empty (SQLite) or postgres://..., got %s", kind)
}
