package main

import (
	"os"
	"strings"
)

// loadAvg is the 1, 5 and 15 minute load average of /proc/loadavg: the
// benchmark prints it at its start and end, beside its ratios.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
