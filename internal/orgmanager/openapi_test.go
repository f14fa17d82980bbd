package orgmanager

import (
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/svc-pf/svc-pf/docs"
	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// TestOpenAPIMatchesRoutes keeps docs/openapi/orgmanager.yaml and the
// registered routes in step: every route is documented, every documented
// operation exists.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	raw, err := docs.OpenAPI("orgmanager")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                    `yaml:"openapi"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if method == "parameters" {
				continue
			}
			if m, ok := op.(map[string]any); !ok || m["responses"] == nil {
				t.Errorf("%s %s has no responses", method, path)
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}

	h := newHarness(t, storetest.Open(t, storetest.SQLite), deploy.Discard{})
	docs.Register(h.router, "orgmanager")
	httpapi.MountStandard(h.router, httpapi.StandardConfig{Service: "orgmanager"})
	var registered []string
	for _, r := range h.router.Routes() {
		registered = append(registered, r.Method+" "+strings.TrimSuffix(r.Pattern, "{$}"))
	}
	slices.Sort(documented)
	slices.Sort(registered)
	if !slices.Equal(documented, registered) {
		t.Fatalf("OpenAPI and routes differ:\ndocumented %v\nregistered %v", documented, registered)
	}
}
