package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/console"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/settings"
)

func must(t *testing.T, a answer, status int, contains ...string) answer {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d; body:\n%s", a.status, status, a.body)
	}
	for _, s := range contains {
		if !strings.Contains(a.body, s) {
			t.Fatalf("body lacks %q:\n%s", s, a.body)
		}
	}
	return a
}

func TestSignInAndOut(t *testing.T) {
	e := newEnv(t, openSQLite(t))
	b := e.browser()

	// A page without a session sends the browser to sign in, keeping
	// where it was going.
	a := b.get("/ui/orgs/acme/overrides")
	if a.status != http.StatusSeeOther || a.location != "/ui/signin?next="+url.QueryEscape("/ui/orgs/acme/overrides") {
		t.Fatalf("unauthenticated GET: %d %q", a.status, a.location)
	}
	must(t, b.get("/ui/signin"), http.StatusOK, `<label for="token">`)

	// The sign-in form needs its CSRF value.
	must(t, b.postRaw("/ui/signin", url.Values{"token": {adminSecret}}), http.StatusForbidden, "sign in again")
	must(t, b.get("/ui/signin"), http.StatusOK)
	must(t, b.post("/ui/signin", url.Values{"token": {"wrong"}}), http.StatusUnauthorized, "not valid")

	b.get("/ui/signin")
	a = b.post("/ui/signin", url.Values{"token": {adminSecret}, "next": {"/ui/tokens"}})
	if a.status != http.StatusSeeOther || a.location != "/ui/tokens" {
		t.Fatalf("sign-in: %d %q", a.status, a.location)
	}
	var sc *http.Cookie
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == "svcpf_session" && c.Value != "" {
			sc = c
		}
	}
	if sc == nil || !sc.HttpOnly || sc.SameSite != http.SameSiteStrictMode || sc.MaxAge != 12*3600 || sc.Path != "/ui/" {
		t.Fatalf("session cookie: %+v", sc)
	}
	if strings.Contains(sc.Value, adminSecret) {
		t.Fatal("the cookie carries the token")
	}
	must(t, b.get("/ui/orgs"), http.StatusOK, "Organisations", "bootstrap (admin)")

	// Sign-out needs the CSRF value too, then the session is gone.
	must(t, b.post("/ui/signout", url.Values{"csrf": {"forged"}}), http.StatusForbidden, "CSRF")
	b.get("/ui/orgs")
	a = b.post("/ui/signout", url.Values{})
	if a.status != http.StatusSeeOther || a.location != "/ui/signin" {
		t.Fatalf("sign-out: %d %q", a.status, a.location)
	}
	if a := b.get("/ui/orgs"); a.status != http.StatusSeeOther {
		t.Fatalf("after sign-out: %d", a.status)
	}
	// A form sent after the session ended: 401 and the sign-in form.
	must(t, b.post("/ui/orgs", url.Values{"org": {"late"}}), http.StatusUnauthorized, "session has ended", `<label for="token">`)
	// Neither the token nor the session id reaches the log, which has the
	// sign-in and every request.
	if l := e.logs.String(); !strings.Contains(l, "console sign-in") || strings.Contains(l, adminSecret) || strings.Contains(l, sc.Value) {
		t.Fatalf("log:\n%s", l)
	}
	// An off-site next is dropped.
	b.get("/ui/signin")
	if a := b.post("/ui/signin", url.Values{"token": {adminSecret}, "next": {"https://evil.example/ui/"}}); a.location != "/ui/orgs" {
		t.Fatalf("next kept: %q", a.location)
	}
}

