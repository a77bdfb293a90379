package executor

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxapi/sandboxapi/executor/host"
)

// DiskBudget counts the bytes of homes (sessions', hibernated or not, and
// warm sandboxes') and of live sessions' checkpoints against
// executor.max_disk. It has a lock of its own: a caller may hold the
// session table's lock while it counts, never the other way round. A zero
// DiskBudget counts without a cap and measures no home; it is safe for
// concurrent use. Get the executor's from Executor.Disk.
type DiskBudget struct {
	max int64 // 0: no cap
	// homes lists the homes Stats measures: every session's.
	homes func() []host.Home

	mu sync.Mutex
	n  int64 // bytes counted
}

// Disk returns the executor's disk budget.
func (e *Executor) Disk() *DiskBudget { return e.disk }

// reserve counts n bytes against the cap; past it, ErrNoStorage and
// nothing is counted.
func (d *DiskBudget) reserve(n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.max > 0 && d.n+n > d.max {
		return ErrNoStorage
	}
	d.n += n
	return nil
}

// release gives back n bytes counted before.
func (d *DiskBudget) release(n int64) {
	d.mu.Lock()
	d.n -= n
	d.mu.Unlock()
}

// add counts n bytes whatever the cap: what is on the disk already (a
// session served at a restart, or adopted from another node).
func (d *DiskBudget) add(n int64) {
	d.mu.Lock()
	d.n += n
	d.mu.Unlock()
}

// Stats reports the homes' disk: committed is the sum of their sizes
// (what max_disk caps), used the blocks their images take on the host.
func (d *DiskBudget) Stats() (committed, used int64) {
	d.mu.Lock()
	committed = d.n
	d.mu.Unlock()
	if d.homes == nil {
		return committed, 0
	}
	for _, h := range d.homes() {
		var st unix.Stat_t
		if unix.Stat(h.Image(), &st) == nil {
			used += st.Blocks * 512
		}
		used += diskUsage(checkpointDir(h)) // a live session's saved memory
	}
	return committed, used
}
