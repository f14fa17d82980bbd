package orgmanager

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// FuzzJSONBodies sends arbitrary bodies to every endpoint that reads one,
// on a real SQLite store: the answer is always a success or a 4xx with an
// {"error": …} body, never a 500 or a panic. A settings document accepted
// is read back and parses to the same canonical form.
func FuzzJSONBodies(f *testing.F) {
	for _, s := range []string{
		`{"cidr":"10.0.0.0/8","username":"a","meta":{"trace_id":"t"}}`,
		`{"data":[{"cidr":"10.1.0.0/16"},{"cidr":"10.2.0.0/16","delete":true},{"username":1}]}`,
		`{"add":["10.0.0.0/8"],"remove":["2001:db8::/32"]}`,
		`{"cidr":"2001:db8::1/128","meta":{}}`,
		`{"data":[{"cidr":"10.0.0.0/8","meta":{"a":[1,2,{"b":null}]}}]}`,
		`{"cidr":"\u0000"}`, `[`, `null`, `{"data":null}`,
		// Settings documents (PUT /org/{org}/settings, PUT /settings).
		`{"filtering":false,"blocked_categories":[1,65535],"allowlist":["Example.COM."],"blocklist":["bücher.example"]}`,
		`{"blocked_networks":["10.0.0.0/8","192.0.2.7","::ffff:198.51.100.0/120"],"safe_search":true,"paused":null}`,
		`{"action":{"type":"redirect","a":["192.0.2.1"],"aaaa":["2001:db8::1"]},"profile":2}`,
		`{"action":{"type":"cname","target":"block.example."}}`,
		`{"schedules":[{"days":["sat","mon"],"from":"22:00","to":"06:30","tz":"Europe/Amsterdam","blocked_categories":[7],"paused":true}]}`,
		`{"schedules":[{"days":["mon"],"from":"24:00","to":"09:00","tz":"Mars/Olympus"}]}`,
		`{"blocked_categories":[-1]}`, `{"allowlist":["a..b"]}`, `{"filter":true}`, `{"profile":1048577}`, `{}`,
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
			{"PUT", "/org/acme/settings"},
			{"PUT", "/org/acme/settings?deviceid=mac:01"},
			{"PUT", "/settings"},
		} {
			req := httptest.NewRequest(ep.method, ep.path, strings.NewReader(body))
			h.authorize(req)
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
			} else if ep.method == "PUT" {
				req := httptest.NewRequest("GET", ep.path, nil)
				h.authorize(req)
				got := httptest.NewRecorder()
				h.router.ServeHTTP(got, req)
				d, err := settings.Parse(got.Body.Bytes())
				if got.Code != http.StatusOK || err != nil || d.String()+"\n" != got.Body.String() {
					t.Fatalf("GET %s after PUT %q: %d %s (%v)", ep.path, body, got.Code, got.Body, err)
				}
			}
		}
	})
}

// FuzzSettingsQuery feeds arbitrary query strings to the settings
// endpoints: a scope is parsed or refused with a 4xx, never a 500.
func FuzzSettingsQuery(f *testing.F) {
	for _, s := range []string{"", "profile=1", "username=alice", "location=hq&username=alice", "deviceid=mac:01&deviceid=mac:02",
		"profile=", "profile=-1", "profile=1048577", "username=%00", "username=%ff", "%zz", "a;b", "=", "&&", "username",
		"location=&username=&deviceid=&profile=", "profile=+1", "profile=%201", "cidr=10.0.0.0/8"} {
		f.Add(s)
	}
	h := newHarness(f, storetest.Open(f, storetest.SQLite), deploy.Discard{})
	h.org("acme")
	f.Fuzz(func(t *testing.T, query string) {
		for _, ep := range []struct{ method, path, body string }{
			{"GET", "/org/acme/settings", ""},
			{"PUT", "/org/acme/settings", `{"paused":true}`},
			{"GET", "/org/acme/settings", ""},
			{"DELETE", "/org/acme/settings", ""},
			{"GET", "/org/acme/settings/effective", ""},
			{"GET", "/settings", ""},
		} {
			req := httptest.NewRequest(ep.method, ep.path, strings.NewReader(ep.body))
			h.authorize(req)
			req.URL.RawQuery = query
			rec := httptest.NewRecorder()
			h.router.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("%s %s?%q: %d %s", ep.method, ep.path, query, rec.Code, rec.Body)
			}
			if rec.Code == http.StatusNoContent {
				continue
			}
			var out map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatalf("%s %s?%q: body %q is not JSON", ep.method, ep.path, query, rec.Body)
			}
			if msg, _ := out["error"].(string); rec.Code >= 400 && msg == "" {
				t.Fatalf("%s %s?%q: %d without error message", ep.method, ep.path, query, rec.Code)
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
			h.authorize(req)
			req.URL.RawQuery = "cidr=" + c
			rec := httptest.NewRecorder()
			h.router.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("%s cidr=%q: %d %s", method, c, rec.Code, rec.Body)
			}
		}
	})
}
