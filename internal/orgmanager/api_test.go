package orgmanager

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestOrganisationLifecycle(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.expectError(404, "GET", "/org/acme", nil, "organisation not found")

		r := h.must(200, "PUT", "/org/acme", nil)
		if r.version(t) != "1" || string(r.body) != "{\"success\":true}\n" {
			t.Fatalf("PUT: version %s body %s", r.version(t), r.body)
		}
		if v := h.must(200, "PUT", "/org/acme", nil).version(t); v != "2" {
			t.Fatalf("second PUT version %s", v)
		}
		if v := h.must(200, "PATCH", "/org/acme", nil).version(t); v != "3" {
			t.Fatalf("PATCH version %s", v)
		}

		r = h.must(200, "GET", "/org/acme", nil)
		var org struct {
			OrgID     string `json:"org_id"`
			Version   int64  `json:"version"`
			CreatedAt string `json:"created_at"`
			UpdatedAt string `json:"updated_at"`
		}
		r.decode(t, &org)
		created, err1 := time.Parse(time.RFC3339, org.CreatedAt)
		updated, err2 := time.Parse(time.RFC3339, org.UpdatedAt)
		if org.OrgID != "acme" || org.Version != 3 || r.version(t) != "3" || err1 != nil || err2 != nil || updated.Before(created) {
			t.Fatalf("GET org: %+v (%v, %v)", org, err1, err2)
		}

		for _, q := range []string{"", "?confirm=false", "?confirm=1", "?confirm=TRUE"} {
			h.expectError(400, "DELETE", "/org/acme"+q, nil, "confirm=true")
		}
		h.expectError(404, "DELETE", "/org/nobody?confirm=true", nil, "organisation not found")

		h.must(200, "PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/8"}})
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "10.1.0.0/16", "username": "u"})
		r = h.must(204, "DELETE", "/org/acme?confirm=true", nil)
		if len(r.body) != 0 || r.header.Get("X-Org-Version") != "" {
			t.Fatalf("DELETE org: body %q, X-Org-Version %q", r.body, r.header.Get("X-Org-Version"))
		}
		h.expectError(404, "GET", "/org/acme", nil, "organisation not found")
		h.expectError(404, "GET", "/org/acme/overrides", nil, "organisation not found")

		// Recreated, it starts empty and at version 1: its prefixes are free.
		if v := h.must(200, "PUT", "/org/acme", nil).version(t); v != "1" {
			t.Fatalf("recreated version %s", v)
		}
		var list map[string][]string
		h.must(200, "GET", "/org/acme/overrides", nil).decode(t, &list)
		if len(list["cidrs"]) != 0 {
			t.Fatalf("recreated org has overrides %v", list)
		}
		h.org("other", "10.0.0.0/8")
	})
}

func TestOrgIDs(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		long := strings.Repeat("a", 255)
		h.must(200, "PUT", "/org/"+long, nil)
		h.must(200, "GET", "/org/"+long, nil)
		h.expectError(400, "PUT", "/org/"+long+"a", nil, "longer than 255")
		h.expectError(400, "PUT", "/org/a%2Fb", nil, "must not contain '/'")
		h.expectError(400, "PUT", "/org/a%00b", nil, "control character")
		// "." and ".." are path navigation, not ids; sent escaped they get
		// past path cleaning and are refused here.
		h.expectError(400, "PUT", "/org/%2E", nil, `must not be "."`)
		h.expectError(400, "PUT", "/org/%2E%2E", nil, `must not be ".."`)
		h.expectError(400, "PATCH", "/org/%2e%2e", nil, `must not be ".."`)
		h.expectError(400, "GET", "/org/%2E%2E/overrides", nil, `must not be ".."`)
		h.must(200, "PUT", "/org/...", nil)
		h.must(200, "PUT", "/org/.acme", nil)
		// Unicode and punctuation are fine; the id comes back as sent.
		id := "école-1.ü:x"
		h.must(200, "PUT", "/org/"+url.PathEscape(id), nil)
		var org map[string]any
		h.must(200, "GET", "/org/"+url.PathEscape(id), nil).decode(t, &org)
		if org["org_id"] != id {
			t.Fatalf("org_id %v, want %q", org["org_id"], id)
		}
	})
}

