package executor

import (
	"fmt"
	"sort"
	"strings"
)

// BuildPlan is the part of the rootfs recipe the runtimes file makes: a
// bash fragment that rootfs/build.sh sources. It names the Debian
// packages to install and, per version, where it comes from, its folder,
// its PATH, the build step that prepares it and the probe that prints its
// exact version.
func (rs *Runtimes) BuildPlan() []byte {
	var b strings.Builder
	b.WriteString("# Generated from the runtimes file by `sandboxapi rootfs plan`; do not edit.\n")
	pkgs := map[string]bool{}
	for _, l := range rs.list {
		for _, p := range l.spec.Packages {
			pkgs[p] = true
		}
		for _, v := range l.spec.Versions {
			for _, p := range v.Packages {
				pkgs[p] = true
			}
		}
	}
	names := make([]string, 0, len(pkgs))
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "RUNTIME_PACKAGES=%s\n", shellQuote(strings.Join(names, " ")))
	cols := []struct {
		name string
		get  func(l *language, v *versionSpec, r *Runtime) string
	}{
		{"RT_LANG", func(l *language, _ *versionSpec, _ *Runtime) string { return l.name }},
		{"RT_SERIES", func(_ *language, v *versionSpec, _ *Runtime) string { return v.Version }},
		{"RT_SOURCE", func(_ *language, v *versionSpec, _ *Runtime) string { return v.Source }},
		{"RT_PREFIX", func(_ *language, v *versionSpec, _ *Runtime) string { return v.Prefix }},
		{"RT_PREPARE", func(_ *language, v *versionSpec, _ *Runtime) string { return v.Prepare }},
		{"RT_PATH", func(_ *language, _ *versionSpec, r *Runtime) string { return pathOfEnv(r.Env) }},
		{"RT_DEFAULT", func(_ *language, v *versionSpec, _ *Runtime) string {
			if v.Default {
				return "1"
			}
			return ""
		}},
		{"RT_PROBE", func(_ *language, v *versionSpec, _ *Runtime) string {
			return strings.NewReplacer("{prefix}", v.Prefix, "{series}", v.Version).Replace(v.Probe)
		}},
	}
	for _, c := range cols {
		b.WriteString(c.name + "=(")
		first := true
		for _, l := range rs.list {
			for _, v := range l.spec.Versions {
				var r *Runtime
				for _, x := range l.versions {
					if x.Series == v.Version {
						r = x
					}
				}
				if !first {
					b.WriteByte(' ')
				}
				first = false
				b.WriteString(shellQuote(c.get(l, v, r)))
			}
		}
		b.WriteString(")\n")
	}
	return []byte(b.String())
}

// shellQuote quotes s for sh and bash: single quotes, each one inside
// written as '\”.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
