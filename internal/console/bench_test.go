package console_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/console"
)

// BenchmarkPages times every console page, as a signed-in admin, over a
// real listener, for an organisation of 100 000 overrides and 1 000
// settings documents (go test -bench Pages -run x ./internal/console/).
func BenchmarkPages(b *testing.B) {
	store := openSQLite(b)
	seed(b, store, 100_000, 1_000)
	e := newEnv(b, store)
	br := e.browser()
	br.signIn(adminSecret)
	for _, p := range []struct{ name, path string }{
		{"orgs", "/ui/orgs"},
		{"org", "/ui/orgs/acme"},
		{"overrides", "/ui/orgs/acme/overrides"},
		{"overrides-middle", "/ui/orgs/acme/overrides?after=10.195.80.0/24"},
		{"override-edit", "/ui/orgs/acme/overrides/edit?cidr=10.100.0.0/24"},
		{"settings", "/ui/orgs/acme/settings"},
		{"settings-edit", "/ui/orgs/acme/settings?scope=username&value=user500"},
		{"effective", "/ui/orgs/acme/effective?username=user500"},
		{"why", "/ui/orgs/acme/why?domain=www.example.com&username=user500"},
		{"sessions", "/ui/orgs/acme/sessions"},
		{"tokens", "/ui/tokens"},
		{"audit", "/ui/audit"},
		{"global-settings", "/ui/settings"},
		{"feeds", "/ui/feeds"},
	} {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				if a := br.get(p.path); a.status != http.StatusOK {
					b.Fatalf("%s: %d", p.path, a.status)
				}
			}
		})
	}
}

// BenchmarkActivityPage times the Activity page with the default page of
// events and at its largest, activity.MaxLimit events, and three charts of 30 bars of two keys (go
// test -bench ActivityPage -run x ./internal/console/). The store is a
// fake at the activity.Reader boundary, so this is the console's own
// cost: parsing, the why links, the SVG layout and the rendering.
func BenchmarkActivityPage(b *testing.B) {
	now := time.Now().UTC()
	fa := newFakeActivity(now)
	proto := fa.all[0]
	fa.all = fa.all[:0]
	for i := range activity.MaxLimit {
		e := proto
		e.ID = int64(activity.MaxLimit - i)
		e.Time = now.Add(-time.Duration(i) * time.Second)
		fa.all = append(fa.all, e)
	}
	e := newEnv(b, openSQLite(b), func(c *console.Config) { c.Activity = fa })
	br := e.browser()
	br.signIn(adminSecret)
	for _, limit := range []string{"100", "1000"} {
		path := "/ui/orgs/acme/activity?limit=" + limit + "&from=-30d"
		b.Run(limit+"-events", func(b *testing.B) {
			for b.Loop() {
				if a := br.get(path); a.status != http.StatusOK {
					b.Fatalf("%s: %d %s", path, a.status, a.body)
				}
			}
		})
	}
}
