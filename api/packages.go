package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// Packages answers what the curated mirror holds; the mirror implements it
// through an adapter in the CLI.
type Packages interface {
	// Check returns one verdict per spec, in order. manager is "pip" or
	// "npm"; a malformed spec gets a verdict with status "invalid", not
	// an error.
	Check(ctx context.Context, manager string, specs []string) ([]PackageVerdict, error)
}

// PackageVerdict is what the mirror says about one requested package;
// the shape is the API's, declared in package wire.
type PackageVerdict = wire.PackageVerdict

// Package verdict statuses that are not mirror statuses.
const (
	PackageNotFound = "not_found"
	PackageInvalid  = "invalid"
)

// mountPackages enables POST /v1/packages/check.
func (s *Server) mountPackages(p Packages) {
	s.handle("POST /v1/packages/check", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		var req wire.PackagesRequest
		if err := decodeJSON(r, &req); err != nil {
			return err
		}
		mgr := strings.ToLower(strings.TrimSpace(req.Manager))
		switch mgr {
		case "pip", "npm":
		default:
			return apiErr(http.StatusBadRequest, "invalid_request", "manager must be pip or npm")
		}
		if err := checkPackagesShape("check", req.Packages); err != nil {
			return err
		}
		out, err := p.Check(r.Context(), mgr, req.Packages)
		if err != nil {
			return err
		}
		for i := range out {
			if out[i].Versions == nil {
				out[i].Versions = []string{}
			}
		}
		writeJSON(w, http.StatusOK, wire.PackageVerdicts{Manager: mgr, Results: out})
		return nil
	}))
}
