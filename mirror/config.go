package mirror

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/duration"
	"github.com/sandboxapi/sandboxapi/internal/redact"
)

// Duration is the shared YAML duration.
type Duration = duration.Duration

// Limits bound what an archive may hold; they are the zip-bomb and
// tar-bomb guards applied to every wheel and npm tarball.
type Limits struct {
	// MaxArtifactBytes is the largest archive accepted, compressed.
	MaxArtifactBytes int64 `yaml:"max_artifact_bytes"`
	// MaxEntries is the most entries (files and folders) in one archive.
	MaxEntries int `yaml:"max_entries"`
	// MaxUncompressedBytes bounds the sum of all entry sizes once unpacked
	// (and so also any single entry).
	MaxUncompressedBytes int64 `yaml:"max_uncompressed_bytes"`
	// MaxRatio bounds uncompressed/compressed size, for the archive as a
	// whole and for each entry above 1 MiB.
	MaxRatio float64 `yaml:"max_ratio"`
	// MaxDependencies is the most entries an npm package.json may list
	// under "dependencies"; a package with more is refused.
	MaxDependencies int `yaml:"max_dependencies"`
	// MaxRangeBytes is the longest npm dependency range admitted (at most
	// 256, the longest the installer's range check reads); a package with
	// a longer one is refused.
	MaxRangeBytes int `yaml:"max_range_bytes"`
}

// Config holds the mirror's settings. The zero value is not valid; start
// from DefaultConfig. Config is data only.
type Config struct {
	// PipIndexURL is the upstream PEP 503/691 simple index used by
	// "mirror add pip".
	PipIndexURL string `yaml:"pip_index_url"`
	// PipPlatforms are path.Match patterns for the platform tag of wheels
	// fetched from upstream ("any" for pure wheels).
	PipPlatforms []string `yaml:"pip_platforms"`
	// NPMRegistryURL is the upstream npm registry used by "mirror add npm".
	NPMRegistryURL string `yaml:"npm_registry_url"`
	// StoreDir holds the content-addressed blobs and the OSV snapshot. A
	// relative path is taken relative to the data dir by the caller.
	StoreDir string `yaml:"store_dir"`
	// Limits are the archive safety limits.
	Limits Limits `yaml:"limits"`
	// OSVMaxAge is how old the OSV database may be (by import time) before
	// OSVStatus reports it stale.
	OSVMaxAge Duration `yaml:"osv_max_age"`
	// OSVMaxRecordAge, when set, also makes readiness fail when the newest
	// record of the database was modified longer ago than this: a dump that
	// stopped being updated upstream, even if imported today. Zero: the
	// newest record's age is shown but does not gate (curated subsets of
	// OSV can be old and still complete for the packages they cover).
	OSVMaxRecordAge Duration `yaml:"osv_max_record_age"`
	// FetchTimeout bounds one upstream download.
	FetchTimeout Duration `yaml:"fetch_timeout"`
	// ServeURL is the base URL of a separate `sandboxapi mirror serve`
	// (same data dir) that serves the mirror's files; serve then forwards
	// /mirror/ and the installers' fetches to it and readiness probes it.
	// Empty: serve serves the mirror itself.
	ServeURL string `yaml:"serve_url"`
}

// DefaultConfig returns the defaults. StoreDir is "mirror", meant to be
// joined to the data dir.
func DefaultConfig() Config {
	return Config{
		PipIndexURL:    "https://pypi.org/simple/",
		PipPlatforms:   []string{"any", "manylinux*_x86_64", "linux_x86_64"},
		NPMRegistryURL: "https://registry.npmjs.org",
		StoreDir:       "mirror",
		Limits: Limits{
			MaxArtifactBytes:     200 << 20,
			MaxEntries:           20000,
			MaxUncompressedBytes: 1 << 30,
			MaxRatio:             100,
			MaxDependencies:      1000,
			MaxRangeBytes:        MaxNPMRangeBytes,
		},
		OSVMaxAge:    Duration(72 * time.Hour),
		FetchTimeout: Duration(5 * time.Minute),
	}
}

// Resolve returns c with a relative StoreDir joined to dataDir.
func (c Config) Resolve(dataDir string) Config {
	if !filepath.IsAbs(c.StoreDir) {
		c.StoreDir = filepath.Join(dataDir, c.StoreDir)
	}
	return c
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	for _, u := range []struct{ name, v string }{{"pip_index_url", c.PipIndexURL}, {"npm_registry_url", c.NPMRegistryURL}} {
		p, err := url.Parse(u.v)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("mirror.%s: %q is not an http(s) URL", u.name, redact.URL(u.v)))
		}
	}
	for _, p := range c.PipPlatforms {
		if _, err := path.Match(p, ""); err != nil {
			errs = append(errs, fmt.Errorf("mirror.pip_platforms: bad pattern %q: %w", p, err))
		}
	}
	if c.StoreDir == "" {
		errs = append(errs, errors.New("mirror.store_dir: must be set"))
	}
	if c.ServeURL != "" {
		p, err := url.Parse(c.ServeURL)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || (p.Path != "" && p.Path != "/") || p.RawQuery != "" {
			errs = append(errs, fmt.Errorf("mirror.serve_url: %q is not an http(s) base URL (scheme and host only)", redact.URL(c.ServeURL)))
		}
	}
	l := c.Limits
	if l.MaxArtifactBytes <= 0 {
		errs = append(errs, errors.New("mirror.limits.max_artifact_bytes: must be positive"))
	}
	if l.MaxEntries <= 0 {
		errs = append(errs, errors.New("mirror.limits.max_entries: must be positive"))
	}
	if l.MaxUncompressedBytes <= 0 {
		errs = append(errs, errors.New("mirror.limits.max_uncompressed_bytes: must be positive"))
	}
	if l.MaxRatio < 1 {
		errs = append(errs, errors.New("mirror.limits.max_ratio: must be at least 1"))
	}
	if l.MaxDependencies <= 0 {
		errs = append(errs, errors.New("mirror.limits.max_dependencies: must be positive"))
	}
	if l.MaxRangeBytes <= 0 || l.MaxRangeBytes > MaxNPMRangeBytes {
		errs = append(errs, fmt.Errorf("mirror.limits.max_range_bytes: must be between 1 and %d", MaxNPMRangeBytes))
	}
	if c.OSVMaxAge <= 0 {
		errs = append(errs, errors.New("mirror.osv_max_age: must be positive"))
	}
	if c.OSVMaxRecordAge < 0 {
		errs = append(errs, errors.New("mirror.osv_max_record_age: must not be negative"))
	}
	if c.FetchTimeout <= 0 {
		errs = append(errs, errors.New("mirror.fetch_timeout: must be positive"))
	}
	return errors.Join(errs...)
}
