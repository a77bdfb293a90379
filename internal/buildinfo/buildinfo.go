// Package buildinfo says what a sandboxapi binary is, for operators and
// compliance: its module version, VCS revision, commit and build time
// (from Go's VCS stamping, overridable with -ldflags -X), and which runsc
// it runs (read from the runsc binary's own Go build information, which
// `go install gvisor.dev/gvisor/runsc@VERSION` records, since
// `runsc --version` prints VERSION_MISSING for such builds).
package buildinfo

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
)

// Set at build time, e.g. by scripts/setup.sh:
//
//	-ldflags "-X github.com/sandboxapi/sandboxapi/internal/buildinfo.Version=v1.2.3
//	          -X github.com/sandboxapi/sandboxapi/internal/buildinfo.Revision=$(git rev-parse HEAD)
//	          -X github.com/sandboxapi/sandboxapi/internal/buildinfo.BuildTime=2026-12-01T12:00:00Z
//	          -X github.com/sandboxapi/sandboxapi/internal/buildinfo.Runsc=v0.0.0-20260905035102-160fafc42237"
//
// Empty values fall back to what Go stamped into the binary.
var (
	// Version overrides the module version Go derives from the VCS.
	Version string
	// Revision and Modified ("true") stand in for Go's VCS stamp where it
	// cannot be made (a git worktree, whose .git is a file; a source
	// tarball with a known commit).
	Revision string
	Modified string
	// BuildTime is when the binary was built (RFC 3339); Go does not
	// record it.
	BuildTime string
	// Runsc is the runsc version the build was made for (setup.sh's pin).
	Runsc string
)

// RunscStamp is where scripts/setup.sh records the runsc version it built.
const RunscStamp = "/usr/local/lib/sandboxapi/runsc.version"

// Unknown marks a value the binary does not carry.
const Unknown = "unknown"

// Info describes one sandboxapi binary. It is data only.
type Info struct {
	Version    string `json:"version"`     // module version: a tag, a pseudo-version, or "dev"
	Revision   string `json:"revision"`    // VCS commit, "unknown" without VCS stamping
	Modified   bool   `json:"modified"`    // built from a tree with uncommitted changes
	CommitTime string `json:"commit_time"` // the commit's time (RFC 3339), "" when unknown
	BuildTime  string `json:"build_time"`  // when it was built (RFC 3339), "" when not stamped
	GoVersion  string `json:"go_version"`
	// Runsc is the version of the runsc the server runs (filled in by the
	// caller with RunscVersion), "" when not looked up.
	Runsc string `json:"runsc,omitempty"`
}

// Read returns this binary's information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return fromBuildInfo(bi, overrides{Version, Revision, Modified, BuildTime})
}

// overrides are the -X values; empty ones change nothing.
type overrides struct{ version, revision, modified, buildTime string }

// fromBuildInfo builds an Info from Go's build information (nil when the
// binary has none) and the -X overrides.
func fromBuildInfo(bi *debug.BuildInfo, o overrides) Info {
	in := Info{Version: "dev", Revision: Unknown, BuildTime: o.buildTime}
	if bi != nil {
		in.GoVersion = bi.GoVersion
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			in.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.time":
				in.CommitTime = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if o.version != "" {
		in.Version = o.version
	}
	if o.revision != "" {
		in.Revision = o.revision
		in.Modified = o.modified == "true"
	}
	return in
}

// String is the one-line form `sandboxapi version` prints.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (revision %s", i.Version, i.ShortRevision())
	if i.Modified {
		b.WriteString(", modified")
	}
	if i.CommitTime != "" {
		fmt.Fprintf(&b, ", committed %s", i.CommitTime)
	}
	if i.BuildTime != "" {
		fmt.Fprintf(&b, ", built %s", i.BuildTime)
	}
	if i.GoVersion != "" {
		fmt.Fprintf(&b, ", %s", i.GoVersion)
	}
	b.WriteString(")")
	if i.Runsc != "" {
		fmt.Fprintf(&b, " runsc %s", i.Runsc)
	}
	return b.String()
}

// ShortRevision is the first 12 characters of the revision, plus "+dirty"
// for a modified tree.
func (i Info) ShortRevision() string {
	r := i.Revision
	if len(r) > 12 {
		r = r[:12]
	}
	if i.Modified {
		r += "+dirty"
	}
	return r
}

// Errors of RunscVersion.
var ErrRunscVersionUnknown = errors.New("runsc version unknown")

// RunscVersion returns the gVisor module version of the runsc binary at
// path, read from the Go build information inside it (a `go install
// gvisor.dev/gvisor/runsc@V` build records V there), or else from setup's
// stamp file, or else the version this binary was built for. from names
// the source: "binary", "stamp" or "build".
func RunscVersion(path string) (version, from string, err error) {
	return runscVersion(path, RunscStamp, Runsc)
}

func runscVersion(path, stamp, built string) (string, string, error) {
	var errs []error
	if path != "" {
		bi, err := buildinfo.ReadFile(path)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("reading build information of %s: %w", path, err))
		case bi.Main.Path == "gvisor.dev/gvisor" && bi.Main.Version != "" && bi.Main.Version != "(devel)":
			return bi.Main.Version, "binary", nil
		default:
			errs = append(errs, fmt.Errorf("%s carries no gvisor.dev/gvisor module version (main module %q %q)", path, bi.Main.Path, bi.Main.Version))
		}
	}
	if b, err := os.ReadFile(stamp); err == nil {
		if v := strings.TrimSpace(string(b)); v != "" && !strings.ContainsAny(v, " \t\n") {
			return v, "stamp", nil
		}
	} else {
		errs = append(errs, err)
	}
	if built != "" {
		return built, "build", nil
	}
	return "", "", fmt.Errorf("%w: %w", ErrRunscVersionUnknown, errors.Join(errs...))
}
