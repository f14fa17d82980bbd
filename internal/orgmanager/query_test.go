package orgmanager

import "testing"

// TestQueryStrings: a repeated parameter is never read one way silently (a
// delete with confirm=true&confirm=false must not delete), and a malformed
// query string is a 400, not an absent parameter.
func TestQueryStrings(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme", "10.0.0.0/8")
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "10.1.0.0/16", "username": "a"})
		for _, c := range []struct{ method, path, want string }{
			{"DELETE", "/org/acme?confirm=true&confirm=false", "confirm given more than once"},
			{"DELETE", "/org/acme?confirm=true&x=%ZZ", "invalid query string"},
			{"GET", "/org/acme/overrides?cidr=bad%ZZ", "invalid query string"},
			{"GET", "/org/acme/overrides?cidr=10.1.0.0/16&cidr=10.2.0.0/16", "cidr given more than once"},
			{"GET", "/org/acme/overrides?fields=full&fields=cidr", "fields given more than once"},
			{"DELETE", "/org/acme/overrides?cidr=10.1.0.0/16&cidr=10.9.0.0/16", "cidr given more than once"},
			{"DELETE", "/org/acme/overrides?cidr=10.1.0.0%2", "invalid query string"},
			{"GET", "/org/acme/effective-ranges?force_latest=1&force_latest=0", "force_latest given more than once"},
		} {
			h.expectError(400, c.method, c.path, nil, c.want)
		}
		// Nothing was deleted, and unknown parameters stay ignored.
		h.must(200, "GET", "/org/acme?cachebuster=1", nil)
		h.must(200, "GET", "/org/acme/overrides?cidr=10.1.0.0/16&trace=1", nil)
	})
}
