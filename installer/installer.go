// Package installer is the install job: it checks a request against the
// mirror (every package explicit, pinned or resolved to the newest admitted
// version), then runs pip or a validated npm extraction in a separate,
// short-lived sandbox that has the session's home mounted and whose network
// reaches only the mirror. It fails closed and installs all or nothing.
package installer

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/clip"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

//go:embed install.py
var installScript []byte

// Manager is a package manager.
type Manager string

const (
	Pip Manager = "pip"
	NPM Manager = "npm"
)

// Artifact is what the catalog knows of one file.
type Artifact struct {
	Name      string
	Version   string
	Filename  string
	SHA256    string
	Integrity string // npm: "sha512-<base64>"
	Size      int64
	URLPath   string // where the mirror handler serves it
	Status    string // admitted, refused, quarantined, removed
	Reasons   []string
	// Stripped is what the mirror took out of the published package.
	Stripped []string
	// Dependencies (npm) are what the package needs installed next to it:
	// name -> npm range.
	Dependencies map[string]string
	// Requires (pip) are the wheel's Requires-Dist values as published
	// (PEP 508, markers included).
	Requires []string
}

// Catalog errors; Lookup wraps them.
var (
	ErrNotFound    = errors.New("not in the mirror")
	ErrNotAdmitted = errors.New("not admitted by the mirror")
	// ErrRange means a dependency range the catalog cannot check (a URL,
	// an alias, a tag).
	ErrRange = errors.New("dependency range cannot be checked")
)

// Catalog is the mirror as the installer sees it.
type Catalog interface {
	// Lookup finds name at version ("" for the newest admitted). A known but
	// not admitted artifact comes back with an error wrapping ErrNotAdmitted.
	Lookup(ctx context.Context, m Manager, name, version string) (Artifact, error)
	// Satisfying returns the versions of the npm package name that satisfy
	// rng: those the mirror serves and every version it ever recorded
	// (what a session can hold), oldest first. An uncheckable range wraps
	// ErrRange.
	Satisfying(ctx context.Context, name, rng string) (admitted, known []string, err error)
	// Versions returns every version of name: those the mirror serves and
	// every version it ever recorded, oldest first.
	Versions(ctx context.Context, m Manager, name string) (admitted, known []string, err error)
}

// Endpoint is an installer network: a namespace whose only reachable
// address is HostAddr on Config.Port.
type Endpoint struct {
	NetnsPath string
	HostAddr  netip.Addr
}

// Network makes and removes installer networks.
type Network interface {
	Setup(ctx context.Context, id string) (Endpoint, error)
	Teardown(ctx context.Context, id string) error
}

// Runner runs a job in its own sandbox (the executor).
type Runner interface {
	RunJob(ctx context.Context, job sandbox.Job) (sandbox.Result, error)
}

