package orgmanager

import (
	"net/http"
	"net/url"
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
		OpenAPI    string                    `yaml:"openapi"`
		Paths      map[string]map[string]any `yaml:"paths"`
		Security   []map[string][]string     `yaml:"security"`
		Components struct {
			SecuritySchemes map[string]struct {
				Type   string `yaml:"type"`
				Scheme string `yaml:"scheme"`
			} `yaml:"securitySchemes"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	if b := doc.Components.SecuritySchemes["bearer"]; b.Type != "http" || b.Scheme != "bearer" || len(doc.Security) != 1 || doc.Security[0]["bearer"] == nil {
		t.Fatalf("no bearer security scheme applied to the document: %+v %+v", doc.Components.SecuritySchemes, doc.Security)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if method == "parameters" {
				continue
			}
			m, ok := op.(map[string]any)
			if !ok || m["responses"] == nil {
				t.Errorf("%s %s has no responses", method, path)
				continue
			}
			// Every operation the guard protects documents its refusals;
			// every other one says it needs no token.
			resp, _ := m["responses"].(map[string]any)
			sec, hasSec := m["security"]
			if Protected(&http.Request{URL: &url.URL{Path: path}}) {
				for _, code := range []string{"401", "403", "429"} {
					if resp[code] == nil {
						t.Errorf("%s %s does not document %s", method, path, code)
					}
				}
				if hasSec {
					t.Errorf("%s %s overrides the bearer security", method, path)
				}
			} else if s, _ := sec.([]any); !hasSec || len(s) != 0 {
				t.Errorf("%s %s is open but does not say security: []", method, path)
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
