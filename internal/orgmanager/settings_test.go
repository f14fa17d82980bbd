package orgmanager

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	_ "time/tzdata" // schedules name IANA zones: not the machine's zoneinfo

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// orgVersion reads the organisation's version through the API.
func (h *harness) orgVersion(org string) int {
	h.t.Helper()
	v, err := strconv.Atoi(h.must(200, "GET", "/org/"+org, nil).version(h.t))
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

func TestSettingsEndpoints(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		const body = `{"blocked_categories": [3, 1], "allowlist": ["Example.COM."], "schedules": [
			{"days": ["fri", "mon"], "from": "22:00", "to": "06:00", "tz": "Europe/Amsterdam", "paused": true}]}`
		const canonical = `{"blocked_categories":[1,3],"allowlist":["example.com"],` +
			`"schedules":[{"days":["mon","fri"],"from":"22:00","to":"06:00","tz":"Europe/Amsterdam","paused":true}]}` + "\n"

		for _, m := range []string{"GET", "DELETE"} {
			h.expectError(404, m, "/org/nobody/settings", nil, "organisation not found")
			h.expectError(404, m, "/org/nobody/settings?username=alice", nil, "organisation not found")
		}
		h.expectError(404, "PUT", "/org/nobody/settings", body, "organisation not found")
		h.expectError(404, "GET", "/org/nobody/settings/effective", nil, "organisation not found")
		h.expectError(400, "GET", "/org/a%00b/settings", nil, "control character")

		h.org("acme")
		for _, q := range []string{"", "?profile=0", "?profile=1", "?profile=" + strconv.Itoa(settings.MaxProfile),
			"?location=hq", "?username=alice", "?deviceid=mac:0a:1b", "?username=a+b%26c%3D", "?location=%C3%BCber"} {
			t.Run(q, func(t *testing.T) {
				path := "/org/acme/settings" + q
				v0 := h.orgVersion("acme")
				r := h.must(404, "GET", path, nil)
				if r.errorText(t) != "settings not found" || r.header.Get("X-Org-Version") != "" {
					t.Fatalf("GET none: %s, X-Org-Version %q", r.body, r.header.Get("X-Org-Version"))
				}
				h.expectError(404, "DELETE", path, nil, "settings not found")

				notes, _ := h.notes.counts("acme")
				r = h.must(200, "PUT", path, body)
				if string(r.body) != "{\"success\":true}\n" || r.version(t) != strconv.Itoa(v0+1) {
					t.Fatalf("PUT: %s, version %s, want %d", r.body, r.version(t), v0+1)
				}
				// The deployer heard of it before the client did.
				if n, _ := h.notes.counts("acme"); n != notes+1 {
					t.Fatalf("PUT notified %d times", n-notes)
				}
				r = h.must(200, "GET", path, nil)
				if string(r.body) != canonical || r.version(t) != strconv.Itoa(v0+1) {
					t.Fatalf("GET: %s, version %s", r.body, r.version(t))
				}
				if r := h.must(200, "HEAD", path, nil); len(r.body) != 0 || r.version(t) != strconv.Itoa(v0+1) {
					t.Fatalf("HEAD: %q", r.body)
				}
				r = h.must(200, "PUT", path, `{"paused": true}`)
				if r.version(t) != strconv.Itoa(v0+2) {
					t.Fatalf("PUT (replace) version %s", r.version(t))
				}
				if r := h.must(200, "GET", path, nil); string(r.body) != "{\"paused\":true}\n" {
					t.Fatalf("GET after replace: %s", r.body)
				}
				r = h.must(204, "DELETE", path, nil)
				if len(r.body) != 0 || r.version(t) != strconv.Itoa(v0+3) {
					t.Fatalf("DELETE: %q, version %s", r.body, r.version(t))
				}
				if n, _ := h.notes.counts("acme"); n != notes+3 {
					t.Fatalf("PUT, PUT, DELETE notified %d times", n-notes)
				}
				h.expectError(404, "GET", path, nil, "settings not found")
				h.expectError(404, "DELETE", path, nil, "settings not found")
				if v := h.orgVersion("acme"); v != v0+3 {
					t.Fatalf("version %d after the refused DELETE, want %d", v, v0+3)
				}
			})
		}
		// Scopes are distinct documents; one organisation's are not
		// another's.
		h.org("other")
		h.must(200, "PUT", "/org/acme/settings?username=alice", `{"paused": true}`)
		h.must(200, "PUT", "/org/acme/settings?location=alice", `{"paused": false}`)
		h.expectError(404, "GET", "/org/acme/settings", nil, "settings not found")
		h.expectError(404, "GET", "/org/acme/settings?deviceid=alice", nil, "settings not found")
		h.expectError(404, "GET", "/org/other/settings?username=alice", nil, "settings not found")
		if r := h.must(200, "GET", "/org/acme/settings?location=alice", nil); string(r.body) != "{\"paused\":false}\n" {
			t.Fatalf("location alice: %s", r.body)
		}
		// The deploy of a settings write settles like any other.
		h.settled("acme")
	})
}