func TestMethodsAndUnknownPaths(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme")
		for _, c := range []struct{ method, path, allow string }{
			{"POST", "/org/acme", "DELETE, GET, HEAD, PATCH, PUT"},
			{"GET", "/org/acme/redeploy", "POST"},
			{"PUT", "/org/acme/prefixes", "GET, HEAD, PATCH"},
			{"PUT", "/org/acme/overrides", "DELETE, GET, HEAD, POST"},
			{"GET", "/org/acme/overrides/batch", "POST"},
			{"POST", "/org/acme/effective-ranges", "GET, HEAD"},
		} {
			r := h.must(405, c.method, c.path, nil)
			if got := r.header.Get("Allow"); got != c.allow {
				t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
			}
			r.errorText(t)
		}
		// GET /org is the organisations' listing (listing_test.go).
		for _, p := range []string{"/org/", "/org/acme/nothing", "/org/acme/overrides/10.0.0.0/8", "/nothing"} {
			h.must(404, "GET", p, nil).errorText(t)
		}
		// Paths not in clean form are not redirected (the client would
		// follow to /org/acme): a JSON 404 with the usual headers, which do
		// checks.
		for _, p := range []string{"//org/acme", "/org/x/../acme", "/org/./acme", "/org/acme/./overrides", "/org/..", "/org//overrides"} {
			for _, m := range []string{"GET", "PUT", "POST"} {
				r := h.must(404, m, p, nil)
				if msg := r.errorText(t); msg != "no such endpoint: "+p || r.header.Get("Location") != "" {
					t.Errorf("%s %s: %q, Location %q", m, p, msg, r.header.Get("Location"))
				}
			}
		}
	})
}

func TestPrefixes(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.expectError(404, "PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/8"}}, "organisation not found")
		h.org("acme")
		h.org("other")

		r := h.must(200, "PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/9", "10.128.0.0/9", "2001:db8::/32"}})
		if r.version(t) != "2" {
			t.Fatalf("version after add %s", r.version(t))
		}
		var got map[string][]string
		h.must(200, "GET", "/org/acme/prefixes", nil).decode(t, &got)
		if !slices.Equal(got["prefixes"], []string{"10.0.0.0/9", "10.128.0.0/9", "2001:db8::/32"}) {
			t.Fatalf("prefixes %v", got)
		}

		// Malformed CIDRs in either array, in the API's validation order.
		for _, c := range []struct {
			body map[string]any
			want string
		}{
			{map[string]any{"add": []string{"10.0.0.0"}}, "invalid CIDR"},
			{map[string]any{"add": []string{"300.0.0.0/8"}}, "invalid CIDR"},
			{map[string]any{"add": []string{"10.0.0.0/33"}}, "prefix length 33 out of range"},
			{map[string]any{"add": []string{"2001:db8::/129"}}, "out of range 0..128"},
			{map[string]any{"add": []string{"10.0.0.1/8"}}, "host bits set"},
			{map[string]any{"add": []string{"::ffff:10.0.0.0/104"}}, "IPv4-mapped IPv6 network; the canonical form is 10.0.0.0/8"},
			{map[string]any{"remove": []string{"bogus"}}, "invalid CIDR"},
			{map[string]any{"add": []string{"12.0.0.0/8"}, "remove": []string{"10.0.0.1/9"}}, "host bits"},
		} {
			h.expectError(400, "PATCH", "/org/acme/prefixes", c.body, c.want)
		}
		for _, body := range []string{"", "{", "[]", `{"add":"10.0.0.0/8"}`, `{"add":[1]}`, `{"add":[]} x`} {
			h.expectError(400, "PATCH", "/org/acme/prefixes", body, "invalid JSON")
		}

		// Global overlap: contained, containing, equal, IPv6; nothing applied.
		for _, p := range []string{"10.1.0.0/16", "10.0.0.0/8", "10.0.0.0/9", "0.0.0.0/0", "2001:db8:1::/48"} {
			h.expectError(422, "PATCH", "/org/other/prefixes", map[string]any{"add": []string{"192.168.0.0/16", p}}, "overlaps")
		}
		h.must(200, "GET", "/org/other/prefixes", nil).decode(t, &got)
		if len(got["prefixes"]) != 0 {
			t.Fatalf("a refused update applied %v", got)
		}
		// The message must not name the other organisation.
		r = h.must(422, "PATCH", "/org/other/prefixes", map[string]any{"add": []string{"10.0.0.0/8"}})
		if strings.Contains(r.errorText(t), "acme") {
			t.Errorf("422 leaks the owner: %s", r.body)
		}
		// Overlap within the organisation itself is allowed; other families and
		// disjoint space are free.
		h.must(200, "PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.1.0.0/16"}})
		h.must(200, "PATCH", "/org/other/prefixes", map[string]any{"add": []string{"11.0.0.0/8", "2001:db9::/32"}})

		// Removal, then the space is free for another organisation.
		h.must(200, "PATCH", "/org/acme/prefixes", map[string]any{"remove": []string{"10.0.0.0/9", "10.1.0.0/16"}})
		h.must(200, "PATCH", "/org/other/prefixes", map[string]any{"add": []string{"10.0.0.0/9"}})

		// Both arrays optional.
		v := h.must(200, "GET", "/org/acme", nil).version(t)
		r = h.must(200, "PATCH", "/org/acme/prefixes", map[string]any{})
		if r.version(t) != v {
			t.Errorf("an empty patch changed the version %s → %s", v, r.version(t))
		}
	})
}

