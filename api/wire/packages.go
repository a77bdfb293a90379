package wire

// PackageVerdict is what the mirror says about one requested package
// (POST /v1/packages/check and the MCP tool check_packages).
type PackageVerdict struct {
	Spec      string `json:"spec" jsonschema:"the spec as asked"`
	Name      string `json:"name"`
	Version   string `json:"version,omitempty" jsonschema:"the version looked up: the one asked for, else the newest admitted"`
	Available bool   `json:"available" jsonschema:"true when the mirror serves it and an install would succeed"`
	// Status is admitted, refused, quarantined, removed, not_found or invalid.
	Status string `json:"status" jsonschema:"admitted, refused, quarantined, removed, not_found or invalid"`
	// Versions are the admitted versions, oldest first; the API sends []
	// rather than null when there are none.
	Versions []string `json:"versions" jsonschema:"admitted versions, oldest first"`
	// OSV is clean, accepted (advisories accepted by the operator),
	// vulnerable or unknown.
	OSV         string   `json:"osv" jsonschema:"clean, accepted (known advisories accepted by the operator), vulnerable or unknown"`
	Advisories  []string `json:"advisories,omitempty" jsonschema:"OSV ids that matched"`
	Reasons     []string `json:"reasons,omitempty"`
	OSVSnapshot string   `json:"osv_snapshot,omitempty"`
	// Install is the exact spec for POST /v1/sessions/{id}/install.
	Install string `json:"install,omitempty" jsonschema:"the exact spec to install"`
	// Stripped is what the mirror took out of the published package (npm:
	// "scripts.postinstall", "dependencies", ...); empty when it is served
	// as published.
	Stripped []string `json:"stripped,omitempty" jsonschema:"what the mirror took out of the published package (npm install scripts, dependency fields); empty when served as published"`
	// Dependencies (npm) must be installed with it: name -> range.
	Dependencies map[string]string `json:"dependencies,omitempty" jsonschema:"npm packages it needs installed with it (name to version range): list them in the same install"`
}

// PackageVerdicts is the reply of POST /v1/packages/check: one verdict
// per requested spec, in order.
type PackageVerdicts struct {
	Manager string           `json:"manager"`
	Results []PackageVerdict `json:"results"`
}
