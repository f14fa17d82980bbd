package orgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
	"github.com/svc-pf/svc-pf/internal/settings"
)

func doc(t testing.TB, s string) *settings.Document {
	t.Helper()
	d, err := settings.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var (
	orgScope = settings.Scope{Kind: settings.ScopeOrg}
	profile  = func(n int) settings.Scope { return settings.Scope{Kind: settings.ScopeProfile, Profile: n} }
	location = func(v string) settings.Scope { return settings.Scope{Kind: settings.ScopeLocation, Value: v} }
	username = func(v string) settings.Scope { return settings.Scope{Kind: settings.ScopeUsername, Value: v} }
	deviceID = func(v string) settings.Scope { return settings.Scope{Kind: settings.ScopeDeviceID, Value: v} }
)

func TestSettingsLifecycle(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		d := doc(t, `{"blocked_categories": [3, 1], "allowlist": ["Example.COM."], "profile": 2}`)
		const canonical = `{"blocked_categories":[1,3],"allowlist":["example.com"],"profile":2}`

		// A missing organisation, for every method.
		if _, _, err := s.GetSettings(ctx, "acme", orgScope); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("GetSettings(missing org) err = %v", err)
		}
		if _, err := s.PutSettings(ctx, "acme", orgScope, d); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("PutSettings(missing org) err = %v", err)
		}
		if _, err := s.DeleteSettings(ctx, "acme", orgScope); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("DeleteSettings(missing org) err = %v", err)
		}
		if _, _, err := s.ListSettings(ctx, "acme"); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("ListSettings(missing org) err = %v", err)
		}
		if _, err := s.ReadSettingsLayers(ctx, "acme", orgstore.LayerQuery{}); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("ReadSettingsLayers(missing org) err = %v", err)
		}

		must[int64](t)(s.PutOrg(ctx, "acme"))
		for _, sc := range []settings.Scope{orgScope, profile(0), profile(7), location("hq"), username("alice"), deviceID("mac:0a1b")} {
			t.Run(sc.Layer("acme"), func(t *testing.T) {
				v0 := must[orgstore.Org](t)(s.GetOrg(ctx, "acme")).Version
				got, v, err := s.GetSettings(ctx, "acme", sc)
				if !errors.Is(err, orgstore.ErrSettingsNotFound) || errors.Is(err, orgstore.ErrOrgNotFound) || got != nil || v != v0 {
					t.Fatalf("GetSettings(none) = %s, %d, %v; want ErrSettingsNotFound at %d", got, v, err, v0)
				}
				if _, err := s.DeleteSettings(ctx, "acme", sc); !errors.Is(err, orgstore.ErrSettingsNotFound) {
					t.Fatalf("DeleteSettings(none) err = %v", err)
				}
				wantVersion(t, s, "acme", v0) // no bump for nothing
				if v := must[int64](t)(s.PutSettings(ctx, "acme", sc, d)); v != v0+1 {
					t.Fatalf("PutSettings = %d, want %d", v, v0+1)
				}
				got, v, err = s.GetSettings(ctx, "acme", sc)
				if err != nil || string(got) != canonical || v != v0+1 {
					t.Fatalf("GetSettings = %s, %d, %v; want %s at %d", got, v, err, canonical, v0+1)
				}
				if back, err := settings.Parse(got); err != nil || back.String() != canonical {
					t.Fatalf("stored document does not parse back: %v", err)
				}
				// An upsert replaces the document whole.
				if v := must[int64](t)(s.PutSettings(ctx, "acme", sc, doc(t, `{"paused": true}`))); v != v0+2 {
					t.Fatalf("PutSettings(replace) = %d, want %d", v, v0+2)
				}
				if got, _, _ := s.GetSettings(ctx, "acme", sc); string(got) != `{"paused":true}` {
					t.Fatalf("after replace: %s", got)
				}
				if v := must[int64](t)(s.DeleteSettings(ctx, "acme", sc)); v != v0+3 {
					t.Fatalf("DeleteSettings = %d, want %d", v, v0+3)
				}
				if _, _, err := s.GetSettings(ctx, "acme", sc); !errors.Is(err, orgstore.ErrSettingsNotFound) {
					t.Fatalf("GetSettings(deleted) err = %v", err)
				}
				if _, err := s.DeleteSettings(ctx, "acme", sc); !errors.Is(err, orgstore.ErrSettingsNotFound) {
					t.Fatalf("DeleteSettings(again) err = %v", err)
				}
				wantVersion(t, s, "acme", v0+3)
			})
		}
		// Documents of one organisation are not another's.
		must[int64](t)(s.PutOrg(ctx, "other"))
		must[int64](t)(s.PutSettings(ctx, "other", username("alice"), d))
		if _, _, err := s.GetSettings(ctx, "acme", username("alice")); !errors.Is(err, orgstore.ErrSettingsNotFound) {
			t.Fatalf("another organisation's document: %v", err)
		}
	})
}

