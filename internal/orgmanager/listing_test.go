package orgmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// The callers of these tests, by name: what each one's token is made
// with. newAccessHarness makes the tokens with the harness's real token
// service; requests carry them to the real guard.
var testCallers = map[string]access.NewToken{
	"admin":       {Name: "ops", Role: access.RoleAdmin},
	"acme-admin":  {Name: "acme portal", Role: access.RoleOrgAdmin, Org: "acme"},
	"acme-viewer": {Name: "acme reader", Role: access.RoleOrgViewer, Org: "acme"},
	"beta-admin":  {Name: "beta portal", Role: access.RoleOrgAdmin, Org: "beta"},
	"ghost-admin": {Name: "ghost", Role: access.RoleOrgAdmin, Org: "ghost"},
}

// testCaller is one caller's token: the secret a request carries, and the
// token as the token service made it (its id, name and role are what an
// audit record names).
type testCaller struct {
	secret string
	token  access.Token
}

// accessHarness is the harness (the real guard, and the audit inside it
// as the orgmanager wires it) with a token for each of testCallers.
type accessHarness struct {
	*harness
	callers map[string]testCaller
}

func newAccessHarness(t *testing.T, store *orgstore.Store) *accessHarness {
	t.Helper()
	h := newHarness(t, store, deploy.Discard{})
	return &accessHarness{harness: h, callers: makeTestCallers(t, h.tokens)}
}

// makeTestCallers creates testCallers' tokens, as a platform admin would.
func makeTestCallers(t testing.TB, tokens *access.Tokens) map[string]testCaller {
	t.Helper()
	out := map[string]testCaller{}
	for name, nt := range testCallers {
		tok, secret, err := tokens.Create(context.Background(), access.Principal{Role: access.RoleAdmin}, nt)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = testCaller{secret: secret, token: tok}
	}
	return out
}

func eachAccessDB(t *testing.T, fn func(t *testing.T, h *accessHarness)) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		fn(t, newAccessHarness(t, open(t)))
	})
}

// call sends a request with caller's token ("" for none) and checks the
// invariants of every answer: a request id, JSON, never a 5xx, an
// {"error": …} with every 4xx.
func (h *accessHarness) call(caller, method, path string, body any) *response {
	h.t.Helper()
	secret := ""
	if caller != "" {
		c, ok := h.callers[caller]
		if !ok {
			h.t.Fatalf("no caller %q", caller)
		}
		secret = c.secret
	}
	r := h.doAs(secret, method, path, body)
	if r.status >= 400 {
		r.errorText(h.t)
	}
	return r
}

func (h *accessHarness) mustCall(want int, caller, method, path string, body any) *response {
	h.t.Helper()
	r := h.call(caller, method, path, body)
	if r.status != want {
		h.t.Fatalf("%s %s as %q: %d, want %d: %s", method, path, caller, r.status, want, r.body)
	}
	return r
}

type auditResponse struct {
	Records []auditRecordBody `json:"records"`
	Next    string            `json:"next"`
}

func (h *accessHarness) audit(caller, path string) auditResponse {
	h.t.Helper()
	var a auditResponse
	h.mustCall(200, caller, "GET", path, nil).decode(h.t, &a)
	if a.Records == nil {
		h.t.Fatalf("GET %s: records is null, not a list", path)
	}
	return a
}

