package executor

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/duration"
	"github.com/sandboxapi/sandboxapi/internal/size"
)

// Settings is the `executor:` section of sandboxapi.yaml: data only.
// internal/app's Config decodes it (defaults first) and calls Validate; Config
// resolves it, with the limits the executor shares with the API, into the
// executor's Config.
type Settings struct {
	Runsc          string            `yaml:"runsc"`
	Platform       string            `yaml:"platform"`
	Rootfs         string            `yaml:"rootfs"`
	RuntimesFile   string            `yaml:"runtimes_file"`
	MaxSandboxes   int               `yaml:"max_sandboxes"`
	HomeSize       string            `yaml:"home_size"`
	MemoryMB       int64             `yaml:"memory_mb"`
	Pids           int64             `yaml:"pids"`
	CPUs           float64           `yaml:"cpus"`
	TmpSizeMB      int64             `yaml:"tmp_size_mb"`
	CreateTimeout  duration.Duration `yaml:"create_timeout"`
	CompileTimeout duration.Duration `yaml:"compile_timeout"`
	GuestBinary    string            `yaml:"guest_binary"`
	WarmPool       int               `yaml:"warm_pool"`
	// HibernateAfter hibernates a session idle this long: its sandbox,
	// network and mount are released, its home and plan slot kept; the
	// next call resumes it. 0s never hibernates.
	HibernateAfter duration.Duration `yaml:"hibernate_after"`
	// MaxDisk caps the sum of all session homes' sizes (running,
	// hibernated, warm); creation and fork past it answer 507
	// insufficient_storage. Empty or 0: no cap.
	MaxDisk string `yaml:"max_disk"`
	// HomesDir holds the session home images, <homes_dir>/<id>/home.img;
	// mount points, bundles and the rest stay on the node under
	// <data_dir>/sessions. Empty: <data_dir>/sessions (images beside the
	// rest, as before). In a cluster, a folder every node shares, so that
	// a session of a node that died resumes on another. Absolute path.
	HomesDir string `yaml:"homes_dir"`
}

// Validate reports every problem at once, each naming its field
// ("runsc: required"); errors.Join of them.
func (s Settings) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if s.Runsc == "" {
		bad("runsc: required")
	}
	switch s.Platform {
	case "systrap", "ptrace", "kvm":
	default:
		bad("platform: must be systrap, ptrace or kvm, got %q", s.Platform)
	}
	if s.MaxSandboxes < 1 {
		bad("max_sandboxes: must be at least 1")
	}
	if n, err := size.Parse(s.HomeSize); err != nil {
		bad("home_size: %v", err)
	} else if n < 16<<20 {
		bad("home_size: must be at least 16M")
	}
	if s.MemoryMB < 64 {
		bad("memory_mb: must be at least 64")
	}
	if s.Pids < 16 {
		bad("pids: must be at least 16")
	}
	if s.CPUs <= 0 {
		bad("cpus: must be positive")
	}
	if s.HibernateAfter.D() < 0 {
		bad("hibernate_after: must not be negative (0s never hibernates)")
	} else if d := s.HibernateAfter.D(); d > 0 && d < time.Second {
		bad("hibernate_after: must be at least 1s (or 0s)")
	}
	if s.MaxDisk != "" && s.MaxDisk != "0" {
		if n, err := size.Parse(s.MaxDisk); err != nil {
			bad("max_disk: %v", err)
		} else if h, _ := size.Parse(s.HomeSize); n < h {
			bad("max_disk: must hold at least one home (%s)", s.HomeSize)
		}
	}
	if s.WarmPool < 0 || s.WarmPool > 64 {
		bad("warm_pool: must be between 0 and 64")
	}
	if s.CompileTimeout <= 0 {
		bad("compile_timeout: must be positive")
	}
	if s.TmpSizeMB < 1 {
		bad("tmp_size_mb: must be at least 1")
	}
	if s.HomesDir != "" && !filepath.IsAbs(s.HomesDir) {
		bad("homes_dir: must be an absolute path, got %q", s.HomesDir)
	}
	return errors.Join(errs...)
}

// SharedLimits are the settings the executor takes from outside its own
// section: the per-call and per-session limits it shares with the API and
// the server's reap interval.
type SharedLimits struct {
	DefaultTimeout, MaxTimeout   time.Duration
	DefaultIdleTTL, MaxIdleTTL   time.Duration
	MaxOutputBytes, MaxFileBytes int64
	ReapInterval                 time.Duration
}

// Config resolves valid settings into the executor's Config: dataDir is
// the server's data folder, rootfs and versions what FindRootfs found,
// guest the absolute path of the guest binary ("" for the default).
func (s Settings) Config(dataDir, rootfs, versions, guest string, l SharedLimits) (Config, error) {
	home, err := size.Parse(s.HomeSize)
	if err != nil {
		return Config{}, fmt.Errorf("home_size: %w", err)
	}
	var maxDisk int64
	if d := s.MaxDisk; d != "" && d != "0" {
		if maxDisk, err = size.Parse(d); err != nil {
			return Config{}, fmt.Errorf("max_disk: %w", err)
		}
	}
	return Config{
		Runsc: s.Runsc, Platform: s.Platform, Rootfs: rootfs, VersionsFile: versions,
		DataDir: dataDir, GuestBinary: guest, MaxSandboxes: s.MaxSandboxes, HomeBytes: home,
		MemoryBytes: s.MemoryMB << 20, Pids: s.Pids, CPUs: s.CPUs,
		TmpBytes: s.TmpSizeMB << 20, CreateTimeout: s.CreateTimeout.D(),
		DefaultTimeout: l.DefaultTimeout, MaxTimeout: l.MaxTimeout,
		CompileTimeout: s.CompileTimeout.D(), MaxOutputBytes: l.MaxOutputBytes, MaxFileBytes: l.MaxFileBytes,
		DefaultIdleTTL: l.DefaultIdleTTL, MaxIdleTTL: l.MaxIdleTTL,
		ReapInterval: l.ReapInterval, WarmPool: s.WarmPool,
		HibernateAfter: s.HibernateAfter.D(), MaxDisk: maxDisk, HomesDir: s.HomesDir,
	}, nil
}