func TestPrefixOverlapRaceHTTP(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		const n = 8
		for i := range n {
			h.org(fmt.Sprint("org", i))
		}
		var wg sync.WaitGroup
		status := make([]int, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each claims a different but overlapping prefix of 10/8.
				p := fmt.Sprintf("10.0.0.0/%d", 8+i)
				status[i] = h.do("PATCH", fmt.Sprintf("/org/org%d/prefixes", i), map[string]any{"add": []string{p}}).status
			}()
		}
		wg.Wait()
		ok := 0
		for _, s := range status {
			switch s {
			case 200:
				ok++
			case 422:
			default:
				t.Errorf("unexpected status %d", s)
			}
		}
		if ok != 1 {
			t.Fatalf("%d organisations won the race, want exactly 1 (%v)", ok, status)
		}
	})
}

type override struct {
	CIDR     string         `json:"cidr"`
	Username string         `json:"username"`
	DeviceID string         `json:"deviceid"`
	Location string         `json:"location"`
	Meta     map[string]any `json:"meta"`
	Status   string         `json:"_status"`
	MTime    string         `json:"_mtime"`
	CTime    string         `json:"_ctime"`
}

func (h *harness) override(org, cidr string) (override, map[string]any) {
	h.t.Helper()
	r := h.must(200, "GET", "/org/"+org+"/overrides?cidr="+url.QueryEscape(cidr), nil)
	var o override
	var raw map[string]any
	r.decode(h.t, &o)
	r.decode(h.t, &raw)
	r.version(h.t)
	return o, raw
}

func TestOverrides(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.expectError(404, "POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.0/8"}, "organisation not found")
		h.org("acme", "10.0.0.0/9", "10.128.0.0/9")

		r := h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.0/8", "username": "alice",
			"deviceid": "mac:00:11:22:33:44:55", "location": "hq", "meta": map[string]any{"x-team": "blue", "trace_id": "t-1"}})
		var res map[string]any
		r.decode(t, &res)
		if res["success"] != true || res["cidr"] != "10.0.0.0/8" || len(res) != 2 || r.version(t) != "3" {
			t.Fatalf("POST: %s version %s", r.body, r.version(t))
		}

		o, raw := h.override("acme", "10.0.0.0/8")
		if o.Username != "alice" || o.DeviceID != "mac:00:11:22:33:44:55" || o.Location != "hq" ||
			o.Meta["x-team"] != "blue" || o.Status != "active" {
			t.Fatalf("override %+v", o)
		}
		ctime, err := time.Parse(time.RFC3339, o.CTime)
		if err != nil || o.MTime != o.CTime {
			t.Fatalf("times %q %q: %v", o.CTime, o.MTime, err)
		}
		for _, k := range []string{"_status", "_mtime", "_ctime"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("single GET lacks %s", k)
			}
		}

		// Overwrite replaces everything, meta included; ctime is kept.
		time.Sleep(2 * time.Millisecond)
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.0/8", "location": "branch"})
		o, raw = h.override("acme", "10.0.0.0/8")
		if o.Username != "" || o.DeviceID != "" || o.Location != "branch" || raw["meta"] != nil || raw["username"] != nil {
			t.Fatalf("overwrite kept old fields: %v", raw)
		}
		mtime, _ := time.Parse(time.RFC3339, o.MTime)
		if c2, _ := time.Parse(time.RFC3339, o.CTime); !c2.Equal(ctime) || !mtime.After(ctime) {
			t.Fatalf("ctime %s→%s, mtime %s", ctime, o.CTime, o.MTime)
		}

		// Outside the prefixes: accepted and held back; IPv6 too.
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "192.168.0.0/24", "username": "x"})
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "2001:DB8::/48", "username": "v6"})
		if o, _ = h.override("acme", "192.168.0.0/24"); o.Status != "outside-prefixes" {
			t.Fatalf("status %q", o.Status)
		}
		if o, _ = h.override("acme", "2001:db8::/48"); o.Status != "outside-prefixes" || o.CIDR != "2001:db8::/48" {
			t.Fatalf("v6 %+v", o)
		}

		// Lists.
		var cidrs map[string][]string
		r = h.must(200, "GET", "/org/acme/overrides", nil)
		r.decode(t, &cidrs)
		r.version(t)
		if !slices.Equal(cidrs["cidrs"], []string{"10.0.0.0/8", "192.168.0.0/24", "2001:db8::/48"}) {
			t.Fatalf("cidrs %v", cidrs)
		}
		h.must(200, "GET", "/org/acme/overrides?fields=cidr", nil).decode(t, &cidrs)
		if len(cidrs["cidrs"]) != 3 {
			t.Fatalf("fields=cidr %v", cidrs)
		}
		var full struct{ Overrides []override }
		h.must(200, "GET", "/org/acme/overrides?fields=full", nil).decode(t, &full)
		if len(full.Overrides) != 3 || full.Overrides[0].Status != "active" || full.Overrides[1].Status != "outside-prefixes" ||
			full.Overrides[0].CTime == "" || full.Overrides[2].Username != "v6" {
			t.Fatalf("fields=full %+v", full)
		}
		h.expectError(400, "GET", "/org/acme/overrides?fields=all", nil, "fields must be")

		// Errors of the single GET.
		h.expectError(404, "GET", "/org/acme/overrides?cidr=10.9.0.0/16", nil, "override not found")
		h.expectError(404, "GET", "/org/nobody/overrides?cidr=10.0.0.0/8", nil, "organisation not found")
		h.expectError(400, "GET", "/org/acme/overrides?cidr=10.0.0.1/8", nil, "host bits set")
		h.expectError(400, "GET", "/org/acme/overrides?cidr=", nil, "invalid CIDR")
		h.expectError(404, "GET", "/org/nobody/overrides", nil, "organisation not found")

		// Delete.
		r = h.must(204, "DELETE", "/org/acme/overrides?cidr=192.168.0.0/24", nil)
		if len(r.body) != 0 || r.version(t) == "" {
			t.Fatal("DELETE override")
		}
		h.expectError(404, "GET", "/org/acme/overrides?cidr=192.168.0.0/24", nil, "override not found")
		v := r.version(t)
		if r = h.must(204, "DELETE", "/org/acme/overrides?cidr=192.168.0.0/24", nil); r.version(t) != v {
			t.Errorf("deleting nothing bumped the version %s → %s", v, r.version(t))
		}
		h.expectError(400, "DELETE", "/org/acme/overrides", nil, "missing required parameter: cidr")
		h.expectError(400, "DELETE", "/org/acme/overrides?cidr=10.0.0.0/40", nil, "out of range")
		h.expectError(404, "DELETE", "/org/nobody/overrides?cidr=10.0.0.0/8", nil, "organisation not found")
	})
}

