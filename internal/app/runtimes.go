package app

import (
	"fmt"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/readiness"
)

// runtimesCheck is the readiness check of the languages the server runs:
// it passes, with a warning naming each version whose upstream end of
// life (from the runtimes file) is before now's day.
func runtimesCheck(list []sandbox.Runtime, now time.Time) (string, error) {
	var past []string
	n := 0
	for _, rt := range list {
		for _, v := range rt.Versions {
			n++
			eol, err := time.Parse(time.DateOnly, v.EOL)
			if err == nil && now.After(eol.Add(24*time.Hour)) {
				past = append(past, fmt.Sprintf("%s %s (end of life %s)", rt.Language, v.Version, v.EOL))
			}
		}
	}
	if len(past) > 0 {
		return "", &readiness.Warning{Msg: "past upstream end of life: " + strings.Join(past, ", ") +
			"; move to a supported release (runtimes file, rootfs build, rolling restart)"}
	}
	return fmt.Sprintf("%d versions of %d languages, none past end of life", n, len(list)), nil
}