// TestAuditRecordsEveryKindOfWrite: each write of the API, successful or
// refused, leaves one record with the caller, the version the response
// carried and its request id; reads leave none.
func TestAuditRecordsEveryKindOfWrite(t *testing.T) {
	eachAccessDB(t, func(t *testing.T, h *accessHarness) {
		batch := map[string]any{"data": []any{map[string]any{"cidr": "10.2.0.0/16"}, map[string]any{"cidr": "10.1.0.0/16", "delete": true}}}
		writes := []struct {
			caller, method, path string
			body                 any
			status               int
			org                  string
		}{
			{"admin", "PUT", "/org/acme", nil, 200, "acme"},
			{"admin", "PATCH", "/org/acme", nil, 200, "acme"},
			{"acme-admin", "PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/8"}}, 200, "acme"},
			{"acme-admin", "POST", "/org/acme/overrides", map[string]any{"cidr": "10.1.0.0/16", "username": "u"}, 200, "acme"},
			{"acme-admin", "DELETE", "/org/acme/overrides?cidr=10.1.0.0/16", nil, 204, "acme"},
			{"acme-admin", "POST", "/org/acme/overrides/batch", batch, 200, "acme"},
			{"acme-admin", "PUT", "/org/acme/settings?username=alice", `{"safe_search":true}`, 200, "acme"},
			{"acme-admin", "DELETE", "/org/acme/settings?username=alice", nil, 204, "acme"},
			{"admin", "PUT", "/settings", `{"safe_search":true}`, 200, ""},
			{"admin", "POST", "/org/acme/redeploy", nil, 200, "acme"},
			// Refused writes are recorded as well.
			{"acme-admin", "PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.1/8"}}, 400, "acme"},
			{"acme-admin", "PUT", "/org/acme/settings", `{"filter":1}`, 400, "acme"},
			{"admin", "DELETE", "/org/acme", nil, 400, "acme"},
			{"admin", "POST", "/org/nobody/overrides", map[string]any{"cidr": "10.0.0.0/8"}, 404, "nobody"},
			{"admin", "DELETE", "/org/acme?confirm=true", nil, 204, "acme"},
		}
		for i, w := range writes {
			resp := h.mustCall(w.status, w.caller, w.method, w.path, w.body)
			// A read in between leaves no record.
			h.mustCall(200, "admin", "GET", "/org?limit=1", nil)
			recs := h.audit("admin", "/audit?limit=1").Records
			if len(recs) != 1 {
				t.Fatalf("write %d: %d records", i, len(recs))
			}
			got := recs[0]
			// The caller is the token the guard verified: its id, name
			// and role as the token service made it.
			tok := h.callers[w.caller].token
			version, _ := strconv.ParseInt(resp.header.Get("X-Org-Version"), 10, 64)
			want := auditRecordBody{ID: got.ID, Time: got.Time, TokenID: tok.ID, TokenName: tok.Name, Role: string(tok.Role),
				Method: w.method, Path: w.path, Org: w.org, OrgVersion: version, RequestID: resp.header.Get("X-Request-ID"),
				Status: w.status}
			if got != want {
				t.Errorf("%s %s:\nrecorded %+v\nwant     %+v", w.method, w.path, got, want)
			}
			if (w.status < 300 && w.org != "" && w.method != "POST" && w.method != "DELETE") && version == 0 {
				t.Errorf("%s %s: no version to record", w.method, w.path)
			}
			if _, err := time.Parse(time.RFC3339Nano, got.Time); err != nil {
				t.Errorf("time %q: %v", got.Time, err)
			}
		}
		// A write the guard refuses because it is outside the token's
		// reach (403) is recorded with the caller; one without a valid
		// token (401) and one to a path that does not exist leave no
		// record: the first has no caller to name, the second is no write.
		refused := []struct {
			caller, method, path string
			status               int
			org                  string
		}{
			{"", "PUT", "/org/acme", 401, ""},
			{"beta-admin", "PATCH", "/org/acme", 403, "acme"},
			{"beta-admin", "PUT", "/org/acme/settings", 403, "acme"},
			{"beta-admin", "PUT", "/settings", 403, ""},
			{"admin", "PUT", "/org/acme/nowhere", 404, ""},
		}
		// acme's own tokens died with acme (the last write above): 401.
		// acme-viewer has not been used here, so its row is read now,
		// revoked; a token this process had verified would be refused
		// within the recheck interval (TestRevocationElsewhereApplies).
		h.mustCall(401, "acme-viewer", "GET", "/org/acme", nil)
		forbidden := 0
		for _, w := range refused {
			resp := h.mustCall(w.status, w.caller, w.method, w.path, "{}")
			if w.status != 403 {
				continue
			}
			forbidden++
			got := h.audit("admin", "/audit?limit=1").Records[0]
			tok := h.callers[w.caller].token
			want := auditRecordBody{ID: got.ID, Time: got.Time, TokenID: tok.ID, TokenName: tok.Name, Role: string(tok.Role),
				Method: w.method, Path: w.path, Org: w.org, RequestID: resp.header.Get("X-Request-ID"), Status: w.status}
			if got != want {
				t.Errorf("refused %s %s:\nrecorded %+v\nwant     %+v", w.method, w.path, got, want)
			}
		}
		all := h.audit("admin", "/audit?limit=1000").Records
		if len(all) != len(writes)+forbidden {
			t.Fatalf("%d records for %d writes and %d refused by the guard", len(all), len(writes), forbidden)
		}
		all = all[forbidden:]
		// The versions the organisation went through, as the audit tells.
		var versions []int64
		for _, r := range slices.Backward(all) {
			if r.Org == "acme" && r.Status < 300 && r.OrgVersion > 0 {
				versions = append(versions, r.OrgVersion)
			}
		}
		if !slices.IsSorted(versions) || len(versions) < 7 || versions[0] != 1 {
			t.Errorf("acme's versions in the audit: %v", versions)
		}
	})
}

