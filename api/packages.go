package api

import (
	"context"
	"net/http"
	"strings"
)

// Packages answers what the curated mirror holds; the mirror implements it
// through an adapter in the CLI.
type Packages interface {
	// Check returns one verdict per spec, in order. manager is "pip" or
	// "npm"; a malformed spec gets a verdict with status "invalid", not
	// an error.
	Check(ctx context.Context, manager string, specs []string) ([]PackageVerdict, error)
}

// PackageVerdict is what the mirror says about one requested package.
type PackageVerdict struct {
	Spec      string `json:"spec"`
	Name      string `json:"name"`
	Version   string `json:"version,omitempty"` // asked for, else the newest admitted
	Available bool   `json:"available"`         // an install of Install would succeed
	// Status is admitted, refused, quarantined, removed, not_found or invalid.
	Status   string   `json:"status"`
	Versions []string `json:"versions"` // admitted versions, oldest first
	// OSV is clean, accepted (advisories accepted by the operator),
	// vulnerable or unknown.
	OSV         string   `json:"osv"`
	Advisories  []string `json:"advisories,omitempty"`
	Reasons     []string `json:"reasons,omitempty"`
	OSVSnapshot string   `json:"osv_snapshot,omitempty"`
	Install     string   `json:"install,omitempty"` // exact spec for POST /v1/sessions/{id}/install
	// Stripped is what the mirror took out of the published package (npm:
	// "scripts.postinstall", "dependencies", ...); empty when it is served
	// as published.
	Stripped []string `json:"stripped,omitempty"`
	// Dependencies (npm) must be installed with it: name -> range.
	Dependencies map[string]string `json:"dependencies,omitempty"`
}

// Package verdict statuses that are not mirror statuses.
const (
	PackageNotFound = "not_found"
	PackageInvalid  = "invalid"
)

type checkPackagesRequest struct {
	Manager  string   `json:"manager"`
	Packages []string `json:"packages"`
}

// mountPackages enables POST /v1/packages/check.
func (s *Server) mountPackages(p Packages) {
	s.handle("POST /v1/packages/check", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		var req checkPackagesRequest
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
		writeJSON(w, http.StatusOK, map[string]any{"manager": mgr, "results": out})
		return nil
	}))
}
