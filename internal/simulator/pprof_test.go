package simulator

import (
	"net/http"
	"testing"
)

// TestPProfOffByDefault: /debug/pprof/ is served only when http.pprof
// asks for it, and then behind api_keys like the API.
func TestPProfOffByDefault(t *testing.T) {
	status := func(base, key string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/debug/pprof/", nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(newFixture(t, fixtureOpts{noFeeds: true}).base, ""); got != http.StatusNotFound {
		t.Errorf("pprof by default: %d, want 404", got)
	}
	if got := status(newFixture(t, fixtureOpts{noFeeds: true, pprof: true}).base, ""); got != http.StatusOK {
		t.Errorf("pprof on, no api_keys: %d, want 200", got)
	}
	keyed := newFixture(t, fixtureOpts{noFeeds: true, pprof: true, keys: []string{"k1"}})
	for key, want := range map[string]int{"": http.StatusUnauthorized, "wrong": http.StatusUnauthorized, "k1": http.StatusOK} {
		if got := status(keyed.base, key); got != want {
			t.Errorf("pprof on, api_keys set, X-API-Key %q: %d, want %d", key, got, want)
		}
	}
}