func TestAuditReads(t *testing.T) {
	eachAccessDB(t, func(t *testing.T, h *accessHarness) {
		for _, org := range []string{"acme", "beta"} {
			h.mustCall(200, "admin", "PUT", "/org/"+org, nil)
		}
		h.mustCall(200, "acme-admin", "PATCH", "/org/acme", nil)
		h.mustCall(200, "beta-admin", "PATCH", "/org/beta", nil)
		h.mustCall(200, "acme-admin", "PATCH", "/org/acme", nil)
		h.mustCall(200, "admin", "PUT", "/settings", `{"paused":false}`)
		// since: the time of the fourth write (PATCH /org/beta), as the
		// audit itself tells it.
		mid := h.audit("admin", "/audit?limit=3").Records[2].Time

		paths := func(a auditResponse) string {
			var out []string
			for _, r := range a.Records {
				out = append(out, r.Method+" "+r.Path)
			}
			return strings.Join(out, ", ")
		}
		since := url.QueryEscape(mid)
		for _, c := range []struct{ caller, path, want string }{
			{"admin", "/audit", "PUT /settings, PATCH /org/acme, PATCH /org/beta, PATCH /org/acme, PUT /org/beta, PUT /org/acme"},
			{"admin", "/audit?since=" + since, "PUT /settings, PATCH /org/acme, PATCH /org/beta"},
			{"admin", "/audit?limit=2", "PUT /settings, PATCH /org/acme"},
			{"admin", "/org/acme/audit", "PATCH /org/acme, PATCH /org/acme, PUT /org/acme"},
			{"acme-viewer", "/org/acme/audit?since=" + since, "PATCH /org/acme"},
			{"acme-admin", "/org/acme/audit?limit=1&since=", "PATCH /org/acme"},
			{"beta-admin", "/org/beta/audit", "PATCH /org/beta, PUT /org/beta"},
			// The audit of an organisation that does not exist (or no
			// longer does) is empty, not a 404.
			{"admin", "/org/gone/audit", ""},
			{"ghost-admin", "/org/ghost/audit", ""},
		} {
			if got := paths(h.audit(c.caller, c.path)); got != c.want {
				t.Errorf("GET %s as %s:\n got %s\nwant %s", c.path, c.caller, got, c.want)
			}
		}
		// Pages by next: every record once.
		var seen []string
		path := "/audit?limit=4"
		for range 5 {
			a := h.audit("admin", path)
			for _, r := range a.Records {
				seen = append(seen, r.Path)
			}
			if a.Next == "" {
				break
			}
			if a.Next != strconv.FormatInt(a.Records[len(a.Records)-1].ID, 10) {
				t.Fatalf("next %q is not the last record's id", a.Next)
			}
			path = "/audit?limit=4&before=" + a.Next
		}
		if len(seen) != 6 {
			t.Errorf("pages gave %d records: %v", len(seen), seen)
		}

		// Who may read which.
		for _, c := range []struct {
			caller, path string
			status       int
		}{
			{"", "/audit", 401},
			{"", "/org/acme/audit", 401},
			{"acme-admin", "/audit", 403},
			{"acme-viewer", "/audit", 403},
			{"acme-admin", "/org/beta/audit", 403},
			{"acme-viewer", "/org/nobody/audit", 403}, // whether it exists or not
			{"beta-admin", "/org/acme/audit?limit=bad", 403},
		} {
			h.mustCall(c.status, c.caller, "GET", c.path, nil)
		}

		// Bad queries are a 400 with the reason.
		for _, c := range []struct{ query, want string }{
			{"since=yesterday", "RFC 3339"},
			{"since=2026-01-02", "RFC 3339"},
			{"limit=0", "limit must be"},
			{"limit=1001", "limit must be"},
			{"limit=ten", "limit must be"},
			{"before=-4", "before must be"},
			{"before=x", "before must be"},
			{"limit=1&limit=2", "more than once"},
			{"org=beta", "unknown parameter"},
			{"since=%ZZ", "invalid query string"},
		} {
			for _, path := range []string{"/audit?", "/org/acme/audit?"} {
				r := h.mustCall(400, "admin", "GET", path+c.query, nil)
				if msg := r.errorText(t); !strings.Contains(msg, c.want) {
					t.Errorf("GET %s%s: %q lacks %q", path, c.query, msg, c.want)
				}
			}
		}
	})
}