func TestOverrideBadInput(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme", "10.0.0.0/8")
		for _, c := range []struct {
			body string
			want string
		}{
			{`{}`, "missing required field: cidr"},
			{`{"username":"a"}`, "missing required field: cidr"},
			{`{"cidr":null}`, "missing required field: cidr"},
			{`{"cidr":"10.0.0.0"}`, "invalid CIDR"},
			{`{"cidr":"10.0.0.0/33"}`, "out of range"},
			{`{"cidr":"10.0.0.1/8"}`, "host bits set"},
			{`{"cidr":"::ffff:10.1.0.0/112"}`, "the canonical form is 10.1.0.0/16"},
			{`{"cidr":""}`, "invalid CIDR"},
			{`{"cidr":10}`, "invalid JSON"},
			{`{"cidr":"10.0.0.0/8","username":5}`, "invalid JSON"},
			{`{"cidr":"10.0.0.0/8","meta":"x"}`, "meta must be a JSON object"},
			{`{"cidr":"10.0.0.0/8","meta":[1]}`, "meta must be a JSON object"},
			{`{"cidr":"10.0.0.0/8","username":"` + strings.Repeat("u", 1025) + `"}`, "longer than 1024"},
			{`{"cidr":"10.0.0.0/8","meta":{"k":"` + strings.Repeat("m", 17<<10) + `"}}`, "meta larger than"},
			{`{"cidr":"10.0.0.0/8","username":"a\u0000b"}`, "NUL"},
			{``, "invalid JSON"},
			{`{"cidr":`, "invalid JSON"},
			{`[{"cidr":"10.0.0.0/8"}]`, "invalid JSON"},
			{`{"cidr":"10.0.0.0/8"}{}`, "invalid JSON"},
		} {
			h.expectError(400, "POST", "/org/acme/overrides", c.body, c.want)
		}
		var list map[string][]string
		h.must(200, "GET", "/org/acme/overrides", nil).decode(t, &list)
		if len(list["cidrs"]) != 0 {
			t.Fatalf("bad input stored something: %v", list)
		}
		// Read-only system fields sent back by a client are ignored.
		h.must(200, "POST", "/org/acme/overrides", `{"cidr":"10.0.0.0/8","_status":"x","_ctime":"y","username":"a"}`)
	})
}

