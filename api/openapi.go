package api

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 description of the REST API. A test checks
// that it lists every route the server mounts, with its statuses, and that
// the test suite's requests and replies validate against it: a route added
// without documenting it here fails the build.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI document (JSON).
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// serveOpenAPI serves GET /openapi.json without authentication.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(openAPI)
}
