package simulator

import (
	"net/http"
	"strings"
	"testing"
)

// TestMalformedQuery: over HTTP a malformed pair in the query string (or
// the form) is a 400 naming it, never a 200 answered without it (`ip=%ZZ`
// was "no identity"); verbose takes exactly the values its error names.
func TestMalformedQuery(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	for _, path := range []string{
		"/api/v1/simulate?domain=bad.example&ip=%ZZ",
		"/api/v1/simulate?domain=bad.example&username=alice%",
		"/api/v1/simulate?domain=bad.example;ip=10.0.0.2",
		"/api/v1/domain?domain=bad.example&path=%ZZ",
	} {
		code, m := f.get(path)
		if e, _ := m["error"].(string); code != http.StatusBadRequest || !strings.HasPrefix(e, "invalid query string: ") {
			t.Errorf("%s: %d %v, want 400 invalid query string", path, code, m)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, f.base+"/api/v1/simulate", strings.NewReader("domain=bad.example&ip=%ZZ"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if code, _, m := f.do(req); code != http.StatusBadRequest || !strings.Contains(m["error"].(string), "not URL-encoded") {
		t.Errorf("POST form: %d %v", code, m)
	}
	// The well-formed request is answered for alice.
	if code, m := f.get("/api/v1/simulate?domain=bad.example&ip=10.0.0.2"); code != 200 || m["verdict"] != "block" {
		t.Fatalf("well-formed: %d %v", code, m)
	}

	for _, v := range []string{"1", "true", "0", "false"} {
		code, m := f.get("/api/v1/simulate?domain=bad.example&verbose=" + v)
		if _, hasLog := m["log"]; code != 200 || hasLog != (v == "1" || v == "true") {
			t.Errorf("verbose=%s: %d, log present %v", v, code, hasLog)
		}
	}
	code, m := f.get("/api/v1/simulate?domain=bad.example&verbose=yes")
	if e, _ := m["error"].(string); code != 400 || e != `verbose must be 1, true, 0 or false, not "yes"` {
		t.Errorf("verbose=yes: %d %v", code, m)
	}
}