func TestSettingsScopeParameters(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme")
		for _, c := range []struct{ query, want string }{
			{"?profile=1&username=alice", "at most one scope parameter (profile, location, username or deviceid); got profile and username"},
			{"?location=hq&deviceid=mac:01", "got deviceid and location"},
			{"?username=a&username=b", "parameter username given more than once"},
			{"?profile=1&profile=1", "parameter profile given more than once"},
			{"?user=alice", `unknown parameter "user": the parameters are profile, location, username, deviceid`},
			{"?org=acme", `unknown parameter "org"`},
			{"?=x", `unknown parameter ""`},
			{"?username=", "username must not be empty"},
			{"?username", "username must not be empty"},
			{"?location=", "location must not be empty"},
			{"?deviceid=", "deviceid must not be empty"},
			{"?profile=", "profile must not be empty"},
			{"?profile=-1", "profile: must be a whole number from 0 to 1048576"},
			{"?profile=x", "profile: must be a whole number"},
			{"?profile=1.5", "profile: must be a whole number"},
			{"?profile=1048577", "profile: must be a whole number"},
			{"?profile=99999999999999999999", "profile: must be a whole number"},
			{"?username=" + strings.Repeat("x", identity.MaxAttributeLen+1), "username longer than 1024 bytes"},
			{"?deviceid=a%00b", "deviceid contains a NUL character"},
			{"?location=%FF", "location is not valid UTF-8"},
			{"?username=%zz", "invalid query string"},
			{"?username=a;location=b", "invalid query string"},
		} {
			for _, m := range []string{"GET", "PUT", "DELETE"} {
				var body any
				if m == "PUT" {
					body = `{"paused":true}`
				}
				r := h.must(400, m, "/org/acme/settings"+c.query, body)
				if msg := r.errorText(t); !strings.Contains(msg, c.want) || r.header.Get("X-Org-Version") != "" {
					t.Errorf("%s %.60s: %q, want %q", m, c.query, msg, c.want)
				}
			}
		}
		if v := h.orgVersion("acme"); v != 1 {
			t.Fatalf("refused requests changed the version to %d", v)
		}
		// At the limits.
		long := strings.Repeat("x", identity.MaxAttributeLen)
		h.must(200, "PUT", "/org/acme/settings?username="+long, `{}`)
		h.must(200, "GET", "/org/acme/settings?username="+long, nil)
		// The parameter of another endpoint is no scope here, nor is a
		// scope on the global layer.
		h.expectError(400, "GET", "/org/acme/settings?cidr=10.0.0.0/8", nil, "unknown parameter")
		for _, m := range []string{"GET", "PUT", "DELETE"} {
			var body any
			if m == "PUT" {
				body = `{}`
			}
			h.expectError(400, m, "/settings?profile=1", body, `unknown parameter "profile": this endpoint takes none`)
		}
	})
}

