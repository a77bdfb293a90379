package doctor

import "time"

// Config is what doctor checks, in the config file's words (the field
// comments name the setting). The caller fills it from the loaded config
// (internal/cli does): doctor depends on the things it checks, not on the
// config package and every service behind it. The zero value checks the
// defaults of nothing: an empty DataDir or Runsc fails its checks.
type Config struct {
	DataDir string // data_dir
	Listen  string // listen

	Runsc        string // executor.runsc
	Platform     string // executor.platform
	Rootfs       string // executor.rootfs; empty: the default build
	GuestBinary  string // executor.guest_binary; empty: next to the binary
	HomeSize     string // executor.home_size, as written ("256M")
	MaxSandboxes int    // executor.max_sandboxes
	MaxDisk      string // executor.max_disk, as written; "" or "0": none

	StoreURL      string // store.url; empty: SQLite under DataDir
	EgressEnabled bool   // egress.enabled: netns and nft are required

	TLS TLS // tls

	// Runtimes are the runtimes file's languages at each version: what
	// the rootfs must hold and when each one's upstream support ends.
	Runtimes []Runtime
}

// Runtime is one language at one version of the runtimes file.
type Runtime struct {
	Language string
	Version  string // as the runtimes file lists it ("22")
	// Path is the version's PATH; Programs the commands its steps start
	// (absolute, or looked up on Path), all inside the rootfs.
	Path     []string
	Programs []string
	EOL      time.Time // zero: none announced
}

// TLS is the tls section as doctor checks it.
type TLS struct {
	Mode     string // tls.mode: "", "off", "acme", "local" or "files"
	CertFile string // tls.cert_file (files)
	KeyFile  string // tls.key_file (files)
	// StorageDir is where certmagic keeps certificates (acme, local):
	// tls.storage_dir resolved against data_dir.
	StorageDir string
}
