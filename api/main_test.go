package api

import (
	"os"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres() // the one the cluster tests start, if any
	os.Exit(code)
}