func TestSettingsBadBodies(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme")
		sched := func(fields string) string {
			return `{"schedules": [{"days": ["mon"], "from": "08:00", "to": "09:00", "tz": "UTC", ` + fields + `}]}`
		}
		for _, c := range []struct{ body, want string }{
			{``, "invalid JSON: empty body"},
			{`{`, "invalid JSON"},
			{`{"paused": true} {}`, "invalid JSON: trailing data"},
			{`[]`, "settings: must be a JSON object"},
			{`null`, "settings: must be a JSON object"},
			{`"x"`, "settings: must be a JSON object"},
			{`{"filter": true}`, "filter: unknown field"},
			{`{"filtering": "yes"}`, "filtering: must be true or false"},
			{`{"blocked_categories": [1, 65536]}`, "blocked_categories[1]: must be a category code"},
			{`{"blocked_categories": [-1]}`, "blocked_categories[0]"},
			{`{"blocked_categories": "1"}`, "blocked_categories: must be a JSON array"},
			{`{"blocked_networks": ["10.0.0.300/8"]}`, "blocked_networks[0]"},
			{`{"blocked_networks": ["10.0.0.0/33"]}`, "blocked_networks[0]"},
			{`{"action": {"type": "redirect", "a": ["1.2.3"]}}`, "action.a[0]"},
			{`{"action": {"type": "redirect", "aaaa": ["192.0.2.1"]}}`, "action.aaaa[0]"},
			{`{"action": {"type": "block"}}`, "action.type"},
			{`{"allowlist": ["ok.example", "bad name"]}`, "allowlist[1]: not a domain name"},
			{`{"blocklist": ["a..b"]}`, "blocklist[0]: not a domain name"},
			{`{"action": {"type": "cname", "target": "a..b"}}`, "action.target"},
			{sched(`"x": 1`), `schedules[0]."x": unknown field`},
			{`{"schedules": [{"days": ["monday"], "from": "08:00", "to": "09:00", "tz": "UTC"}]}`, "schedules[0].days[0]"},
			{`{"schedules": [{"days": ["mon"], "from": "25:00", "to": "09:00", "tz": "UTC"}]}`, "schedules[0].from"},
			{`{"schedules": [{"days": ["mon"], "from": "08:00", "to": "9:00", "tz": "UTC"}]}`, "schedules[0].to"},
			{`{"schedules": [{"days": ["mon"], "from": "08:00", "to": "09:00", "tz": "Mars/Olympus"}]}`, "schedules[0].tz"},
			{`{"schedules": [{"days": ["mon"], "from": "08:00", "to": "09:00"}]}`, "schedules[0].tz: is required"},
			{sched(`"blocked_categories": [65536]`), "schedules[0].blocked_categories[0]"},
			{`{"profile": -1}`, "profile: must be a whole number"},
			{`{"profile": 1048577}`, "profile: must be a whole number"},
		} {
			for _, path := range []string{"/org/acme/settings", "/org/acme/settings?username=alice", "/settings"} {
				r := h.must(400, "PUT", path, c.body)
				if msg := r.errorText(t); !strings.Contains(msg, c.want) {
					t.Errorf("PUT %s %s: %q, want %q", path, c.body, msg, c.want)
				}
			}
		}
		if v := h.orgVersion("acme"); v != 1 {
			t.Fatalf("refused bodies changed the version to %d", v)
		}
		h.expectError(404, "GET", "/settings", nil, "settings not found")
		// An unknown category code is no error: the feed may define it
		// later.
		h.must(200, "PUT", "/org/acme/settings", `{"blocked_categories": [65535, 4242, 0]}`)
		if r := h.must(200, "GET", "/org/acme/settings", nil); string(r.body) != "{\"blocked_categories\":[0,4242,65535]}\n" {
			t.Fatalf("GET: %s", r.body)
		}
		// null is "not set", as absent.
		h.must(200, "PUT", "/org/acme/settings", `{"paused": null, "filtering": false}`)
		if r := h.must(200, "GET", "/org/acme/settings", nil); string(r.body) != "{\"filtering\":false}\n" {
			t.Fatalf("GET: %s", r.body)
		}
		// A body over the cap is refused unread.
		for _, path := range []string{"/org/acme/settings", "/settings"} {
			status, _, data := h.declareLength("PUT", path, maxBody+1)
			if status != http.StatusRequestEntityTooLarge || !strings.Contains(string(data), "request body larger than") {
				t.Errorf("PUT %s over the cap: %d %s", path, status, data)
			}
		}
	})
}