type orgsResponse struct {
	Orgs []orgBody `json:"orgs"`
	Next string    `json:"next"`
}

func TestListOrgsAPI(t *testing.T) {
	eachAccessDB(t, func(t *testing.T, h *accessHarness) {
		list := func(caller, query string) orgsResponse {
			t.Helper()
			var o orgsResponse
			h.mustCall(200, caller, "GET", "/org"+query, nil).decode(t, &o)
			if o.Orgs == nil {
				t.Fatalf("GET /org%s: orgs is null, not a list", query)
			}
			return o
		}
		if o := list("admin", ""); len(o.Orgs) != 0 || o.Next != "" {
			t.Fatalf("no organisations: %+v", o)
		}
		ids := []string{"acme", "beta", "a b", "zulu", "ünï", "Acme"}
		for _, id := range ids {
			h.mustCall(200, "admin", "PUT", "/org/"+url.PathEscape(id), nil)
		}
		h.mustCall(200, "admin", "PUT", "/org/acme", nil)
		slices.Sort(ids)
		var got []string
		query := "?limit=4"
		for range 5 {
			o := list("admin", query)
			for _, b := range o.Orgs {
				got = append(got, b.OrgID)
				if b.OrgID == "acme" && b.Version != 2 {
					t.Errorf("acme at version %d", b.Version)
				}
				if _, err := time.Parse(time.RFC3339Nano, b.CreatedAt); err != nil {
					t.Errorf("created_at %q", b.CreatedAt)
				}
			}
			if o.Next == "" {
				break
			}
			query = "?limit=4&after=" + url.QueryEscape(o.Next)
		}
		if !slices.Equal(got, ids) {
			t.Fatalf("pages: %q, want %q", got, ids)
		}
		// The default page holds all six.
		if o := list("admin", ""); len(o.Orgs) != len(ids) || o.Next != "" {
			t.Errorf("default page: %d, next %q", len(o.Orgs), o.Next)
		}

		// A scoped caller sees its own organisation only, once it exists.
		for _, c := range []struct {
			caller, query string
			want          []string
		}{
			{"acme-admin", "", []string{"acme"}},
			{"acme-viewer", "?limit=1", []string{"acme"}},
			{"acme-viewer", "?after=Acme", []string{"acme"}},
			{"acme-viewer", "?after=acme", nil},
			{"acme-admin", "?after=zzz", nil},
			{"ghost-admin", "", nil},
		} {
			o := list(c.caller, c.query)
			var names []string
			for _, b := range o.Orgs {
				names = append(names, b.OrgID)
			}
			if !slices.Equal(names, c.want) || o.Next != "" {
				t.Errorf("GET /org%s as %s: %q next %q, want %q", c.query, c.caller, names, o.Next, c.want)
			}
		}
		h.mustCall(401, "", "GET", "/org", nil)
		for _, c := range []struct{ query, want string }{
			{"?limit=0", "limit must be"},
			{"?limit=5000", "limit must be"},
			{"?after=a%2Fb", "after must be an organisation id"},
			{"?after=%00", "after must be an organisation id"},
			{"?after=x&after=y", "more than once"},
			{"?cursor=x", "unknown parameter"},
		} {
			r := h.mustCall(400, "admin", "GET", "/org"+c.query, nil)
			if msg := r.errorText(t); !strings.Contains(msg, c.want) {
				t.Errorf("GET /org%s: %q lacks %q", c.query, msg, c.want)
			}
		}
		// Only GET: writes to /org are a 405 (and recorded as a refusal).
		h.mustCall(405, "admin", "POST", "/org", nil)
	})
}

