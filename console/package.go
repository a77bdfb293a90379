package console

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
)

// Bounds of a package page: one page of catalogue entries, and the
// advisories, dependents and installing sessions cut to maxPackageList.
const (
	versionsPerPage = 100
	maxPackageList  = 50
)

var (
	// PEP 508 names, and npm names with an optional scope: the mirror's
	// own rules, which a name must pass before it is looked up.
	pipName    = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	npmPkgName = regexp.MustCompile(`^(?i)(@[a-z0-9~-][a-z0-9._~-]*/)?[a-z0-9~-][a-z0-9._~-]*$`)
	pep503Sep  = regexp.MustCompile(`[-_.]+`)
)

// PackageKey returns the normalised name the catalogue indexes a package
// under (PEP 503 for pip, lower case for npm), or ok false when manager
// is not pip or npm or name is not a well-formed name for it.
func PackageKey(manager, name string) (key string, ok bool) {
	switch manager {
	case "pip":
		if len(name) > 200 || !pipName.MatchString(name) {
			return "", false
		}
		return strings.ToLower(pep503Sep.ReplaceAllString(name, "-")), true
	case "npm":
		if len(name) > 214 || !npmPkgName.MatchString(name) {
			return "", false
		}
		return strings.ToLower(name), true
	}
	return "", false
}

type packageData struct {
	Package
	Pager pager
}

// pkg shows /console/mirror/{manager}/{name}: one page of the package's
// catalogue entries, its advisories, dependents and the sessions that
// installed it.
func (c *Console) pkg(ctx context.Context, w http.ResponseWriter, r *http.Request, v view, rest string) {
	manager, name, _ := strings.Cut(rest, "/")
	key, ok := PackageKey(manager, name)
	if !ok {
		c.fail(w, v, http.StatusBadRequest, "bad package: the path is /console/mirror/{pip|npm}/{name}, with a package name as the manager writes it")
		return
	}
	page, ok := pageOf(r)
	if !ok {
		c.fail(w, v, http.StatusBadRequest, errBadPage)
		return
	}
	if c.d.Packages == nil {
		c.fail(w, v, http.StatusNotFound, "package pages are not available on this server")
		return
	}
	p, err := c.d.Packages.Package(ctx, manager, key, (page-1)*versionsPerPage, versionsPerPage+1, maxPackageList)
	if errors.Is(err, ErrNotFound) {
		c.fail(w, v, http.StatusNotFound, "the mirror has no such package")
		return
	}
	if err != nil {
		c.internal(w, v, "the package", err)
		return
	}
	next := len(p.Versions) > versionsPerPage
	p.Versions = p.Versions[:min(len(p.Versions), versionsPerPage)]
	p.Advisories = p.Advisories[:min(len(p.Advisories), maxPackageList)]
	p.Dependents = p.Dependents[:min(len(p.Dependents), maxPackageList)]
	p.Installs = p.Installs[:min(len(p.Installs), maxPackageList)]
	p.Manager, p.Name = manager, name
	v.Title, v.Data = manager+" "+name, packageData{Package: p, Pager: pagerFor(r, page, next)}
	c.render(w, http.StatusOK, "package", v)
}