func TestStatusFollowsPrefixUnion(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme", "10.0.0.0/9")
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.0/8", "username": "a"})
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "2001:db8::/32", "username": "b"})
		status := func(c string) string { o, _ := h.override("acme", c); return o.Status }
		if status("10.0.0.0/8") != "outside-prefixes" || status("2001:db8::/32") != "outside-prefixes" {
			t.Fatal("covered before the prefixes exist")
		}
		// Two adjacent /9s cover the /8; two /33s cover the /32.
		h.must(200, "PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.128.0.0/9", "2001:db8::/33", "2001:db8:8000::/33"}})
		if status("10.0.0.0/8") != "active" || status("2001:db8::/32") != "active" {
			t.Fatal("union of prefixes does not cover")
		}
		h.must(200, "PATCH", "/org/acme/prefixes", map[string]any{"remove": []string{"10.0.0.0/9"}})
		if status("10.0.0.0/8") != "outside-prefixes" {
			t.Fatal("prefix removal did not flip the status")
		}
	})
}

type batchResponse struct {
	Success   bool `json:"success"`
	Processed int  `json:"processed"`
	Skipped   int  `json:"skipped"`
	Errors    []struct {
		Index int     `json:"index"`
		CIDR  *string `json:"cidr"`
		Error string  `json:"error"`
	} `json:"errors"`
}

func TestBatch(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.expectError(404, "POST", "/org/acme/overrides/batch", map[string]any{"data": []any{}}, "organisation not found")
		h.org("acme", "10.0.0.0/8")
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "10.9.0.0/16", "username": "old"})

		r := h.must(200, "POST", "/org/acme/overrides/batch", `{"data":[
			{"cidr":"10.1.0.0/16","username":"a","meta":{"trace_id":"t"}},
			{"cidr":"10.1.0.1/16","username":"bad"},
			{"username":"nocidr"},
			{"cidr":"10.9.0.0/16","delete":true},
			{"cidr":"10.2.0.0/16","deviceid":"mac:1"},
			{"delete":true},
			{"cidr":"10.3.0.0/33","delete":true},
			"not an object",
			{"cidr":"10.4.0.0/16","username":7},
			{"cidr":"2001:db8::/32","location":"v6"},
			{"cidr":"10.5.0.0/16","delete":false,"username":"kept"}
		]}`)
		var br batchResponse
		r.decode(t, &br)
		r.version(t)
		if br.Success || br.Processed != 5 || br.Skipped != 6 || len(br.Errors) != 6 {
			t.Fatalf("batch result %s", r.body)
		}
		want := []struct {
			index int
			cidr  string
			msg   string
		}{
			{1, "10.1.0.1/16", "host bits set"},
			{2, "", "missing required field: cidr"},
			{5, "", "missing required field: cidr"},
			{6, "10.3.0.0/33", "out of range"},
			{7, "", "invalid item"},
			{8, "", "invalid item: username must be a string"},
		}
		for i, w := range want {
			e := br.Errors[i]
			gotCIDR := ""
			if e.CIDR != nil {
				gotCIDR = *e.CIDR
			}
			if e.Index != w.index || gotCIDR != w.cidr || !strings.Contains(e.Error, w.msg) {
				t.Errorf("error %d = %+v (cidr %q), want %+v", i, e, gotCIDR, w)
			}
		}
		var list map[string][]string
		h.must(200, "GET", "/org/acme/overrides", nil).decode(t, &list)
		if !slices.Equal(list["cidrs"], []string{"10.1.0.0/16", "10.2.0.0/16", "10.5.0.0/16", "2001:db8::/32"}) {
			t.Fatalf("after batch: %v", list)
		}

		// All valid: success, errors is an empty array.
		r = h.must(200, "POST", "/org/acme/overrides/batch", map[string]any{"data": []any{
			map[string]any{"cidr": "10.1.0.0/16", "delete": true},
			map[string]any{"cidr": "10.1.0.0/16", "username": "again"}, // last op wins
		}})
		if !strings.Contains(string(r.body), `"errors":[]`) {
			t.Fatalf("errors not an empty array: %s", r.body)
		}
		r.decode(t, &br)
		if !br.Success || br.Processed != 2 || br.Skipped != 0 {
			t.Fatalf("%s", r.body)
		}
		if o, _ := h.override("acme", "10.1.0.0/16"); o.Username != "again" {
			t.Fatalf("sequential semantics: %+v", o)
		}

		// Envelope errors.
		for _, body := range []string{``, `[]`, `{"data":{}}`, `{"data":"x"}`, `{"data":[{}]`, `{"data":[{"cidr":"10.9.0.0/16"},`,
			`{"data":[],"data":[]}`, `{"data":[]} x`, `{"data":[{"cidr":"10.9.0.0/16"}],"x":[}`} {
			h.expectError(400, "POST", "/org/acme/overrides/batch", body, "invalid JSON")
		}
		// Refused as a whole: nothing applied.
		h.must(404, "GET", "/org/acme/overrides?cidr=10.9.0.0/16", nil)
		h.expectError(400, "POST", "/org/acme/overrides/batch", `{}`, "missing required field: data")
		h.expectError(400, "POST", "/org/acme/overrides/batch", `{"data":null}`, "missing required field: data")
	})
}

