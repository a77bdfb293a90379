package app

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// hostLockDir holds one lock file per nftables table a serve process uses
// (under /run: gone at reboot, like the tables).
const hostLockDir = "/run/sandboxapi"

// instanceClaim is what one serve process holds so that a second one on
// the same host cannot take its data dir or nftables tables: open files
// with an exclusive flock, released by release (or when the process ends,
// however it ends).
type instanceClaim struct{ files []*os.File }

func (c *instanceClaim) release() {
	for _, f := range c.files {
		_ = f.Close()
	}
	c.files = nil
}

// claimInstance checks, before anything starts, what a second serve on
// this host would collide on: the data dir and the nftables tables (held
// by another running serve: their lock files are flocked), and the listen
// address (in use by any program). Every collision is reported at once,
// each naming the setting to change. On success the data dir and tables
// are held until release; the address is only probed (the server opens
// it last). lockDir holds the tables' lock files (hostLockDir; tests
// give their own).
func claimInstance(cfg *Config, lockDir string) (*instanceClaim, error) {
	c := &instanceClaim{}
	var errs []error
	if err := c.lock(filepath.Join(cfg.DataDir, "serve.lock")); err != nil {
		errs = append(errs, fmt.Errorf("data dir %s %w: give this one its own with --data-dir DIR (SANDBOXAPI_DATA_DIR, data_dir in the config)", cfg.DataDir, err))
	}
	tables := []struct{ table, setting string }{
		{cfg.Installer.Table, "installer.table (with installer.prefix and installer.pool)"},
	}
	if cfg.Egress.Enabled {
		tables = append(tables, struct{ table, setting string }{cfg.Egress.Network.Table, "egress.network.table (with egress.network.prefix and egress.network.pool)"})
	}
	// Without a lock dir (not root) there are no nftables tables either.
	if os.MkdirAll(lockDir, 0o700) == nil {
		for _, t := range tables {
			if err := c.lock(filepath.Join(lockDir, "nft-inet-"+t.table+".lock")); err != nil {
				errs = append(errs, fmt.Errorf("nftables table inet %s %w: give this one its own with %s in the config", t.table, err, t.setting))
			}
		}
	}
	if ln, err := net.Listen("tcp", cfg.Listen); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			errs = append(errs, fmt.Errorf("listen address %s is in use (another sandboxapi serve, or another program): start this one on another with --listen ADDR (SANDBOXAPI_LISTEN, listen in the config)", cfg.Listen))
		}
		// Anything else (a bad address, no permission) is the listener's
		// own error, reported when the server opens it.
	} else {
		_ = ln.Close()
	}
	if len(errs) > 0 {
		c.release()
		return nil, fmt.Errorf("another instance is in the way: %w", errors.Join(errs...))
	}
	return c, nil
}

// errHeld is what lock reports for a file another process holds; the
// message reads after the thing's name.
type errHeld struct{ pid string }

func (e *errHeld) Error() string {
	if e.pid == "" {
		return "is in use by another running sandboxapi serve"
	}
	return "is in use by another running sandboxapi serve (pid " + e.pid + ")"
}

// lock takes an exclusive flock on path (created if missing) and writes
// this process's pid in it; a file another process holds is an *errHeld
// naming its pid. Other failures (a read-only dir) are not collisions and
// are left to the part that uses the thing.
func (c *instanceClaim) lock(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b := make([]byte, 16)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil
		}
		pid := strings.TrimSpace(string(b[:n]))
		if _, perr := strconv.Atoi(pid); perr != nil {
			pid = ""
		}
		return &errHeld{pid: pid}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	c.files = append(c.files, f)
	return nil
}
