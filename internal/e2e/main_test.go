package e2e

import (
	"os"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// TestMain stops the throwaway PostgreSQL that SANDBOXAPI_TEST_STORE=postgres
// starts for the servers' stores.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres()
	os.Exit(code)
}
