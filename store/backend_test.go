package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres()
	os.Exit(code)
}

// opener opens a handle on the test's database: each call a new one, on
// the same rows (another process, or another node). It is closed when the
// test ends.
type opener func(t *testing.T) *Store

// eachBackend runs f on SQLite and on PostgreSQL, each with a fresh
// database (PostgreSQL: skipped without a server unless
// SANDBOXAPI_REQUIRE_POSTGRES=1).
func eachBackend(t *testing.T, f func(t *testing.T, open opener)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sandboxapi.db")
		f(t, openerFor("", path))
	})
	t.Run("postgres", func(t *testing.T) {
		f(t, openerFor(testenv.PostgresURL(t), ""))
	})
}

func openerFor(url, path string) opener {
	return func(t *testing.T) *Store {
		t.Helper()
		st, err := OpenURL(context.Background(), url, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
}
