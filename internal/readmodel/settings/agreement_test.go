package settingsmodel_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgmanager"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
	settingsmodel "github.com/svc-pf/svc-pf/internal/readmodel/settings"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// nopDeployer stands in for the deploy pipeline: the documents reach the
// bucket through the test, not through a deploy.
type nopDeployer struct{}

func (nopDeployer) Notify(string)               { /* nothing to deploy */ }
func (nopDeployer) NotifyGlobal()               { /* nothing to deploy */ }
func (nopDeployer) Redeploy(string)             { /* nothing to deploy */ }
func (nopDeployer) Status(string) deploy.Status { return deploy.Status{} }

// orgAPI is the orgmanager's REST API on a SQLite store, called in process.
type orgAPI struct {
	t testing.TB
	h http.Handler
}

func newOrgAPI(t testing.TB) *orgAPI {
	t.Helper()
	api, err := orgmanager.New(orgmanager.Config{Store: storetest.Open(t, storetest.SQLite), Deployer: nopDeployer{}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := httpapi.NewRouter(httpapi.RouterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	api.Register(r)
	return &orgAPI{t: t, h: r}
}

func (o *orgAPI) call(method, path, body string, want ...int) []byte {
	o.t.Helper()
	rec := httptest.NewRecorder()
	o.h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	if !slices.Contains(want, rec.Code) {
		o.t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// settingsPath is where the orgmanager keeps the document of a KV key.
func settingsPath(t testing.TB, key string) string {
	t.Helper()
	org, sc, global, err := settings.ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if global {
		return "/settings"
	}
	q := url.Values{}
	switch sc.Kind {
	case settings.ScopeProfile:
		q.Set("profile", fmt.Sprint(sc.Profile))
	case settings.ScopeLocation:
		q.Set("location", sc.Value)
	case settings.ScopeUsername:
		q.Set("username", sc.Value)
	case settings.ScopeDeviceID:
		q.Set("deviceid", sc.Value)
	}
	p := "/org/" + url.PathEscape(org) + "/settings"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

// effectiveAnswer is the body of GET /org/{org}/settings/effective.
type effectiveAnswer struct {
	Settings    json.RawMessage   `json:"settings"`
	Origin      map[string]string `json:"origin"`
	Layers      []string          `json:"layers"`
	Fingerprint string            `json:"fingerprint"`
	Profile     *int              `json:"profile"`
}

// agree asks the orgmanager and the model the effective policy of one
// subscriber of org and compares every part of the answers.
func agree(t *testing.T, api *orgAPI, s *settingsmodel.Snapshot, org string, a identity.Attributes, profile int, hasProfile bool) {
	t.Helper()
	q := url.Values{}
	for name, v := range map[string]string{"location": a.Location, "username": a.Username, "deviceid": a.DeviceID} {
		if v != "" {
			q.Set(name, v)
		}
	}
	if hasProfile {
		q.Set("profile", fmt.Sprint(profile))
	}
	var want effectiveAnswer
	if err := json.Unmarshal(api.call("GET", "/org/"+url.PathEscape(org)+"/settings/effective?"+q.Encode(), "", 200), &want); err != nil {
		t.Fatal(err)
	}
	st := s.Stack(org, a)
	ls := st.AppendLayers(nil, profile, hasProfile)
	e := settings.Merge(ls...)
	n, ok := st.Profile(profile, hasProfile)
	doc, _ := json.Marshal(&e.Document)
	switch {
	case !slices.Equal(names(ls), want.Layers):
		t.Errorf("%s: layers %v, orgmanager %v", q.Encode(), names(ls), want.Layers)
	case !maps.Equal(e.Origin, want.Origin):
		t.Errorf("%s: origins %v, orgmanager %v", q.Encode(), e.Origin, want.Origin)
	case e.Fingerprint != want.Fingerprint || !jsonEqual(doc, want.Settings):
		t.Errorf("%s: policy %s (%s), orgmanager %s (%s)", q.Encode(), doc, e.Fingerprint, want.Settings, want.Fingerprint)
	case ok != (want.Profile != nil) || ok && n != *want.Profile:
		t.Errorf("%s: profile %d %v, orgmanager %v", q.Encode(), n, ok, want.Profile)
	}
}

// TestAgreesWithOrgmanager stores the same documents through the
// orgmanager's REST API and in the bucket, and compares the orgmanager's
// /settings/effective with settings.Merge over the model's layers: first
// for the cases of TestLayersRule, then over random changes and every
// combination of attributes and profile parameter.
func TestAgreesWithOrgmanager(t *testing.T) {
	api := newOrgAPI(t)
	api.call("PUT", "/org/acme", "", 200)
	b := startBus(t)
	kv := createBucket(t, b.JS)
	for _, d := range effectiveDocs {
		api.call("PUT", settingsPath(t, d.key), d.doc, 200)
		putDoc(t, kv, d.key, d.doc)
	}
	r := startModel(t, b.JS)
	r.waitReady(t)
	s := r.m.Snapshot()
	for _, c := range effectiveCases {
		agree(t, api, s, "acme", c.a, c.profile, c.hasProfile)
	}
	// Every attribute layer choosing a profile of its own: the most
	// specific choice wins.
	for _, d := range []struct{ key, doc string }{
		{keyU("acme", "bob"), `{"profile": 3}`},
		{keyL("acme", "branch"), `{"profile": 0}`},
		{keyD("acme", "mac:02"), `{"profile": 2}`},
		{keyP("acme", 0), `{"paused": true}`},
		{keyP("acme", 3), `{"paused": false, "profile": 0}`},
	} {
		api.call("PUT", settingsPath(t, d.key), d.doc, 200)
		putDoc(t, kv, d.key, d.doc)
	}
	converged(t, r.m, kv)
	s = r.m.Snapshot()
	for _, a := range []identity.Attributes{
		{Location: "branch", Username: "bob"}, {Location: "branch"}, {Username: "bob", DeviceID: "mac:02"},
		{Location: "branch", DeviceID: "mac:02"}, {Location: "hq", Username: "bob"},
	} {
		agree(t, api, s, "acme", a, 0, false)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	locations, usernames, devices := []string{"", "hq", "branch"}, []string{"", "alice", "bob"}, []string{"", "mac:01", "mac:02"}
	keys := []string{keyG, keyOrg("acme")}
	for p := range 4 {
		keys = append(keys, keyP("acme", p))
	}
	for i := 1; i < 3; i++ {
		keys = append(keys, keyL("acme", locations[i]), keyU("acme", usernames[i]), keyD("acme", devices[i]))
	}
	held := map[string]bool{}
	for k := range r.m.Snapshot().All {
		held[k] = true
	}
	randomDoc := func() string {
		var fields []string
		if rng.IntN(2) == 0 {
			fields = append(fields, fmt.Sprintf(`"profile": %d`, rng.IntN(4)))
		}
		if rng.IntN(2) == 0 {
			fields = append(fields, fmt.Sprintf(`"paused": %v`, rng.IntN(2) == 0))
		}
		if rng.IntN(2) == 0 {
			fields = append(fields, fmt.Sprintf(`"blocked_categories": [%d]`, rng.IntN(5)))
		}
		if rng.IntN(3) == 0 {
			fields = append(fields, fmt.Sprintf(`"allowlist": ["a%d.example"]`, rng.IntN(3)))
		}
		if rng.IntN(4) == 0 {
			fields = append(fields, `"filtering": false`)
		}
		return "{" + strings.Join(fields, ", ") + "}"
	}
	for round := range 10 {
		for range 8 {
			k := keys[rng.IntN(len(keys))]
			if held[k] && rng.IntN(3) == 0 {
				api.call("DELETE", settingsPath(t, k), "", 204)
				del(t, kv, k)
				held[k] = false
				continue
			}
			d := randomDoc()
			api.call("PUT", settingsPath(t, k), d, 200)
			putDoc(t, kv, k, d)
			held[k] = true
		}
		converged(t, r.m, kv)
		s := r.m.Snapshot()
		for _, loc := range locations {
			for _, user := range usernames {
				for _, dev := range devices {
					a := identity.Attributes{Location: loc, Username: user, DeviceID: dev}
					agree(t, api, s, "acme", a, 0, false)
					agree(t, api, s, "acme", a, rng.IntN(5), true)
				}
			}
		}
		if t.Failed() {
			t.Fatalf("round %d disagrees", round)
		}
	}
}