func TestListSettingsOrder(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		v, list, err := s.ListSettings(ctx, "acme")
		if err != nil || v != 1 || len(list) != 0 {
			t.Fatalf("ListSettings(none) = %d, %v, %v", v, list, err)
		}
		// Written out of order; listed in layer order, profiles by number,
		// values by bytes.
		scopes := []settings.Scope{deviceID("mac:01"), username("bob"), profile(10), location("hq"), username("Alice"),
			profile(2), orgScope, username("alice"), profile(settings.MaxProfile), deviceID("custom:x"), location("branch")}
		for i, sc := range scopes {
			must[int64](t)(s.PutSettings(ctx, "acme", sc, doc(t, fmt.Sprintf(`{"blocked_categories":[%d]}`, i))))
		}
		want := []settings.Scope{orgScope, profile(2), profile(10), profile(settings.MaxProfile), location("branch"), location("hq"),
			username("Alice"), username("alice"), username("bob"), deviceID("custom:x"), deviceID("mac:01")}
		v, list, err = s.ListSettings(ctx, "acme")
		if err != nil || v != int64(1+len(scopes)) {
			t.Fatalf("ListSettings = version %d, %v", v, err)
		}
		var got []settings.Scope
		for _, ss := range list {
			got = append(got, ss.Scope)
			i := slices.Index(scopes, ss.Scope)
			if string(ss.Doc) != fmt.Sprintf(`{"blocked_categories":[%d]}`, i) {
				t.Errorf("%s: document %s", ss.Scope.Layer("acme"), ss.Doc)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("ListSettings order:\n got %v\nwant %v", got, want)
		}
		// The deploy's read gives the same, with the overrides, from one
		// snapshot; without WithSettings it does not read them.
		view := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", orgstore.Identity|orgstore.WithSettings))
		if view.Version != v || !slices.EqualFunc(view.Settings, list, func(a, b orgstore.ScopedSettings) bool {
			return a.Scope == b.Scope && string(a.Doc) == string(b.Doc)
		}) {
			t.Fatalf("ReadOverrides(WithSettings) = version %d, %v", view.Version, view.Settings)
		}
		if view := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", orgstore.Identity)); view.Settings != nil {
			t.Fatalf("ReadOverrides without WithSettings read settings: %v", view.Settings)
		}
	})
}

// TestReadOverridesWithSettingsKeepsDetail: the flag adds the settings and
// changes nothing of the override columns read.
func TestReadOverridesWithSettingsKeepsDetail(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		must[int64](t)(s.UpdatePrefixes(ctx, "acme", pfxs("10.0.0.0/8"), nil))
		must[int64](t)(s.PutOverride(ctx, "acme", orgstore.Override{CIDR: pfx("10.1.0.0/16"),
			Attributes: identity.Attributes{Username: "alice"}, Meta: []byte(`{"trace_id":"t"}`)}))
		must[int64](t)(s.PutSettings(ctx, "acme", username("alice"), doc(t, `{"paused":true}`)))
		for _, c := range []struct {
			d            orgstore.Detail
			user, meta   bool
			withSettings bool
		}{
			{orgstore.CIDROnly, false, false, false},
			{orgstore.CIDROnly | orgstore.WithSettings, false, false, true},
			{orgstore.Identity | orgstore.WithSettings, true, false, true},
			{orgstore.Full | orgstore.WithSettings, true, true, true},
			{orgstore.Full, true, true, false},
		} {
			v := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", c.d))
			o := v.Overrides[0]
			if v.Version != 4 || !slices.Equal(v.Prefixes, pfxs("10.0.0.0/8")) || len(v.Overrides) != 1 || o.CIDR != pfx("10.1.0.0/16") ||
				(o.Username == "alice") != c.user || (o.Meta != nil) != c.meta || (len(v.Settings) == 1) != c.withSettings {
				t.Errorf("detail %#x: %+v", c.d, v)
			}
		}
	})
}

