package executor

import (
	"os"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres() // the cluster tests' server, if they started one
	os.Exit(code)
}