// TestBatchTextTheStoreRefuses: text the database cannot hold (a NUL
// character in an attribute or in meta.trace_id, invalid UTF-8 in meta) is
// refused by the input checks, so in a batch it is a per-item error and the
// other items are applied; the single POST answers 400.
func TestBatchTextTheStoreRefuses(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme", "10.0.0.0/8")
		bad := []struct{ item, msg string }{
			{`{"cidr":"10.2.0.0/16","username":"a\u0000b"}`, "username contains a NUL character"},
			{`{"cidr":"10.3.0.0/16","deviceid":"mac:\u0000"}`, "deviceid contains a NUL character"},
			{`{"cidr":"10.4.0.0/16","location":"\u0000"}`, "location contains a NUL character"},
			{`{"cidr":"10.5.0.0/16","meta":{"trace_id":"t\u0000"}}`, "meta.trace_id contains a NUL character"},
			{`{"cidr":"10.5.0.0/16","meta":{"trace_\u0069d":"\u0000"}}`, "meta.trace_id contains a NUL character"},
			{`{"cidr":"10.6.0.0/16","meta":{"x-k":"` + "\xff" + `"}}`, "meta is not valid UTF-8"},
			{`{"cidr":"10.7.0.0/16","meta":{"trace_id":"` + "\xc3" + `"}}`, "meta is not valid UTF-8"},
			// Raw invalid bytes in an attribute: encoding/json would decode
			// them as U+FFFD and store another name (issue 11).
			{`{"cidr":"10.9.0.0/16","username":"` + "\xff" + `"}`, "invalid input: username is not valid UTF-8"},
			{`{"cidr":"10.9.0.0/16","deviceid":"mac:` + "\xc3\x28" + `"}`, "invalid input: deviceid is not valid UTF-8"},
			{`{"location":"` + "\xed\xa0\x80" + `","cidr":"10.9.0.0/16"}`, "invalid input: location is not valid UTF-8"},
			{`{"cidr":"10.9.0.0/16","username":"ok","location":"` + "\xff" + `","meta":{"x":"` + "\xff" + `"}}`, "invalid input: location is not valid UTF-8"},
		}
		// What the store can hold passes: a NUL escape elsewhere in meta is
		// stored as text; an escaped U+FFFD is a character like another.
		good := []string{
			`{"cidr":"10.1.0.0/16","meta":{"trace_id":"ok"}}`,
			`{"cidr":"10.8.0.0/16","meta":{"x-k":"a\u0000b","trace_id":7}}`,
			`{"cidr":"10.9.0.0/16","username":"\ufffd"}`,
		}
		items := []string{good[0]}
		for _, b := range bad {
			items = append(items, b.item)
		}
		items = append(items, good[1:]...)
		r := h.must(200, "POST", "/org/acme/overrides/batch", `{"data":[`+strings.Join(items, ",")+`]}`)
		var br batchResponse
		r.decode(t, &br)
		if br.Success || br.Processed != len(good) || br.Skipped != len(bad) || len(br.Errors) != len(bad) || r.version(t) != "3" {
			t.Fatalf("batch result %s, version %s", r.body, r.header.Get("X-Org-Version"))
		}
		for i, e := range br.Errors {
			if e.Index != i+1 || e.CIDR != nil || !strings.Contains(e.Error, bad[i].msg) {
				t.Errorf("error %d = %+v, want index %d and %q", i, e, i+1, bad[i].msg)
			}
		}
		var list map[string][]string
		h.must(200, "GET", "/org/acme/overrides", nil).decode(t, &list)
		if !slices.Equal(list["cidrs"], []string{"10.1.0.0/16", "10.8.0.0/16", "10.9.0.0/16"}) {
			t.Fatalf("after batch: %v", list)
		}
		if _, raw := h.override("acme", "10.8.0.0/16"); metaKey(raw, "x-k") != "a\x00b" {
			t.Errorf("meta with a NUL escape: %v", raw["meta"])
		}
		if o, _ := h.override("acme", "10.9.0.0/16"); o.Username != "\uFFFD" {
			t.Errorf("username %q, want the U+FFFD sent", o.Username)
		}

		for _, b := range bad {
			h.expectError(400, "POST", "/org/acme/overrides", b.item, b.msg)
		}
		h.must(200, "GET", "/org/acme/overrides", nil).decode(t, &list)
		if len(list["cidrs"]) != 3 {
			t.Fatalf("a refused POST stored something: %v", list)
		}
	})
}