// TestLargestSettingsDocument: a document at every list limit with short
// items fits settings.MaxDocumentBytes, both databases store it and give it
// back; one whose canonical form is over that bound is a 400 naming the
// document, since it could not travel to the nodes.
func TestLargestSettingsDocument(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme")
		build := func(nameLen int) []byte {
			names := make([]string, settings.MaxListItems)
			codes := make([]int, settings.MaxListItems)
			for i := range names {
				names[i] = fmt.Sprintf("%05d.%s", i, strings.Repeat("a", nameLen))
				codes[i] = 65535 - i
			}
			doc := map[string]any{"filtering": true, "blocked_categories": codes, "allowlist": names,
				"action": map[string]any{"type": "redirect", "a": []string{"192.0.2.1"}, "aaaa": []string{"2001:db8::1"}},
				"schedules": []map[string]any{{"days": []string{"mon", "sun"}, "from": "00:00", "to": "24:00",
					"tz": "America/Argentina/ComodRivadavia", "paused": true}},
				"profile": settings.MaxProfile}
			raw, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			return raw
		}
		raw := build(10)
		h.must(200, "PUT", "/org/acme/settings?username=big", string(raw))
		r := h.must(200, "GET", "/org/acme/settings?username=big", nil)
		d, err := settings.Parse(r.body)
		if err != nil || len(*d.Allowlist) != settings.MaxListItems || len(r.body) > settings.MaxDocumentBytes {
			t.Fatalf("read back %d bytes: %v", len(r.body), err)
		}
		h.expectError(400, "PUT", "/org/acme/settings?username=big", string(build(60)), "once canonical")
	})
}

type effectiveResponse struct {
	Settings    map[string]any    `json:"settings"`
	Origin      map[string]string `json:"origin"`
	Layers      []string          `json:"layers"`
	Fingerprint string            `json:"fingerprint"`
	Profile     *int              `json:"profile"`
}