func TestSettingsScopeValidation(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		d := doc(t, `{}`)
		long := strings.Repeat("x", identity.MaxAttributeLen)
		for _, sc := range []settings.Scope{
			profile(-1), profile(settings.MaxProfile + 1),
			{Kind: settings.ScopeOrg, Value: "x"}, {Kind: settings.ScopeOrg, Profile: 1},
			{Kind: settings.ScopeProfile, Profile: 1, Value: "1"},
			{Kind: settings.ScopeUsername, Value: "u", Profile: 1},
			username(""), location(""), deviceID(""),
			username(long + "x"), deviceID("nul\x00"), location("bad\xffutf8"),
			{Kind: 0}, {Kind: 6, Value: "x"},
		} {
			if _, err := s.PutSettings(ctx, "acme", sc, d); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("PutSettings(%+v) err = %v, want ErrInvalidInput", sc, err)
			}
			if _, _, err := s.GetSettings(ctx, "acme", sc); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("GetSettings(%+v) err = %v, want ErrInvalidInput", sc, err)
			}
			if _, err := s.DeleteSettings(ctx, "acme", sc); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("DeleteSettings(%+v) err = %v, want ErrInvalidInput", sc, err)
			}
		}
		wantVersion(t, s, "acme", 1)
		// At the limits, and what overrides accept: any other text.
		for _, sc := range []settings.Scope{profile(0), profile(settings.MaxProfile), username(long), location("tab\there"),
			deviceID("msisdn:+31 6 1234"), username("ünïcode"), username("'; DROP TABLE settings; --")} {
			must[int64](t)(s.PutSettings(ctx, "acme", sc, d))
			if got, _, err := s.GetSettings(ctx, "acme", sc); err != nil || string(got) != "{}" {
				t.Errorf("GetSettings(%.40q) = %s, %v", sc.Value, got, err)
			}
		}
		// An id the store cannot hold does not exist.
		if _, _, err := s.GetSettings(ctx, "a/b", orgScope); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Errorf("GetSettings(bad org) err = %v", err)
		}
		if _, err := s.PutSettings(ctx, "nul\x00", orgScope, d); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Errorf("PutSettings(bad org) err = %v", err)
		}
	})
}

// TestSettingsDocumentsAreCanonical: what is stored is what settings.Parse
// reads back, whatever the caller built; a document Parse would refuse is
// refused.
func TestSettingsDocumentsAreCanonical(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		codes := []uint16{9, 1, 9}
		names := []string{"b.example", "a.example"}
		nets := []netip.Prefix{pfx("10.0.0.0/8"), pfx("::ffff:192.0.2.0/120")}
		built := &settings.Document{BlockedCategories: &codes, Blocklist: &names, BlockedNetworks: &nets}
		must[int64](t)(s.PutSettings(ctx, "acme", orgScope, built))
		const want = `{"blocked_categories":[1,9],"blocklist":["a.example","b.example"],"blocked_networks":["10.0.0.0/8","192.0.2.0/24"]}`
		if got, _, _ := s.GetSettings(ctx, "acme", orgScope); string(got) != want {
			t.Fatalf("stored %s, want %s", got, want)
		}
		must[int64](t)(s.PutGlobalSettings(ctx, built))
		if g := must[orgstore.GlobalSettings](t)(s.GlobalSettings(ctx)); string(g.Doc) != want {
			t.Fatalf("global stored %s, want %s", g.Doc, want)
		}

		bad := []string{"not a name"}
		for _, d := range []*settings.Document{nil, {Action: &settings.Action{Type: "bogus"}}, {Allowlist: &bad}} {
			if _, err := s.PutSettings(ctx, "acme", orgScope, d); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("PutSettings(%v) err = %v, want ErrInvalidInput", d, err)
			}
			if _, err := s.PutGlobalSettings(ctx, d); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("PutGlobalSettings(%v) err = %v, want ErrInvalidInput", d, err)
			}
		}
		var fe *settings.FieldError
		if _, err := s.PutSettings(ctx, "acme", orgScope, &settings.Document{Allowlist: &bad}); !errors.As(err, &fe) || fe.Field != "allowlist[0]" {
			t.Errorf("refusal does not carry the field: %v", err)
		}
		wantVersion(t, s, "acme", 2)
	})
}