// TestRevokedTokenEndsSession: the authenticator is asked on every
// request, so a token revoked elsewhere ends its console sessions.
func TestRevokedTokenEndsSession(t *testing.T) {
	store := openSQLite(t)
	e := newEnv(t, store)
	if _, err := store.PutOrg(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn(acmeSecret)
	must(t, b.get("/ui/orgs/acme/overrides"), http.StatusOK)
	admin := e.browser()
	admin.signIn(adminSecret)
	admin.get("/ui/tokens")
	a := admin.post("/ui/tokens/revoke", url.Values{"id": {acmeID}})
	if a.status != http.StatusSeeOther {
		t.Fatalf("revoke: %d %s", a.status, a.body)
	}
	if a := b.get("/ui/orgs/acme/overrides"); a.status != http.StatusSeeOther || !strings.HasPrefix(a.location, "/ui/signin") {
		t.Fatalf("revoked token still signed in: %d %q", a.status, a.location)
	}
}

func TestOrganisationsPrefixesOverrides(t *testing.T) {
	store := openSQLite(t)
	e := newEnv(t, store)
	ctx := context.Background()
	b := e.browser()
	b.signIn(adminSecret)

	// Bad input: the form again with the message by the field, nothing
	// written.
	must(t, b.post("/ui/orgs", url.Values{"org": {"bad/org"}}), http.StatusBadRequest, `class="field-error" id="org-error"`)
	if orgs, _, _ := store.ListOrgs(ctx, "", 10); len(orgs) != 0 {
		t.Fatalf("a refused org was written: %v", orgs)
	}
	a := b.post("/ui/orgs", url.Values{"org": {"acme"}})
	if a.status != http.StatusSeeOther || a.location != "/ui/orgs/acme?done=organisation+acme+saved" {
		t.Fatalf("create: %d %q", a.status, a.location)
	}
	must(t, b.get("/ui/orgs"), http.StatusOK, `href="/ui/orgs/acme"`)

	// Prefixes: a malformed CIDR is the API's 400 with its words.
	b.get("/ui/orgs/acme")
	must(t, b.post("/ui/orgs/acme/prefixes", url.Values{"add": {"10.0.0.0/8\n10.1.0.1/16"}}), http.StatusBadRequest, "add: ", `id="add-error"`)
	if _, ps, _ := store.Prefixes(ctx, "acme"); len(ps) != 0 {
		t.Fatalf("half a prefix patch was written: %v", ps)
	}
	if a := b.post("/ui/orgs/acme/prefixes", url.Values{"add": {"10.0.0.0/8"}}); a.status != http.StatusSeeOther {
		t.Fatalf("prefixes: %d %s", a.status, a.body)
	}
	must(t, b.get("/ui/orgs/acme"), http.StatusOK, "<code>10.0.0.0/8</code>")
	// Another organisation's overlapping prefix: the API's 422.
	b.post("/ui/orgs", url.Values{"org": {"other"}})
	b.get("/ui/orgs/other")
	must(t, b.post("/ui/orgs/other/prefixes", url.Values{"add": {"10.1.0.0/16"}}), http.StatusUnprocessableEntity, "overlaps")

	// Overrides.
	b.get("/ui/orgs/acme/overrides")
	must(t, b.post("/ui/orgs/acme/overrides", url.Values{"cidr": {"10.0.0.1/8"}}), http.StatusBadRequest, `id="cidr-error"`)
	must(t, b.post("/ui/orgs/acme/overrides", url.Values{"cidr": {"10.0.0.0/24"}, "meta": {`"x"`}}), http.StatusBadRequest, "meta must be a JSON object")
	if a := b.post("/ui/orgs/acme/overrides", url.Values{"cidr": {"10.0.0.0/24"}, "username": {"alice"}, "meta": {`{"k":1}`}}); a.status != http.StatusSeeOther {
		t.Fatalf("override: %d %s", a.status, a.body)
	}
	must(t, b.get("/ui/orgs/acme/overrides"), http.StatusOK, "Overrides: 1.", "<code>10.0.0.0/24</code>", "alice", "active")
	must(t, b.get("/ui/orgs/acme/overrides/edit?cidr=10.0.0.0/24"), http.StatusOK, `value="alice"`)

	// CSV: one bad row and nothing is imported.
	csv := "cidr,username\n10.0.1.0/24,bob\n10.0.2.1/24,carol\n"
	must(t, b.post("/ui/orgs/acme/overrides/import", url.Values{"csv": {csv}}), http.StatusBadRequest, "line 3", "nothing was imported")
	if v, _ := store.ReadOverrides(ctx, "acme", orgstore.CIDROnly); len(v.Overrides) != 1 {
		t.Fatalf("a refused import wrote %d overrides", len(v.Overrides))
	}
	if a := b.post("/ui/orgs/acme/overrides/import", url.Values{"csv": {"10.0.1.0/24,bob\n10.0.2.0/24,carol\n10.0.0.0/24,,,,,1\n"}}); a.status != http.StatusSeeOther {
		t.Fatalf("import: %d %s", a.status, a.body)
	}
	must(t, b.get("/ui/orgs/acme/overrides"), http.StatusOK, "Overrides: 2.", "bob", "carol")

	// Delete an override, then the organisation after its confirmation.
	if a := b.post("/ui/orgs/acme/overrides/delete", url.Values{"cidr": {"10.0.1.0/24"}}); a.status != http.StatusSeeOther {
		t.Fatalf("delete override: %d", a.status)
	}
	must(t, b.get("/ui/orgs/acme/delete"), http.StatusOK, "cannot be undone")
	must(t, b.post("/ui/orgs/acme/delete", url.Values{"confirm": {"acm"}}), http.StatusBadRequest, `id="confirm-error"`)
	if _, err := store.GetOrg(ctx, "acme"); err != nil {
		t.Fatal("deleted without confirmation")
	}
	if a := b.post("/ui/orgs/acme/delete", url.Values{"confirm": {"acme"}}); a.status != http.StatusSeeOther {
		t.Fatalf("delete org: %d", a.status)
	}
	if _, err := store.GetOrg(ctx, "acme"); err == nil {
		t.Fatal("organisation still there")
	}
	// Every write left an audit record in the store, under the token the
	// console signed in with.
	recs, err := store.AuditRecords(ctx, access.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 7 {
		t.Fatalf("%d audit records", len(recs))
	}
	deleted := false
	for _, r := range recs {
		if r.TokenID != adminID || r.TokenName != "bootstrap" || r.Role != access.RoleAdmin || r.Method != http.MethodPost ||
			!strings.HasPrefix(r.Path, "/ui/orgs") || r.RequestID == "" {
			t.Errorf("audit record %+v", r)
		}
		deleted = deleted || (r.Path == "/ui/orgs/acme/delete" && r.Org == "acme" && r.Status == http.StatusSeeOther)
	}
	if !deleted {
		t.Errorf("no record of the organisation's deletion in %+v", recs)
	}
}

func TestOverridesPagination(t *testing.T) {
	store := openSQLite(t)
	e := newEnv(t, store)
	seed(t, store, 250, 0)
	b := e.browser()
	b.signIn(adminSecret)
	a := must(t, b.get("/ui/orgs/acme/overrides"), http.StatusOK, "Overrides: 250.", "10.0.0.0/24", "Next page")
	if strings.Contains(a.body, "10.0.100.0/24") {
		t.Fatal("first page too long")
	}
	a = must(t, b.get("/ui/orgs/acme/overrides?after=10.0.99.0/24"), http.StatusOK, "10.0.100.0/24", "First page")
	if strings.Contains(a.body, ">10.0.99.0/24<") {
		t.Fatal("after is not exclusive")
	}
	must(t, b.get("/ui/orgs/acme/overrides?after=nonsense"), http.StatusBadRequest)
}

func TestSettingsAndEffective(t *testing.T) {
	store := openSQLite(t)
	e := newEnv(t, store)
	b := e.browser()
	b.signIn(acmeSecret)
	if _, err := store.PutOrg(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	b.get("/ui/orgs/acme/settings")
	must(t, b.post("/ui/orgs/acme/settings", url.Values{"scope": {"username"}, "value": {""}, "document": {"{}"}}), http.StatusBadRequest, "username must not be empty")
	must(t, b.post("/ui/orgs/acme/settings", url.Values{"scope": {"username"}, "value": {"alice"}, "document": {`{"blocked_categories":["x"]}`}}),
		http.StatusBadRequest, `id="document-error"`, "blocked_categories")
	if a := b.post("/ui/orgs/acme/settings", url.Values{"scope": {"username"}, "value": {"alice"}, "document": {`{"blocked_categories":[3]}`}}); a.status != http.StatusSeeOther {
		t.Fatalf("settings: %d %s", a.status, a.body)
	}
	if a := b.post("/ui/orgs/acme/settings", url.Values{"scope": {"org"}, "document": {`{"safe_search":true}`}}); a.status != http.StatusSeeOther {
		t.Fatalf("org settings: %d %s", a.status, a.body)
	}
	must(t, b.get("/ui/orgs/acme/settings"), http.StatusOK, "username:alice", "Settings documents: 2.")
	must(t, b.get("/ui/orgs/acme/settings?scope=username&value=alice"), http.StatusOK, "&#34;blocked_categories&#34;: [")
	a := must(t, b.get("/ui/orgs/acme/effective?username=alice"), http.StatusOK, "<td>blocked_categories</td><td><code>[3]</code></td><td>username:alice</td>",
		"<td>safe_search</td><td><code>true</code></td><td>org:acme</td>")
	if !strings.Contains(a.body, "<td>filtering</td><td><code>true</code></td><td>default</td>") {
		t.Fatalf("default origin missing:\n%s", a.body)
	}
	must(t, b.get("/ui/orgs/acme/effective?profile=x"), http.StatusBadRequest, `id="profile-error"`)
	if a := b.post("/ui/orgs/acme/settings/delete", url.Values{"scope": {"username"}, "value": {"alice"}}); a.status != http.StatusSeeOther {
		t.Fatalf("delete settings: %d", a.status)
	}
	if _, _, err := store.GetSettings(context.Background(), "acme", settings.Scope{Kind: settings.ScopeUsername, Value: "alice"}); err == nil {
		t.Fatal("settings not deleted")
	}
}

func TestWhy(t *testing.T) {
	e := newEnv(t, openSQLite(t))
	b := e.browser()
	b.signIn(acmeSecret)
	must(t, b.get("/ui/orgs/acme/why"), http.StatusOK, `<label for="domain">`)
	must(t, b.get("/ui/orgs/acme/why?domain=www.example.com"), http.StatusBadRequest, `id="ip-error"`)
	must(t, b.get("/ui/orgs/acme/why?domain=bad..name&ip=10.0.0.1"), http.StatusBadRequest)
	must(t, b.get("/ui/orgs/acme/why?domain=www.example.com&ip=10.0.0.1"), http.StatusOK, `id="verdict"`, "allow", "<strong>identity</strong>")
}

// TestScopedToken: an org token sees its organisation only; others are 403
// whether they exist or not, and a viewer cannot write.
func TestScopedToken(t *testing.T) {
	store := openSQLite(t)
	e := newEnv(t, store)
	ctx := context.Background()
	for _, o := range []string{"acme", "other"} {
		if _, err := store.PutOrg(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	b := e.browser()
	b.signIn(acmeSecret)
	a := must(t, b.get("/ui/orgs"), http.StatusOK, `href="/ui/orgs/acme"`)
	if strings.Contains(a.body, "other") || strings.Contains(a.body, `action="/ui/orgs"`) {
		t.Fatal("a scoped token sees the organisation list or its create form")
	}
	for _, p := range []string{"/ui/orgs/other", "/ui/orgs/other/overrides", "/ui/orgs/nosuch/settings", "/ui/orgs/other/why", "/ui/audit"} {
		must(t, b.get(p), http.StatusForbidden, "this token may not do that")
	}
	b.get("/ui/orgs/acme")
	must(t, b.post("/ui/orgs/other/prefixes", url.Values{"add": {"192.0.2.0/24"}}), http.StatusForbidden)
	must(t, b.post("/ui/orgs", url.Values{"org": {"other"}}), http.StatusForbidden)

	v := e.browser()
	v.signIn(viewerSecret)
	must(t, v.get("/ui/orgs/acme/overrides"), http.StatusOK)
	must(t, v.post("/ui/orgs/acme/overrides", url.Values{"cidr": {"192.0.2.0/24"}}), http.StatusForbidden)
	if ov, _ := store.ReadOverrides(ctx, "acme", orgstore.CIDROnly); len(ov.Overrides) != 0 {
		t.Fatal("a viewer wrote")
	}
}

// TestCSRF: a POST without the session's CSRF value is refused with 403
// and the page to send again, and writes nothing.
func TestCSRF(t *testing.T) {
	store := openSQLite(t)
	e := newEnv(t, store)
	b := e.browser()
	b.signIn(adminSecret)
	for _, form := range []url.Values{{"org": {"acme"}}, {"org": {"acme"}, "csrf": {"x"}}} {
		must(t, b.postRaw("/ui/orgs", form), http.StatusForbidden, "CSRF", `href="/ui/orgs"`)
	}
	if orgs, _, _ := store.ListOrgs(context.Background(), "", 10); len(orgs) != 0 {
		t.Fatal("a CSRF-less POST wrote")
	}
}

func TestTokensAndAudit(t *testing.T) {
	e := newEnv(t, openSQLite(t))
	b := e.browser()
	b.signIn(adminSecret)
	b.get("/ui/tokens")
	must(t, b.post("/ui/tokens", url.Values{"role": {"org-admin"}}), http.StatusBadRequest, `id="org-error"`)
	must(t, b.post("/ui/tokens", url.Values{"role": {"root"}}), http.StatusBadRequest, `id="role-error"`)
	must(t, b.post("/ui/tokens", url.Values{"role": {"org-viewer"}, "org": {"acme"}, "expires": {"-1h"}}), http.StatusBadRequest, `id="expires-error"`)
	a := must(t, b.post("/ui/tokens", url.Values{"role": {"org-viewer"}, "org": {"acme"}, "name": {"ci"}}), http.StatusOK, "shown once", "svcpf_")
	// The token shown is one the token service verifies.
	shown := regexp.MustCompile(`svcpf_[0-9a-f]{16}_[0-9a-f]{64}`).FindString(a.body)
	if p, err := e.tokens.Authenticate(context.Background(), shown); err != nil || p.Role != access.RoleOrgViewer || p.Org != "acme" || p.Name != "ci" {
		t.Fatalf("the token shown (%q): %+v %v", shown, p, err)
	}
	must(t, b.get("/ui/tokens"), http.StatusOK, "ci", "org-viewer")
	must(t, b.get("/ui/audit"), http.StatusOK, "/ui/tokens")
}

func TestStaticAssets(t *testing.T) {
	e := newEnv(t, openSQLite(t))
	b := e.browser()
	total := 0
	for _, f := range []string{"htmx.min.js", "console.css"} {
		a := b.get("/ui/static/" + f)
		if a.status != http.StatusOK || len(a.body) == 0 {
			t.Fatalf("%s: %d", f, a.status)
		}
		total += len(a.body)
	}
	if total > 150<<10 {
		t.Fatalf("static assets are %d bytes, over 150 KiB", total)
	}
	if a := b.get("/ui/static/nope.js"); a.status != http.StatusNotFound {
		t.Fatalf("missing asset: %d", a.status)
	}
}

// seed makes organisation acme with n overrides (10.x.y.0/24, then
// 11.x.y.0/24 past 65 536) and m
// username settings documents.
func seed(t testing.TB, store *orgstore.Store, n, m int) {
	t.Helper()
	ctx := context.Background()
	if _, err := store.PutOrg(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.UpdatePrefixes(ctx, "acme", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, nil); err != nil {
		t.Fatal(err)
	}
	var ops []orgstore.BatchOp
	flush := func() {
		if _, err := store.ApplyBatch(ctx, "acme", ops); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	for i := range n {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10 + byte(i>>16), byte(i >> 8), byte(i), 0}), 24)
		o := orgstore.Override{CIDR: p}
		o.Username = fmt.Sprintf("user%d", i)
		ops = append(ops, orgstore.BatchOp{Override: o})
		if len(ops) == 10_000 {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
	for i := range m {
		d, _ := settings.Parse([]byte(`{"blocked_categories":[3]}`))
		if _, err := store.PutSettings(ctx, "acme", settings.Scope{Kind: settings.ScopeUsername, Value: fmt.Sprintf("user%d", i)}, d); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGlobalSettings(t *testing.T) {
	store := openSQLite(t)
	e := newEnv(t, store)
	ctx := context.Background()
	v := e.browser()
	v.signIn(acmeSecret)
	must(t, v.get("/ui/settings"), http.StatusForbidden)
	must(t, v.post("/ui/settings", url.Values{"document": {"{}"}}), http.StatusForbidden)

	b := e.browser()
	b.signIn(adminSecret)
	must(t, b.get("/ui/settings"), http.StatusOK, "No global document")
	must(t, b.post("/ui/settings", url.Values{"document": {`{"blocklist":[1]}`}}), http.StatusBadRequest, `id="document-error"`, "blocklist")
	if g, _ := store.GlobalSettings(ctx); g.Doc != nil {
		t.Fatal("a refused document was written")
	}
	if a := b.post("/ui/settings", url.Values{"document": {`{"blocklist":["bad.example"]}`}}); a.status != http.StatusSeeOther {
		t.Fatalf("global: %d %s", a.status, a.body)
	}
	must(t, b.get("/ui/settings"), http.StatusOK, "bad.example", "Version 1.")
	if _, err := store.PutOrg(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	must(t, b.get("/ui/orgs/acme/effective?username=x"), http.StatusOK, "<td>blocklist</td><td><code>[&#34;bad.example&#34;]</code></td><td>global</td>")
	if a := b.post("/ui/settings/delete", url.Values{}); a.status != http.StatusSeeOther {
		t.Fatalf("delete: %d", a.status)
	}
	if g, _ := store.GlobalSettings(ctx); g.Doc != nil {
		t.Fatal("not deleted")
	}
}

// statusRecorder notes the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// TestSignInGuard: the guard wraps the sign-in POST and sees its 401s, so
// the access layer's limit on repeated failures applies to the console's
// sign-in as to the API (here a stand-in that refuses after two).
func TestSignInGuard(t *testing.T) {
	failures := 0
	guard := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if failures >= 2 {
				w.Header().Set("Retry-After", "60")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			sr := &statusRecorder{ResponseWriter: w}
			h(sr, r)
			if sr.status == http.StatusUnauthorized {
				failures++
			}
		}
	}
	e := newEnv(t, openSQLite(t), func(c *console.Config) { c.SignInGuard = guard })
	b := e.browser()
	for range 2 {
		b.get("/ui/signin")
		must(t, b.post("/ui/signin", url.Values{"token": {"wrong"}}), http.StatusUnauthorized)
	}
	b.get("/ui/signin")
	if a := b.post("/ui/signin", url.Values{"token": {adminSecret}}); a.status != http.StatusTooManyRequests {
		t.Fatalf("third try: %d", a.status)
	}
}