func TestEffectiveSettings(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme")
		h.org("empty")
		effective := func(org, query string) effectiveResponse {
			t.Helper()
			var e effectiveResponse
			r := h.must(200, "GET", "/org/"+org+"/settings/effective"+query, nil)
			r.decode(t, &e)
			if r.version(t) != strconv.Itoa(h.orgVersion(org)) {
				t.Fatalf("X-Org-Version %s", r.version(t))
			}
			return e
		}

		// Nothing stored: the defaults, every field from "default".
		e := effective("empty", "")
		defaults := settings.Merge()
		if len(e.Layers) != 0 || e.Profile != nil || e.Fingerprint != defaults.Fingerprint ||
			e.Settings["filtering"] != true || e.Settings["action"].(map[string]any)["type"] != "nxdomain" {
			t.Fatalf("no layers: %+v", e)
		}
		for _, f := range settings.Fields() {
			if want := defaults.Origin[f]; e.Origin[f] != want {
				t.Errorf("origin of %s = %q, want %q", f, e.Origin[f], want)
			}
		}
		if _, ok := e.Origin["profile"]; ok {
			t.Errorf("origin names a profile no layer sets: %v", e.Origin)
		}

		h.must(200, "PUT", "/settings", `{"blocked_categories": [1], "action": {"type": "refused"}, "safe_search": true}`)
		h.must(200, "PUT", "/org/acme/settings", `{"blocked_categories": [2], "profile": 1}`)
		h.must(200, "PUT", "/org/acme/settings?profile=1", `{"allowlist": ["one.example"], "paused": true}`)
		h.must(200, "PUT", "/org/acme/settings?profile=2", `{"allowlist": ["two.example"]}`)
		h.must(200, "PUT", "/org/acme/settings?location=hq", `{"profile": 2, "safe_search": false}`)
		h.must(200, "PUT", "/org/acme/settings?username=alice", `{"blocked_categories": [], "paused": false}`)
		h.must(200, "PUT", "/org/acme/settings?deviceid=mac:01", `{"blocklist": ["ads.example"], "profile": 1}`)

		for _, c := range []struct {
			query   string
			layers  []string
			profile int
			origin  map[string]string
			values  map[string]string // field → JSON
		}{
			{"", []string{"global", "org:acme", "profile:1"}, 1,
				map[string]string{"blocked_categories": "org:acme", "allowlist": "profile:1", "paused": "profile:1",
					"action": "global", "safe_search": "global", "filtering": "default", "profile": "org:acme"},
				map[string]string{"blocked_categories": "[2]", "allowlist": `["one.example"]`, "paused": "true", "safe_search": "true"}},
			// The empty form of every parameter is the same request.
			{"?location=&username=&deviceid=&profile=", []string{"global", "org:acme", "profile:1"}, 1, nil, nil},
			// The location selects profile 2, more specific than the org.
			{"?location=hq&username=alice", []string{"global", "org:acme", "profile:2", "location:hq", "username:alice"}, 2,
				map[string]string{"blocked_categories": "username:alice", "allowlist": "profile:2", "paused": "username:alice",
					"safe_search": "location:hq", "profile": "location:hq"},
				map[string]string{"blocked_categories": "[]", "allowlist": `["two.example"]`, "paused": "false", "safe_search": "false"}},
			// The device is more specific again, and selects 1.
			{"?location=hq&username=alice&deviceid=mac:01",
				[]string{"global", "org:acme", "profile:1", "location:hq", "username:alice", "deviceid:mac:01"}, 1,
				map[string]string{"blocklist": "deviceid:mac:01", "allowlist": "profile:1", "profile": "deviceid:mac:01"},
				map[string]string{"blocklist": `["ads.example"]`, "allowlist": `["one.example"]`}},
			// The parameter wins over every layer's choice.
			{"?location=hq&profile=1", []string{"global", "org:acme", "profile:1", "location:hq"}, 1,
				map[string]string{"allowlist": "profile:1", "profile": "location:hq"}, map[string]string{"profile": "2"}},
			// A profile without a document: selected, no layer.
			{"?profile=7", []string{"global", "org:acme"}, 7, map[string]string{"allowlist": "default", "paused": "default"}, nil},
			// Attributes without documents add no layer.
			{"?username=bob&location=branch", []string{"global", "org:acme", "profile:1"}, 1, nil, nil},
		} {
			e := effective("acme", c.query)
			if !slices.Equal(e.Layers, c.layers) || e.Profile == nil || *e.Profile != c.profile {
				t.Errorf("%s: layers %v profile %v, want %v %d", c.query, e.Layers, e.Profile, c.layers, c.profile)
			}
			for f, want := range c.origin {
				if e.Origin[f] != want {
					t.Errorf("%s: origin of %s = %q, want %q", c.query, f, e.Origin[f], want)
				}
			}
			for f, want := range c.values {
				if got, _ := json.Marshal(e.Settings[f]); string(got) != want {
					t.Errorf("%s: %s = %s, want %s", c.query, f, got, want)
				}
			}
			for _, f := range []string{"filtering", "blocked_categories", "allowlist", "blocklist", "blocked_networks",
				"safe_search", "paused", "action", "schedules"} {
				if _, ok := e.Settings[f]; !ok || e.Origin[f] == "" {
					t.Errorf("%s: field %s missing from the effective document or its origin", c.query, f)
				}
			}
		}
		// Equal policies share a fingerprint whatever their layers;
		// different ones do not.
		a, b := effective("acme", ""), effective("acme", "?username=bob")
		c := effective("acme", "?username=alice")
		if a.Fingerprint != b.Fingerprint || a.Fingerprint == c.Fingerprint || len(a.Fingerprint) != 16 {
			t.Errorf("fingerprints %s %s %s", a.Fingerprint, b.Fingerprint, c.Fingerprint)
		}
		// Without a global document the global layer is not listed.
		h.must(204, "DELETE", "/settings", nil)
		if e := effective("acme", ""); !slices.Equal(e.Layers, []string{"org:acme", "profile:1"}) || e.Origin["action"] != "default" {
			t.Errorf("without global: %+v", e)
		}

		for _, c := range []struct{ query, want string }{
			{"?username=a&username=b", "given more than once"},
			{"?cidr=10.0.0.0/8", `unknown parameter "cidr"`},
			{"?profile=x", "profile: must be a whole number"},
			{"?profile=-1", "profile: must be a whole number"},
			{"?username=%00", "NUL"},
			{"?deviceid=%FF", "not valid UTF-8"},
			{"?location=" + strings.Repeat("l", identity.MaxAttributeLen+1), "location longer than 1024 bytes"},
			{"?%zz", "invalid query string"},
		} {
			h.expectError(400, "GET", "/org/acme/settings/effective"+c.query, nil, c.want)
		}
		h.expectError(404, "GET", "/org/nobody/settings/effective", nil, "organisation not found")
	})
}