func metaKey(override map[string]any, key string) any {
	meta, _ := override["meta"].(map[string]any)
	return meta[key]
}

func TestBatchLimit(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme", "10.0.0.0/8")
		items := make([]map[string]any, 10_001)
		for i := range items {
			items[i] = map[string]any{"cidr": fmt.Sprintf("10.%d.%d.0/24", i/256, i%256), "username": fmt.Sprint("u", i)}
		}
		h.expectError(400, "POST", "/org/acme/overrides/batch", map[string]any{"data": items}, "limit is 10000")
		// Refused at the 10 001st item, before the rest of the body: what
		// follows it is not even JSON.
		over, _ := json.Marshal(map[string]any{"data": items})
		h.expectError(400, "POST", "/org/acme/overrides/batch", string(over[:len(over)-3])+"garbage", "limit is 10000")
		var list map[string][]string
		h.must(200, "GET", "/org/acme/overrides", nil).decode(t, &list)
		if len(list["cidrs"]) != 0 {
			t.Fatal("an over-limit batch applied items")
		}
		var br batchResponse
		h.must(200, "POST", "/org/acme/overrides/batch", map[string]any{"data": items[:10_000]}).decode(t, &br)
		if !br.Success || br.Processed != 10_000 {
			t.Fatalf("10 000 items: %+v", br)
		}
		h.must(200, "GET", "/org/acme/overrides", nil).decode(t, &list)
		if len(list["cidrs"]) != 10_000 {
			t.Fatalf("%d overrides stored", len(list["cidrs"]))
		}
	})
}

func TestEffectiveRanges(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.expectError(404, "GET", "/org/acme/effective-ranges", nil, "organisation not found")
		h.expectError(404, "GET", "/org/acme/effective-ranges?force_latest=1", nil, "organisation not found")
		h.org("acme", "10.0.0.0/9", "10.128.0.0/9", "2001:db8::/32")
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.0/8", "username": "alice", "meta": map[string]any{"secret": 1}})
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "10.1.0.0/16", "deviceid": "mac:1"})
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "2001:db8:1::/48", "location": "lab"})
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "172.16.0.0/12", "username": "outside"})

		want := []map[string]string{
			{"from": "10.0.0.0", "to": "10.0.255.255", "orig_cidr": "10.0.0.0/8", "username": "alice"},
			{"from": "10.1.0.0", "to": "10.1.255.255", "orig_cidr": "10.1.0.0/16", "deviceid": "mac:1"},
			{"from": "10.2.0.0", "to": "10.255.255.255", "orig_cidr": "10.0.0.0/8", "username": "alice"},
			{"from": "2001:db8::", "to": "2001:db8:0:ffff:ffff:ffff:ffff:ffff", "orig_cidr": "2001:db8::/32"},
			{"from": "2001:db8:1::", "to": "2001:db8:1:ffff:ffff:ffff:ffff:ffff", "orig_cidr": "2001:db8:1::/48", "location": "lab"},
			{"from": "2001:db8:2::", "to": "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "orig_cidr": "2001:db8::/32"},
		}
		check := func(name string, rr rangesResponse) {
			t.Helper()
			if len(rr.Ranges) != len(want) {
				t.Fatalf("%s: ranges %v", name, rr.Ranges)
			}
			for i := range want {
				if fmt.Sprint(rr.Ranges[i]) != fmt.Sprint(want[i]) {
					t.Errorf("%s: range %d = %v, want %v", name, i, rr.Ranges[i], want[i])
				}
			}
		}

		var latest rangesResponse
		r := h.must(200, "GET", "/org/acme/effective-ranges?force_latest=1", nil)
		r.decode(t, &latest)
		if latest.Version != 6 || r.version(t) != "6" {
			t.Fatalf("force_latest version %d header %s", latest.Version, r.version(t))
		}
		check("force_latest", latest)
		if strings.Contains(string(r.body), "secret") || strings.Contains(string(r.body), "meta") {
			t.Fatal("meta leaked into effective ranges")
		}

		deployed := h.settled("acme")
		if deployed.Version != 6 || deployed.DirtySince != "" {
			t.Fatalf("deployed %+v", deployed)
		}
		check("deployed", deployed)

		// A write makes it dirty at once; the cached view still shows the
		// deployed snapshot until the deploy lands, force_latest the new data.
		before := time.Now().Add(-time.Second)
		h.must(204, "DELETE", "/org/acme/overrides?cidr=10.1.0.0/16", nil)
		h.must(200, "GET", "/org/acme/effective-ranges?force_latest=1", nil).decode(t, &latest)
		if latest.Version != 7 || len(latest.Ranges) != 4 {
			t.Fatalf("force_latest after delete: %+v", latest)
		}
		var now rangesResponse
		h.must(200, "GET", "/org/acme/effective-ranges", nil).decode(t, &now)
		if now.Dirty {
			since, err := time.Parse(time.RFC3339, now.DirtySince)
			if err != nil || since.Before(before) || now.Version != 6 {
				t.Fatalf("dirty view %+v (%v)", now, err)
			}
		}
		if got := h.settled("acme"); got.Version != 7 || len(got.Ranges) != 4 {
			t.Fatalf("settled after delete %+v", got)
		}
		h.expectError(400, "GET", "/org/acme/effective-ranges?force_latest=yes", nil, "force_latest")
	})
}

