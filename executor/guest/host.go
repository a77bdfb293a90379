package guest

import "time"

// host is what the guest assumes about the sandbox it runs in: where it
// makes work folders, where the files API's walk starts, how long a run
// that names no deadline gets and how a run is killed. newHost returns a
// sandbox's values; tests on the host change the fields of their own copy.
// A host is read-only once in use and then safe for concurrent use.
type host struct {
	workRoot       string        // WorkRoot
	homeRoot       string        // Home
	defaultTimeout time.Duration // DefaultTimeoutMS
	// kill ends a run's process group, then every process of the user
	// (killRun); tests on the host must never signal -1.
	kill func(pid int)
	// anyPID lets a file stream switch its thread's credentials though
	// the guest is not pid 1 (tests on the host, as root).
	anyPID bool
}

func newHost() *host {
	return &host{workRoot: WorkRoot, homeRoot: Home, defaultTimeout: DefaultTimeoutMS * time.Millisecond, kill: killRun}
}
