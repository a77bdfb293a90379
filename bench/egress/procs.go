package main

import (
	"runtime"
	"syscall"
	"time"
)

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