func TestGlobalSettingsEndpoints(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme")
		h.expectError(404, "GET", "/settings", nil, "settings not found")
		h.expectError(404, "DELETE", "/settings", nil, "settings not found")
		_, global := h.notes.counts("acme")

		r := h.must(200, "PUT", "/settings", `{"blocked_categories": [9, 8]}`)
		if string(r.body) != "{\"success\":true}\n" || r.header.Get("X-Settings-Version") != "1" || r.header.Get("X-Org-Version") != "" {
			t.Fatalf("PUT: %s %v", r.body, r.header)
		}
		if _, n := h.notes.counts("acme"); n != global+1 {
			t.Fatalf("PUT notified the deployer %d times", n-global)
		}
		r = h.must(200, "GET", "/settings", nil)
		if string(r.body) != "{\"blocked_categories\":[8,9]}\n" || r.header.Get("X-Settings-Version") != "1" || r.header.Get("X-Org-Version") != "" {
			t.Fatalf("GET: %s %v", r.body, r.header)
		}
		if r := h.must(200, "PUT", "/settings", `{}`); r.header.Get("X-Settings-Version") != "2" {
			t.Fatalf("PUT again: version %q", r.header.Get("X-Settings-Version"))
		}
		r = h.must(204, "DELETE", "/settings", nil)
		if len(r.body) != 0 || r.header.Get("X-Settings-Version") != "3" {
			t.Fatalf("DELETE: %q %v", r.body, r.header)
		}
		if _, n := h.notes.counts("acme"); n != global+3 {
			t.Fatalf("PUT, PUT, DELETE notified the deployer %d times", n-global)
		}
		h.expectError(404, "GET", "/settings", nil, "settings not found")
		h.expectError(404, "DELETE", "/settings", nil, "settings not found")
		if _, n := h.notes.counts("acme"); n != global+3 {
			t.Fatal("a refused DELETE notified the deployer")
		}
		// The global layer is no organisation's: no version moved, no
		// organisation was notified.
		if v := h.orgVersion("acme"); v != 1 {
			t.Fatalf("org version %d", v)
		}
		if n, _ := h.notes.counts("acme"); n != 1 {
			t.Fatalf("the organisation was notified %d times", n)
		}
	})
}

func TestDeleteOrgRemovesSettings(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme")
		h.must(200, "PUT", "/settings", `{"paused": true}`)
		for _, q := range []string{"", "?profile=1", "?username=alice", "?location=hq", "?deviceid=mac:01"} {
			h.must(200, "PUT", "/org/acme/settings"+q, `{"profile": 1}`)
		}
		h.must(204, "DELETE", "/org/acme?confirm=true", nil)
		h.expectError(404, "GET", "/org/acme/settings", nil, "organisation not found")
		h.expectError(404, "GET", "/org/acme/settings/effective", nil, "organisation not found")
		h.org("acme")
		for _, q := range []string{"", "?profile=1", "?username=alice", "?location=hq", "?deviceid=mac:01"} {
			h.expectError(404, "GET", "/org/acme/settings"+q, nil, "settings not found")
		}
		var e effectiveResponse
		h.must(200, "GET", "/org/acme/settings/effective?username=alice&location=hq&deviceid=mac:01", nil).decode(t, &e)
		if !slices.Equal(e.Layers, []string{"global"}) {
			t.Fatalf("re-created organisation's layers: %v", e.Layers)
		}
	})
}

func TestSettingsMethodsAndVersions(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme")
		for _, c := range []struct{ method, path, allow string }{
			{"POST", "/org/acme/settings", "DELETE, GET, HEAD, PUT"},
			{"PATCH", "/org/acme/settings?username=a", "DELETE, GET, HEAD, PUT"},
			{"PUT", "/org/acme/settings/effective", "GET, HEAD"},
			{"DELETE", "/org/acme/settings/effective", "GET, HEAD"},
			{"POST", "/settings", "DELETE, GET, HEAD, PUT"},
		} {
			r := h.must(405, c.method, c.path, nil)
			if got := r.header.Get("Allow"); got != c.allow {
				t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
			}
			r.errorText(t)
		}
		for _, p := range []string{"/org/acme/settings/", "/org/acme/settings/effective/x", "/settings/effective", "/org/settings"} {
			h.must(404, "GET", p, nil).errorText(t)
		}
		for _, c := range []struct{ method, path, body string }{
			{"PUT", "/org/acme/settings?profile=3", `{}`},
			{"GET", "/org/acme/settings?profile=3", ""},
			{"GET", "/org/acme/settings/effective?profile=3", ""},
			{"DELETE", "/org/acme/settings?profile=3", ""},
		} {
			var body any
			if c.body != "" {
				body = c.body
			}
			if r := h.do(c.method, c.path, body); r.status >= 300 || r.header.Get("X-Org-Version") == "" {
				t.Errorf("%s %s: status %d, X-Org-Version %q", c.method, c.path, r.status, r.header.Get("X-Org-Version"))
			}
		}
	})
}
