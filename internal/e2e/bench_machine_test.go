package e2e

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// benchMachine prints the CPU model, the CPU count and the load average,
// and returns a function that prints the load again: a benchmark calls it
// at its start and defers the result, so every figure it prints comes
// with the machine and the load it was measured under.
func benchMachine(name string) (end func()) {
	fmt.Printf("%s: cpu %s, %d cpus; load at start %s\n", name, cpuModel(), runtime.NumCPU(), loadAvg())
	return func() { fmt.Printf("%s: load at end %s\n", name, loadAvg()) }
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// loadAvg is the 1, 5 and 15 minute load average of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
