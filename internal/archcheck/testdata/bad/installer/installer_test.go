package installer

import (
	"testing"

	"example.com/bad/executor"
	"example.com/bad/internal/testenv"
)

func TestInstall(t *testing.T) {
	testenv.Env()
	executor.Run()
}
