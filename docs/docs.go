// Package docs holds the project's API documents and serves them: each
// service's OpenAPI 3 document is embedded here, served by the service at
// /openapi.yaml, and checked by tests against the routes it registers.
package docs

import (
	"embed"
	"net/http"

	"github.com/svc-pf/svc-pf/internal/httpapi"
)

//go:embed openapi/*.yaml
var openapi embed.FS

// OpenAPI returns the OpenAPI document of a service ("orgmanager").
func OpenAPI(service string) ([]byte, error) {
	return openapi.ReadFile("openapi/" + service + ".yaml")
}

// Register serves the service's OpenAPI document at GET /openapi.yaml.
func Register(r *httpapi.Router, service string) {
	r.Handle(http.MethodGet, "/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		doc, err := OpenAPI(service)
		if err != nil {
			httpapi.WriteError(w, http.StatusNotFound, "no OpenAPI document for "+service)
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(doc)
	})
}
