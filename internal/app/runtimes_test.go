package app

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/readiness"
)

func TestRuntimesCheckWarnsPastEndOfLife(t *testing.T) {
	list := []sandbox.Runtime{
		{Language: "javascript", Versions: []sandbox.RuntimeVersion{{Version: "24.22.3", EOL: "2028-04-30"}, {Version: "22.23.5", EOL: "2027-04-30"}}},
		{Language: "bash", Versions: []sandbox.RuntimeVersion{{Version: "5.2.37"}}},
	}
	detail, err := runtimesCheck(list, time.Date(2027, 4, 30, 20, 0, 0, 0, time.UTC))
	if err != nil || !strings.Contains(detail, "3 versions of 2 languages") {
		t.Fatalf("on the last day: %q %v", detail, err)
	}
	_, err = runtimesCheck(list, time.Date(2027, 5, 2, 0, 0, 0, 0, time.UTC))
	var w *readiness.Warning
	if !errors.As(err, &w) || !strings.Contains(w.Msg, "javascript 22.23.5 (end of life 2027-04-30)") || strings.Contains(w.Msg, "24.22.3") {
		t.Fatalf("after it: %v", err)
	}
}