func TestGlobalSettings(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		if g := must[orgstore.GlobalSettings](t)(s.GlobalSettings(ctx)); g.Version != 0 || g.Doc != nil {
			t.Fatalf("initial global = %+v", g)
		}
		if _, err := s.DeleteGlobalSettings(ctx); !errors.Is(err, orgstore.ErrSettingsNotFound) {
			t.Fatalf("DeleteGlobalSettings(none) err = %v", err)
		}
		if v := must[int64](t)(s.PutGlobalSettings(ctx, doc(t, `{"safe_search": true}`))); v != 1 {
			t.Fatalf("PutGlobalSettings = %d", v)
		}
		if v := must[int64](t)(s.PutGlobalSettings(ctx, doc(t, `{"paused": false}`))); v != 2 {
			t.Fatalf("PutGlobalSettings(replace) = %d", v)
		}
		if g := must[orgstore.GlobalSettings](t)(s.GlobalSettings(ctx)); g.Version != 2 || string(g.Doc) != `{"paused":false}` {
			t.Fatalf("global = %d %s", g.Version, g.Doc)
		}
		if v := must[int64](t)(s.DeleteGlobalSettings(ctx)); v != 3 {
			t.Fatalf("DeleteGlobalSettings = %d", v)
		}
		if _, err := s.DeleteGlobalSettings(ctx); !errors.Is(err, orgstore.ErrSettingsNotFound) {
			t.Fatalf("DeleteGlobalSettings(again) err = %v", err)
		}
		// The version outlives the document: a later put continues it.
		if g := must[orgstore.GlobalSettings](t)(s.GlobalSettings(ctx)); g.Version != 3 || g.Doc != nil {
			t.Fatalf("after delete global = %+v", g)
		}
		if v := must[int64](t)(s.PutGlobalSettings(ctx, doc(t, `{}`))); v != 4 {
			t.Fatalf("PutGlobalSettings after delete = %d", v)
		}
		// No organisation's version moved.
		wantVersion(t, s, "acme", 1)
	})
}

func TestDeleteOrgDeletesSettings(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		url := storetest.URL(t, dialect)
		s := storetest.OpenConfig(t, orgstore.Config{URL: url})
		for _, org := range []string{"acme", "other"} {
			must[int64](t)(s.PutOrg(ctx, org))
			for _, sc := range []settings.Scope{orgScope, profile(1), username("alice")} {
				must[int64](t)(s.PutSettings(ctx, org, sc, doc(t, `{"paused":true}`)))
			}
		}
		must[int64](t)(s.PutGlobalSettings(ctx, doc(t, `{}`)))
		if err := s.DeleteOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := rawDB(t, dialect, url).QueryRow(`SELECT count(*) FROM settings`).Scan(&n); err != nil || n != 3 {
			t.Fatalf("%d settings rows left (err %v), want the other organisation's 3", n, err)
		}
		must[int64](t)(s.PutOrg(ctx, "acme"))
		if _, list, err := s.ListSettings(ctx, "acme"); err != nil || len(list) != 0 {
			t.Fatalf("re-created organisation has settings %v (%v)", list, err)
		}
		if _, list, _ := s.ListSettings(ctx, "other"); len(list) != 3 {
			t.Fatalf("the other organisation lost settings: %v", list)
		}
		if g := must[orgstore.GlobalSettings](t)(s.GlobalSettings(ctx)); g.Doc == nil {
			t.Fatal("deleting an organisation deleted the global document")
		}
	})
}

func TestReadSettingsLayers(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		put := func(sc settings.Scope, body string) { must[int64](t)(s.PutSettings(ctx, "acme", sc, doc(t, body))) }
		put(orgScope, `{"profile": 1}`)
		for _, n := range []int{1, 2, 3, 4, 5} {
			put(profile(n), fmt.Sprintf(`{"blocked_categories":[%d]}`, n))
		}
		put(location("hq"), `{"profile": 2}`)
		put(username("alice"), `{"safe_search": true}`)
		put(username("bob"), `{"profile": 3}`)
		put(deviceID("mac:01"), `{"profile": 3}`)

		layers := func(q orgstore.LayerQuery) (string, []string) {
			t.Helper()
			l := must[orgstore.SettingsLayers](t)(s.ReadSettingsLayers(ctx, "acme", q))
			if o := must[orgstore.Org](t)(s.GetOrg(ctx, "acme")); l.Version != o.Version {
				t.Fatalf("version %d", l.Version)
			}
			var names []string
			for _, d := range l.Docs {
				names = append(names, d.Scope.Layer("acme"))
			}
			return string(l.Global), names
		}
		for _, c := range []struct {
			q    orgstore.LayerQuery
			want []string
		}{
			{orgstore.LayerQuery{}, []string{"org:acme", "profile:1"}},
			{orgstore.LayerQuery{Attributes: identity.Attributes{Location: "hq", Username: "alice"}},
				[]string{"org:acme", "profile:1", "profile:2", "location:hq", "username:alice"}},
			{orgstore.LayerQuery{Attributes: identity.Attributes{Location: "hq", Username: "bob", DeviceID: "mac:01"}},
				[]string{"org:acme", "profile:1", "profile:2", "profile:3", "location:hq", "username:bob", "deviceid:mac:01"}},
			{orgstore.LayerQuery{Attributes: identity.Attributes{Location: "nowhere", Username: "carol"}}, []string{"org:acme", "profile:1"}},
			// An explicit profile is the only candidate, present or not.
			{orgstore.LayerQuery{Attributes: identity.Attributes{Location: "hq"}, Profile: 5, HasProfile: true},
				[]string{"org:acme", "profile:5", "location:hq"}},
			{orgstore.LayerQuery{Profile: 9, HasProfile: true}, []string{"org:acme"}},
			// Values the store cannot hold have no document.
			{orgstore.LayerQuery{Attributes: identity.Attributes{Username: "nul\x00", DeviceID: "bad\xff"}}, []string{"org:acme", "profile:1"}},
		} {
			global, got := layers(c.q)
			if global != "" || !slices.Equal(got, c.want) {
				t.Errorf("%+v: global %q, layers %v, want %v", c.q, global, got, c.want)
			}
		}
		// The global document counts among the profile candidates.
		must[int64](t)(s.PutGlobalSettings(ctx, doc(t, `{"profile": 4}`)))
		must[int64](t)(s.DeleteSettings(ctx, "acme", orgScope))
		global, got := layers(orgstore.LayerQuery{})
		if global != `{"profile":4}` || !slices.Equal(got, []string{"profile:4"}) {
			t.Errorf("with a global profile: %q %v", global, got)
		}
		if _, err := s.ReadSettingsLayers(ctx, "acme", orgstore.LayerQuery{Profile: -1, HasProfile: true}); !errors.Is(err, orgstore.ErrInvalidInput) {
			t.Errorf("profile -1: %v", err)
		}
	})
}