func TestVersionHeaderEverywhere(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme", "10.0.0.0/8")
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/org/acme", ""},
			{"PUT", "/org/acme", ""},
			{"PATCH", "/org/acme/prefixes", `{"add":["10.0.0.0/8"]}`},
			{"GET", "/org/acme/prefixes", ""},
			{"POST", "/org/acme/overrides", `{"cidr":"10.0.0.0/16"}`},
			{"GET", "/org/acme/overrides", ""},
			{"GET", "/org/acme/overrides?cidr=10.0.0.0/16", ""},
			{"POST", "/org/acme/overrides/batch", `{"data":[]}`},
			{"DELETE", "/org/acme/overrides?cidr=10.0.0.0/16", ""},
			{"GET", "/org/acme/effective-ranges", ""},
			{"GET", "/org/acme/effective-ranges?force_latest=1", ""},
		} {
			var body any
			if c.body != "" {
				body = c.body
			}
			if r := h.do(c.method, c.path, body); r.status >= 300 || r.header.Get("X-Org-Version") == "" {
				t.Errorf("%s %s: status %d, X-Org-Version %q", c.method, c.path, r.status, r.header.Get("X-Org-Version"))
			}
		}
		v := h.must(200, "GET", "/org/acme", nil).version(t)
		r := h.must(200, "POST", "/org/acme/redeploy", nil)
		if r.header.Get("X-Org-Version") != "" || string(r.body) != "{\"success\":true}\n" {
			t.Fatalf("redeploy: %q %s", r.header.Get("X-Org-Version"), r.body)
		}
		if after := h.must(200, "GET", "/org/acme", nil).version(t); after != v {
			t.Fatalf("redeploy bumped the version %s → %s", v, after)
		}
		h.expectError(404, "POST", "/org/nobody/redeploy", nil, "organisation not found")
		h.settled("acme")
	})
}

// TestUnexpectedFailureIs500: when the database fails under a request, the
// answer is a 500 whose body names the cause and the request id, never a
// panic or a lost connection.
func TestUnexpectedFailureIs500(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.org("acme", "10.0.0.0/8")
		if err := h.store.Close(); err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", h.srv.URL+"/org/acme/overrides", nil)
		req.Header.Set("X-Request-ID", "req-500")
		h.authorize(req)
		resp, err := h.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Error     string `json:"error"`
			Detail    string `json:"detail"`
			RequestID string `json:"request_id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 500 || body.Error == "" || body.Detail == "" || body.RequestID != "req-500" ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%d %+v", resp.StatusCode, body)
		}
	})
}

// TestDeleteMissingOverrideVersion: a batch whose only item deletes a CIDR
// that does not exist answers the version unchanged, as DELETE of that
// CIDR does; deleting one that exists bumps it in either form.
func TestDeleteMissingOverrideVersion(t *testing.T) {
	eachDB(t, func(t *testing.T, h *harness) {
		h.must(200, "PUT", "/org/acme", nil)
		missing := `{"data":[{"cidr":"10.0.0.0/24","delete":true}]}`
		if v := h.must(204, "DELETE", "/org/acme/overrides?cidr=10.0.0.0/24", nil).version(t); v != "1" {
			t.Fatalf("DELETE of a missing CIDR: version %s, want 1", v)
		}
		if v := h.must(200, "POST", "/org/acme/overrides/batch", missing).version(t); v != "1" {
			t.Fatalf("batch deleting a missing CIDR: version %s, want 1", v)
		}
		h.must(200, "POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.0/24"})
		if v := h.must(200, "POST", "/org/acme/overrides/batch", missing).version(t); v != "3" {
			t.Fatalf("batch deleting an existing CIDR: version %s, want 3", v)
		}
	})
}