type settingsListResponse struct {
	Documents []struct {
		Scope          string `json:"scope"`
		Value          string `json:"value"`
		Profile        *int   `json:"profile"`
		Query          string `json:"query"`
		Size           int64  `json:"size"`
		SelectsProfile *int   `json:"selects_profile"`
	} `json:"documents"`
}

func TestSettingsList(t *testing.T) {
	eachAccessDB(t, func(t *testing.T, h *accessHarness) {
		h.mustCall(200, "admin", "PUT", "/org/acme", nil)
		var empty settingsListResponse
		h.mustCall(200, "acme-viewer", "GET", "/org/acme/settings?list=1", nil).decode(t, &empty)
		if empty.Documents == nil || len(empty.Documents) != 0 {
			t.Fatalf("no documents: %s", h.mustCall(200, "admin", "GET", "/org/acme/settings?list=1", nil).body)
		}
		docs := map[string]string{
			"":                       `{"profile":3}`,
			"profile=3":              `{"blocked_categories":[1,2]}`,
			"location=hq%2Fnorth":    `{"safe_search":true}`,
			"username=alice":         `{"profile":3,"paused":true}`,
			"deviceid=mac%3A01%3A02": `{"filtering":false}`,
		}
		for q, d := range docs {
			h.mustCall(200, "acme-admin", "PUT", "/org/acme/settings?"+q, d)
		}
		r := h.mustCall(200, "acme-viewer", "GET", "/org/acme/settings?list=1", nil)
		if r.version(t) != strconv.Itoa(1+len(docs)) {
			t.Errorf("X-Org-Version %s", r.version(t))
		}
		var l settingsListResponse
		r.decode(t, &l)
		var scopes []string
		for _, d := range l.Documents {
			scopes = append(scopes, d.Scope+":"+d.Value)
			// The query reads the document listed, of the size listed.
			doc := h.mustCall(200, "acme-viewer", "GET", "/org/acme/settings?"+d.Query, nil)
			if int64(len(bytes.TrimSuffix(doc.body, []byte("\n")))) != d.Size {
				t.Errorf("%s: size %d, document %q", d.Query, d.Size, doc.body)
			}
			var sel struct{ Profile *int }
			doc.decode(t, &sel)
			if (sel.Profile == nil) != (d.SelectsProfile == nil) || (sel.Profile != nil && *sel.Profile != *d.SelectsProfile) {
				t.Errorf("%s: selects_profile %v, document %s", d.Query, d.SelectsProfile, doc.body)
			}
			if (d.Scope == "profile") != (d.Profile != nil) {
				t.Errorf("%s: profile %v", d.Query, d.Profile)
			}
		}
		if want := []string{"org:", "profile:", "location:hq/north", "username:alice", "deviceid:mac:01:02"}; !slices.Equal(scopes, want) {
			t.Errorf("scopes %q, want %q", scopes, want)
		}

		// Who may list which.
		h.mustCall(401, "", "GET", "/org/acme/settings?list=1", nil)
		h.mustCall(403, "beta-admin", "GET", "/org/acme/settings?list=1", nil)
		h.mustCall(403, "beta-admin", "GET", "/org/nobody/settings?list=1", nil)
		h.mustCall(404, "admin", "GET", "/org/nobody/settings?list=1", nil)
		h.mustCall(200, "admin", "GET", "/org/acme/settings?list=true", nil)
		for _, q := range []string{"list=1&username=alice", "list=0", "list=", "list=1&list=1", "profile=3&list=1"} {
			h.mustCall(400, "admin", "GET", "/org/acme/settings?"+q, nil)
		}
		// Without list, GET /org/{org}/settings is what it was: one
		// document, or the same 400s and 404s.
		if got := h.mustCall(200, "admin", "GET", "/org/acme/settings?username=alice", nil).body; string(got) != `{"paused":true,"profile":3}`+"\n" {
			t.Errorf("one document: %s", got)
		}
		h.mustCall(404, "admin", "GET", "/org/acme/settings?username=bob", nil)
		h.mustCall(400, "admin", "GET", "/org/acme/settings?x=%ZZ", nil)
		h.mustCall(400, "admin", "GET", "/org/acme/settings?lists=1", nil)
	})
}