// Config holds the installer's settings. It is data only.
type Config struct {
	// Port is where the mirror is served on the installer network's host
	// address; the firewall lets the installer reach only that port.
	Port uint16 `yaml:"port"`
	// Timeout bounds one install.
	Timeout Duration `yaml:"timeout"`
	// MaxPackages bounds one request: packages listed, or a lockfile's
	// entries (at most the API's cap, 256).
	MaxPackages int `yaml:"max_packages"`
	// MaxUnpackedBytes and MaxEntries bound one npm package once unpacked.
	MaxUnpackedBytes int64 `yaml:"max_unpacked_bytes"`
	MaxEntries       int   `yaml:"max_entries"`
	// Network is the installer networks' own address pool, nftables table
	// and name prefix (kept apart from session networks).
	Pool   string `yaml:"pool"`
	Table  string `yaml:"table"`
	Prefix string `yaml:"prefix"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Port: 3141, Timeout: Duration(2 * time.Minute), MaxPackages: sandbox.MaxPackages,
		MaxUnpackedBytes: 256 << 20, MaxEntries: 20000,
		Pool: "10.201.0.0/16", Table: "sandboxapi_install", Prefix: "sbi",
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Port == 0 {
		errs = append(errs, errors.New("installer.port: must be set"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("installer.timeout: must be positive"))
	}
	if c.MaxPackages < 1 || c.MaxPackages > sandbox.MaxPackages {
		errs = append(errs, fmt.Errorf("installer.max_packages: must be 1 to %d", sandbox.MaxPackages))
	}
	if c.MaxUnpackedBytes <= 0 || c.MaxEntries <= 0 {
		errs = append(errs, errors.New("installer: max_unpacked_bytes and max_entries must be positive"))
	}
	if p, err := netip.ParsePrefix(c.Pool); err != nil || !p.Addr().Is4() || p.Bits() > 29 {
		errs = append(errs, fmt.Errorf("installer.pool: %q is not an IPv4 prefix of /29 or larger", c.Pool))
	}
	if c.Table == "" || c.Prefix == "" {
		errs = append(errs, errors.New("installer: table and prefix must be set"))
	}
	return errors.Join(errs...)
}

// Installer runs install jobs. Build it with New; it is safe for
// concurrent use. Start keeps an installer network ready ahead of each
// install and Stop removes it; without Start each install makes its own
// network in line.
type Installer struct {
	cfg     Config
	warm    warm
	catalog Catalog
	runner  Runner
	net     Network
	mirror  http.Handler
	log     *slog.Logger

	// dieBeforeCommit makes the installer kill itself after staging (tests).
	dieBeforeCommit bool
}

// New returns an Installer; mirror is the mirror's read-only handler
// (mounted at /mirror/).
func New(cfg Config, catalog Catalog, runner Runner, network Network, mirror http.Handler, log *slog.Logger) *Installer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Installer{cfg: cfg, catalog: catalog, runner: runner, net: network, mirror: mirror, log: log}
}

// planned is one resolved package; path (npm) is where it goes
// ("node_modules/a/node_modules/b").
type planned struct {
	requested string
	resolved  bool
	path      string
	a         Artifact
}

// plan checks every requested package against the catalog and, for npm,
// lays out the tree (or takes the lockfile's) and checks every
// dependency. Any problem rejects the whole request with a reason per
// package.
func (i *Installer) plan(ctx context.Context, req sandbox.InstallRequest) ([]planned, []requirement, error) {
	m := Manager(req.Manager)
	if m != Pip && m != NPM {
		return nil, nil, fmt.Errorf("%w: manager must be pip or npm", sandbox.ErrInvalid)
	}
	if req.Lockfile != nil {
		if m != NPM || len(req.Packages) > 0 {
			return nil, nil, fmt.Errorf("%w: a lockfile goes with manager npm and no packages", sandbox.ErrInvalid)
		}
		return i.planLockfile(ctx, req.Lockfile)
	}
	if len(req.Packages) == 0 {
		return nil, nil, fmt.Errorf("%w: list at least one package", sandbox.ErrInvalid)
	}
	if len(req.Packages) > i.cfg.MaxPackages {
		return nil, nil, fmt.Errorf("%w: at most %d packages per install", sandbox.ErrInvalid, i.cfg.MaxPackages)
	}
	var rej []sandbox.PackageRejection
	var out []planned
	seen := map[string]bool{}
	for _, spec := range req.Packages {
		name, version, err := ParseSpec(m, spec)
		if err != nil {
			rej = append(rej, sandbox.PackageRejection{Package: spec, Status: "invalid", Reason: err.Error()})
			continue
		}
		a, bad, err := i.lookup(ctx, m, spec, name, version)
		if err != nil {
			return nil, nil, err
		}
		if bad != nil {
			rej = append(rej, *bad)
			continue
		}
		// npm trees may hold two versions of one package; pip may not.
		key := normName(m, name)
		if m == NPM {
			key += "@" + a.Version
		}
		if seen[key] {
			rej = append(rej, sandbox.PackageRejection{Package: spec, Status: "invalid", Reason: "listed more than once"})
			continue
		}
		seen[key] = true
		out = append(out, planned{requested: spec, resolved: version == "", a: a})
	}
	if len(rej) > 0 {
		return nil, nil, &sandbox.RejectedError{Packages: rej}
	}
	if m == Pip {
		return i.checkPipRequirements(ctx, out)
	}
	rs := &ranges{cat: i.catalog}
	t, out, err := layoutTree(ctx, rs, out, i.cfg.MaxPackages)
	if err != nil {
		return nil, nil, err
	}
	reqs, err := checkTree(ctx, rs, t)
	if err != nil {
		return nil, nil, err
	}
	return out, reqs, nil
}

// planLockfile checks every package of a lockfile against the catalog
// (admitted, and the integrity the lockfile pins equal to the mirror's)
// and every dependency against the tree it lays out.
func (i *Installer) planLockfile(ctx context.Context, data []byte) ([]planned, []requirement, error) {
	entries, err := parseLockfile(data, i.cfg.MaxPackages)
	if err != nil {
		return nil, nil, err
	}
	var rej []sandbox.PackageRejection
	var out []planned
	for _, e := range entries {
		a, bad, err := i.lookup(ctx, NPM, e.Path, e.Name, e.Version)
		switch {
		case err != nil:
			return nil, nil, err
		case bad != nil:
			rej = append(rej, *bad)
		case a.Integrity != e.Integrity:
			rej = append(rej, sandbox.PackageRejection{Package: e.Path, Status: "integrity_mismatch",
				Reason: fmt.Sprintf("the lockfile pins %s@%s to %.30s..., the mirror serves %.30s...", e.Name, e.Version, e.Integrity, a.Integrity)})
		default:
			out = append(out, planned{requested: e.Path, path: e.Path, a: a})
		}
	}
	if len(rej) > 0 {
		return nil, nil, &sandbox.RejectedError{Packages: rej}
	}
	t := tree{}
	for k := range out {
		t[out[k].path] = &treeNode{path: out[k].path, p: &out[k]}
	}
	reqs, err := checkTree(ctx, &ranges{cat: i.catalog}, t)
	if err != nil {
		return nil, nil, err
	}
	return out, reqs, nil
}

// lookup finds one package in the catalog; a package it cannot install
// comes back as a rejection (an error only when the catalog fails).
func (i *Installer) lookup(ctx context.Context, m Manager, spec, name, version string) (Artifact, *sandbox.PackageRejection, error) {
	a, err := i.catalog.Lookup(ctx, m, name, version)
	switch {
	case errors.Is(err, ErrNotFound):
		return a, &sandbox.PackageRejection{Package: spec, Status: "missing", Reason: "not in the mirror"}, nil
	case errors.Is(err, ErrNotAdmitted):
		reason := a.Status
		if len(a.Reasons) > 0 {
			reason += ": " + strings.Join(a.Reasons, "; ")
		}
		return a, &sandbox.PackageRejection{Package: spec, Status: a.Status, Reason: reason}, nil
	case err != nil:
		return a, nil, fmt.Errorf("looking up %s: %w", spec, err)
	}
	if m == Pip && (!strings.HasSuffix(a.Filename, ".whl") || !wheelFile.MatchString(a.Filename) || strings.Contains(a.Filename, "..")) {
		return a, &sandbox.PackageRejection{Package: spec, Status: "not_a_wheel", Reason: "only wheels are installed: " + a.Filename}, nil
	}
	if m == NPM && !strings.HasSuffix(a.Filename, ".tgz") {
		return a, &sandbox.PackageRejection{Package: spec, Status: "not_a_tarball", Reason: "not an npm tarball: " + a.Filename}, nil
	}
	if !validHex(a.SHA256, 64) || (m == NPM && !strings.HasPrefix(a.Integrity, "sha512-")) {
		return a, &sandbox.PackageRejection{Package: spec, Status: "invalid", Reason: "the mirror has no usable hash for it"}, nil
	}
	return a, nil, nil
}

// Install puts the requested packages into owner's session, all or nothing.
// timeout (0: the configured one) bounds the whole job.
func (i *Installer) Install(ctx context.Context, owner, sessionID string, req sandbox.InstallRequest, timeout time.Duration) (sandbox.InstallReply, error) {
	start := time.Now()
	plan, reqs, err := i.plan(ctx, req)
	if err != nil {
		return sandbox.InstallReply{}, err
	}
	if timeout <= 0 || timeout > i.cfg.Timeout.D() {
		timeout = i.cfg.Timeout.D()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
	defer cancel()

	netStart := time.Now()
	ep, stop, err := i.serveMirror(ctx)
	if err != nil {
		return sandbox.InstallReply{}, err
	}
	netTime := time.Since(netStart)
	stop = sync.OnceFunc(stop)
	defer stop()

	base := fmt.Sprintf("http://%s", netip.AddrPortFrom(ep.HostAddr, i.cfg.Port))
	type pkg struct {
		Name      string `json:"name"`
		Version   string `json:"version"`
		Filename  string `json:"filename"`
		SHA256    string `json:"sha256"`
		Integrity string `json:"integrity,omitempty"`
		URLPath   string `json:"url_path"`
		Size      int64  `json:"size"`
		// Path (npm) is where it goes under node_modules ("a/node_modules/b").
		Path string `json:"path,omitempty"`
	}
	job := struct {
		Manager  string           `json:"manager"`
		BaseURL  string           `json:"base_url"`
		Packages []pkg            `json:"packages"`
		Requires []requirement    `json:"requires,omitempty"`
		Limits   map[string]int64 `json:"limits"`
	}{Requires: reqs, Manager: req.Manager, BaseURL: base,
		Limits: map[string]int64{"max_entries": int64(i.cfg.MaxEntries), "max_bytes": i.cfg.MaxUnpackedBytes}}
	for _, p := range plan {
		job.Packages = append(job.Packages, pkg{Name: p.a.Name, Version: p.a.Version, Filename: p.a.Filename, SHA256: p.a.SHA256, Integrity: p.a.Integrity, URLPath: p.a.URLPath, Size: p.a.Size,
			Path: strings.TrimPrefix(p.path, "node_modules/")})
	}
	jb, _ := json.Marshal(job)
	// The installer's whole environment (install.py builds pip's own).
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "TMPDIR=/tmp"}
	if i.dieBeforeCommit {
		env = append(env, "SANDBOXAPI_INSTALL_DIE_BEFORE_COMMIT=1")
	}
	jobStart := time.Now()
	res, err := i.runner.RunJob(ctx, sandbox.Job{
		Owner: owner, SessionID: sessionID, NetnsPath: ep.NetnsPath,
		Files:   []sandbox.File{{Path: "install.py", Content: installScript}, {Path: "job.json", Content: jb}},
		Argv:    []string{"/usr/bin/python3", "-I", "-B", "{dir}/install.py", "{dir}/job.json"},
		Env:     env,
		Timeout: timeout,
	})
	jobTime := time.Since(jobStart)
	if err != nil {
		return sandbox.InstallReply{}, err
	}
	stopStart := time.Now()
	stop() // the job's sandbox is gone: close the listener now
	netTime += time.Since(stopStart)
	if res.ExitCode == missingExit && len(reqs) > 0 {
		return sandbox.InstallReply{}, missingFromJob(res.Stdout, reqs, i.log)
	}
	if res.Status != sandbox.StatusOK {
		i.log.Warn("install failed", "session", sessionID, "manager", req.Manager, "status", res.Status, "exit_code", res.ExitCode,
			"stdout", clip.Tail(res.Stdout, 2000), "stderr", clip.Tail(res.Stderr, 4000))
		return sandbox.InstallReply{}, fmt.Errorf("%w: installer %s (exit %d): %s", sandbox.ErrInstallFailed, res.Status, res.ExitCode, clip.LastLine(res.Stderr))
	}
	reply := sandbox.InstallReply{Manager: req.Manager, DurationMS: time.Since(start).Milliseconds(),
		Phases: phases(netTime, jobTime, res)}
	for _, p := range plan {
		reply.Installed = append(reply.Installed, sandbox.InstalledPackage{Requested: p.requested, Name: p.a.Name, Version: p.a.Version,
			Filename: p.a.Filename, SHA256: p.a.SHA256, Resolved: p.resolved, Path: p.path, Stripped: p.a.Stripped})
	}
	i.log.Info("install", "session", sessionID, "manager", req.Manager, "packages", len(plan), "ms", reply.DurationMS,
		"network_ms", reply.Phases.Network, "sandbox_ms", reply.Phases.Sandbox, "startup_ms", reply.Phases.Startup,
		"stage_ms", reply.Phases.Stage, "commit_ms", reply.Phases.Commit, "installer", clip.LastLine(res.Stdout))
	return reply, nil
}

// report is the installer program's last line of output.
type report struct {
	OK        bool     `json:"ok"`
	Entries   []string `json:"entries"`
	PrepareMS int64    `json:"prepare_ms"`
	FetchMS   int64    `json:"fetch_ms"`
	CommitMS  int64    `json:"commit_ms"`
}

// phases splits an install's time: net is the network's set-up and
// teardown, job the whole RunJob call, res what the program reported.
func phases(net, job time.Duration, res sandbox.Result) *sandbox.InstallPhases {
	var r report
	out := strings.TrimSpace(res.Stdout)
	_ = json.Unmarshal([]byte(out[strings.LastIndexByte(out, '\n')+1:]), &r)
	p := &sandbox.InstallPhases{Network: net.Milliseconds(), Stage: r.FetchMS, Commit: r.CommitMS}
	p.Sandbox = max(0, job.Milliseconds()-res.DurationMS)
	p.Startup = max(0, res.DurationMS-r.FetchMS-r.CommitMS)
	return p
}

// serveMirror takes a fresh installer network and serves the mirror on
// its host address until the returned stop is called; stop closes the
// listener at once and releases the network (see release).
func (i *Installer) serveMirror(ctx context.Context) (Endpoint, func(), error) {
	slot, err := i.network(ctx)
	if err != nil {
		return Endpoint{}, nil, fmt.Errorf("setting up installer network: %w", err)
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(slot.ep.HostAddr, i.cfg.Port).String())
	if err != nil {
		i.release(ctx, slot)
		return Endpoint{}, nil, fmt.Errorf("listening for the installer: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mirror/", i.mirror)
	hs := &http.Server{Handler: logRequests(i.log, slot.id, mux), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return slot.ep, func() {
		_ = hs.Close()
		i.release(ctx, slot)
	}, nil
}

func logRequests(log *slog.Logger, id string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.Debug("installer fetch", "id", id, "path", r.URL.Path, "remote", r.RemoteAddr)
		h.ServeHTTP(w, r)
	})
}

func validHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
