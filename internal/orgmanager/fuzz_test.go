package orgmanager

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// FuzzJSONBodies sends arbitrary bodies to every endpoint that reads one,
// on a real SQLite store: the answer is always a success or a 4xx with an
// {"error": …} body, never a 500 or a panic.
func FuzzJSONBodies(f *testing.F) {
	for _, s := range []string{
		`{"cidr":"10.0.0.0/8","username":"a","meta":{"trace_id":"t"}}`,
		`{"data":[{"cidr":"10.1.0.0/16"},{"cidr":"10.2.0.0/16","delete":true},{"username":1}]}`,
		`{"add":["10.0.0.0/8"],"remove":["2001:db8::/32"]}`,
		`{"cidr":"2001:db8::1/128","meta":{}}`,
		`{"data":[{"cidr":"10.0.0.0/8","meta":{"a":[1,2,{"b":null}]}}]}`,
		`{"cidr":"\u0000"}`, `[`, `null`, `{"data":null}`,
	} {
		f.Add(s)
	}
	h := newHarness(f, storetest.Open(f, storetest.SQLite), deploy.Discard{})
	h.org("acme", "10.0.0.0/8", "2001:db8::/32")
	f.Fuzz(func(t *testing.T, body string) {
		for _, ep := range []struct{ method, path string }{
			{"POST", "/org/acme/overrides"},
			{"POST", "/org/acme/overrides/batch"},
			{"PATCH", "/org/acme/prefixes"},
		} {
			req := httptest.NewRequest(ep.method, ep.path, strings.NewReader(body))
			rec := httptest.NewRecorder()
			h.router.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("%s %s %q: %d %s", ep.method, ep.path, body, rec.Code, rec.Body)
			}
			var out map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatalf("%s %s %q: body %q is not JSON", ep.method, ep.path, body, rec.Body)
			}
			if rec.Code >= 400 {
				if msg, _ := out["error"].(string); msg == "" {
					t.Fatalf("%s %s %q: %d without error message", ep.method, ep.path, body, rec.Code)
				}
			} else if rec.Code != http.StatusOK {
				t.Fatalf("%s %s %q: status %d", ep.method, ep.path, body, rec.Code)
			}
		}
	})
}

// FuzzQueryCIDR feeds arbitrary ?cidr= values to the endpoints that take one.
func FuzzQueryCIDR(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "10.0.0.1/8", "::/0", "%zz", "a b", ""} {
		f.Add(s)
	}
	h := newHarness(f, storetest.Open(f, storetest.SQLite), deploy.Discard{})
	h.org("acme", "10.0.0.0/8")
	f.Fuzz(func(t *testing.T, c string) {
		for _, method := range []string{"GET", "DELETE"} {
			req := httptest.NewRequest(method, "/org/acme/overrides", nil)
			req.URL.RawQuery = "cidr=" + c
			rec := httptest.NewRecorder()
			h.router.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("%s cidr=%q: %d %s", method, c, rec.Code, rec.Body)
			}
		}
	})
}