// FuzzListingQueries: the query parsers of the listings and the audit
// never panic, and what they accept is within bounds; through the router
// (the real guard and audit, a real SQLite store, the admin's token) every
// query is answered 200 or 400, never a 500.
func FuzzListingQueries(f *testing.F) {
	for _, s := range []string{"", "limit=5", "after=acme&limit=1000", "since=2026-01-02T15:04:05Z&limit=10&before=3",
		"since=2026-01-02T15:04:05.123456789%2B02:00", "limit=-1", "limit=1e3", "after=%00", "after=a%2Fb",
		"before=99999999999999999999", "since=%ZZ", "list=1", "list=1&username=x", "a=1;b=2", "limit=1&limit=1"} {
		f.Add(s)
	}
	store := storetest.Open(f, storetest.SQLite)
	h := newHarness(f, store, deploy.Discard{})
	h.org("acme")
	f.Fuzz(func(t *testing.T, raw string) {
		if q, err := parseOrgsQuery(raw); err == nil {
			if q.Limit < 1 || q.Limit > maxPageSize || (q.After != "" && identity.ValidateOrg(q.After) != nil) {
				t.Fatalf("orgs %q: %+v", raw, q)
			}
		}
		if q, err := parseAuditQuery(raw); err == nil {
			if q.Limit < 1 || q.Limit > maxPageSize || q.Before < 0 || (!q.Since.IsZero() && q.Since.Location() != time.UTC) {
				t.Fatalf("audit %q: %+v", raw, q)
			}
		}
		_ = parseListQuery(raw)
		if strings.ContainsAny(raw, " #\x7f") || strings.ContainsFunc(raw, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
			return // not a request target a client can send
		}
		for _, path := range []string{"/org", "/audit", "/org/acme/audit", "/org/acme/settings"} {
			target := path + "?" + raw
			if path == "/org/acme/settings" {
				target = path + "?list=1&" + raw
			}
			req := httptest.NewRequest("GET", target, nil)
			h.authorize(req)
			rec := httptest.NewRecorder()
			h.router.ServeHTTP(rec, req)
			if rec.Code != 200 && rec.Code != 400 {
				t.Fatalf("GET %s: %d %s", target, rec.Code, rec.Body)
			}
			if rec.Code == 400 && !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("GET %s: 400 body %q", target, rec.Body)
			}
		}
	})
}