// TestSettingsConsistentViews: the deploy's read (ReadOverrides with
// WithSettings) and the effective read see the documents of exactly their
// version. Step i of the writer points the org document at profile i
// (version 2+2i), then writes profile i (version 3+2i).
func TestSettingsConsistentViews(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		check := func(view bool) error {
			if view {
				v, err := s.ReadOverrides(ctx, "acme", orgstore.CIDROnly|orgstore.WithSettings)
				if err != nil {
					return err
				}
				want := int64(0) // the org document, and profiles 0..i
				if v.Version >= 2 {
					want = (v.Version + 1) / 2
				}
				if int64(len(v.Settings)) != want {
					return fmt.Errorf("inconsistent view: version %d with %d documents", v.Version, len(v.Settings))
				}
				return nil
			}
			l, err := s.ReadSettingsLayers(ctx, "acme", orgstore.LayerQuery{})
			if err != nil {
				return err
			}
			var want []string
			if l.Version >= 2 {
				want = append(want, "org:acme")
			}
			if l.Version >= 3 && l.Version%2 == 1 {
				want = append(want, fmt.Sprintf("profile:%d", (l.Version-3)/2))
			}
			var got []string
			for _, d := range l.Docs {
				got = append(got, d.Scope.Layer("acme"))
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("inconsistent layers: version %d with %v", l.Version, got)
			}
			return nil
		}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					if err := check(i%2 == 0); err != nil {
						if ctx.Err() == nil {
							t.Error(err)
						}
						return
					}
				}
			}()
		}
		for i := range 60 {
			if _, err := s.PutSettings(ctx, "acme", orgScope, doc(t, fmt.Sprintf(`{"profile":%d}`, i))); err != nil {
				t.Fatal(err)
			}
			if _, err := s.PutSettings(ctx, "acme", profile(i), doc(t, `{}`)); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		wg.Wait()
	})
}

// TestSettingsWritesRefreshCachedVersion: the single-override read cache
// (SQLite) holds the version; a settings write bumps it, so it must drop
// the organisation's entries like every other write.
func TestSettingsWritesRefreshCachedVersion(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		must[int64](t)(s.PutOverride(ctx, "acme", orgstore.Override{CIDR: pfx("10.0.0.0/8")}))
		for _, write := range []func() (int64, error){
			func() (int64, error) { return s.PutSettings(ctx, "acme", orgScope, doc(t, `{}`)) },
			func() (int64, error) { return s.DeleteSettings(ctx, "acme", orgScope) },
		} {
			must[orgstore.View](t)(s.ReadOverride(ctx, "acme", pfx("10.0.0.0/8"))) // cached
			v := must[int64](t)(write())
			if got := must[orgstore.View](t)(s.ReadOverride(ctx, "acme", pfx("10.0.0.0/8"))).Version; got != v {
				t.Fatalf("ReadOverride after a settings write: version %d, want %d", got, v)
			}
		}
	})
}
