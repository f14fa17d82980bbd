package settingsmodel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/identity"
	settingsmodel "github.com/svc-pf/svc-pf/internal/readmodel/settings"
	"github.com/svc-pf/svc-pf/internal/settings"
)

func TestInitialLoadAndLiveUpdates(t *testing.T) {
	b := startBus(t)
	kv := createBucket(t, b.JS)
	putDoc(t, kv, keyG, `{"safe_search": true, "blocked_categories": [9]}`)
	putDoc(t, kv, keyOrg("acme"), `{"blocked_categories": [3, 1]}`)
	putDoc(t, kv, keyU("acme", "alice"), `{"paused": true}`)
	putDoc(t, kv, keyOrg("gone"), `{}`)
	del(t, kv, keyOrg("gone")) // a delete marker in the initial contents

	r := startModel(t, b.JS)
	r.waitReady(t)
	m := r.m
	if !m.Ready() {
		t.Fatal("Ready() false after WaitReady")
	}
	s := m.Snapshot()
	if s.Len() != 3 || s.Orgs() != 1 {
		t.Fatalf("initial snapshot: %d documents of %d organisations, want 3 of 1", s.Len(), s.Orgs())
	}
	if g := m.Snapshot().Global(); g == nil || !*g.SafeSearch {
		t.Fatalf("global document: %v", g)
	}
	if d := s.Document("acme", scOrg); d == nil || !slices.Equal(*d.BlockedCategories, []uint16{1, 3}) {
		t.Errorf("org document: %v", d)
	}
	alice := identity.Attributes{Username: "alice"}
	if got := names(m.Snapshot().Layers("acme", alice, 0, false)); !slices.Equal(got, []string{"global", "org:acme", "username:alice"}) {
		t.Errorf("alice's layers: %v", got)
	}
	if got := names(m.Snapshot().Layers("gone", identity.Attributes{}, 0, false)); !slices.Equal(got, []string{"global"}) {
		t.Errorf("deleted organisation's layers: %v", got)
	}
	v0 := m.Snapshot().Version("acme")

	// Live put of a new scope, update of one, delete and purge.
	putDoc(t, kv, keyL("acme", "hq"), `{"safe_search": false}`)
	putDoc(t, kv, keyU("acme", "alice"), `{"paused": false}`)
	eventually(t, "live put and update visible", func() (bool, string) {
		ls := m.Snapshot().Layers("acme", identity.Attributes{Location: "hq", Username: "alice"}, 0, false)
		e := settings.Merge(ls...)
		return len(ls) == 4 && !*e.Paused && !*e.SafeSearch, fmt.Sprint(names(ls))
	})
	v1 := m.Snapshot().Version("acme")
	if v1 <= v0 {
		t.Errorf("version did not grow with acme's changes: %d → %d", v0, v1)
	}
	del(t, kv, keyOrg("acme"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kv.Purge(ctx, keyG); err != nil {
		t.Fatal(err)
	}
	eventually(t, "delete and purge applied", func() (bool, string) {
		return m.Snapshot().Global() == nil && m.Snapshot().Document("acme", scOrg) == nil, fmt.Sprint(m.Snapshot().Len(), " documents")
	})
	if got := names(m.Snapshot().Layers("acme", alice, 0, false)); !slices.Equal(got, []string{"username:alice"}) {
		t.Errorf("layers after the deletes: %v", got)
	}
	if m.Snapshot().Version("acme") <= v1 {
		t.Error("version did not grow with the deletes")
	}
	converged(t, m, kv)

	eventually(t, "caught up", func() (bool, string) { return m.Lag() == 0, m.Lag().String() })
	checkMetric(t, r.reg, "svcpf_readmodel_entries", 2)
	checkMetric(t, r.reg, "svcpf_readmodel_ready", 1)
	checkMetric(t, r.reg, "svcpf_readmodel_decode_errors_total", 0)
	checkMetric(t, r.reg, "svcpf_readmodel_lag_seconds", 0)
	// 4 initial entries (gone's put was superseded by its marker), 4 live.
	checkMetric(t, r.reg, "svcpf_readmodel_updates_applied_total", 8)
	if err := r.stop(); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
}

// TestEveryScope stores an organisation with documents at every scope,
// with organisation ids and values that are not KV tokens, and reads every
// combination of a subscriber's attributes.
func TestEveryScope(t *testing.T) {
	b := startBus(t)
	kv := createBucket(t, b.JS)
	const org = "Acme Corp/EU.west>*"
	docs := map[string]string{
		keyG:                               `{"action": {"type": "refused"}}`,
		keyOrg(org):                        `{"blocked_categories": [1]}`,
		keyP(org, 0):                       `{"allowlist": ["zero.example"]}`,
		keyP(org, 1):                       `{"allowlist": ["one.example"]}`,
		keyP(org, settings.MaxProfile):     `{"allowlist": ["max.example"]}`,
		keyL(org, "hq.floor 2"):            `{"safe_search": true}`,
		keyU(org, "alice@example.com"):     `{"paused": true}`,
		keyD(org, "mac:00:11:22:33:44:55"): `{"blocklist": ["ads.example"], "profile": 1048576}`,
		keyU("other", "alice@example.com"): `{"paused": false}`,
	}
	for k, d := range docs {
		putDoc(t, kv, k, d)
	}
	r := startModel(t, b.JS)
	r.waitReady(t)
	converged(t, r.m, kv)
	s := r.m.Snapshot()
	if s.Len() != len(docs) || s.Orgs() != 2 {
		t.Fatalf("%d documents of %d organisations", s.Len(), s.Orgs())
	}
	for _, sc := range []settings.Scope{
		{Kind: settings.ScopeOrg}, {Kind: settings.ScopeProfile, Profile: 0}, {Kind: settings.ScopeProfile, Profile: settings.MaxProfile},
		{Kind: settings.ScopeLocation, Value: "hq.floor 2"}, {Kind: settings.ScopeUsername, Value: "alice@example.com"},
		{Kind: settings.ScopeDeviceID, Value: "mac:00:11:22:33:44:55"},
	} {
		if d := s.Document(org, sc); d == nil || d.String() != mustParse(t, docs[settings.Key(org, sc)]).String() {
			t.Errorf("Document(%v) = %v", sc, d)
		}
	}
	full := identity.Attributes{Location: "hq.floor 2", Username: "alice@example.com", DeviceID: "mac:00:11:22:33:44:55"}
	for _, c := range []struct {
		a          identity.Attributes
		profile    int
		hasProfile bool
		want       []string
	}{
		{identity.Attributes{}, 0, false, []string{"global", "org:" + org}},
		{identity.Attributes{}, 0, true, []string{"global", "org:" + org, "profile:0"}},
		{full, 0, false, []string{"global", "org:" + org, "profile:1048576", "location:hq.floor 2",
			"username:alice@example.com", "deviceid:mac:00:11:22:33:44:55"}},
		{full, 1, true, []string{"global", "org:" + org, "profile:1", "location:hq.floor 2",
			"username:alice@example.com", "deviceid:mac:00:11:22:33:44:55"}},
		{identity.Attributes{Username: "alice@example.com"}, 2, true, []string{"global", "org:" + org, "username:alice@example.com"}},
		{identity.Attributes{Location: "hq.floor 3", Username: "bob"}, 0, false, []string{"global", "org:" + org}},
	} {
		if got := names(s.Layers(org, c.a, c.profile, c.hasProfile)); !slices.Equal(got, c.want) {
			t.Errorf("%+v profile %d/%v: layers %v, want %v", c.a, c.profile, c.hasProfile, got, c.want)
		}
	}
	if got := names(s.Layers("other", full, 0, false)); !slices.Equal(got, []string{"global", "username:alice@example.com"}) {
		t.Errorf("other organisation: %v", got)
	}
}

// TestInvalidKeysAndValues: a key ParseKey refuses or a value Parse
// refuses is skipped and counted, and removes what the key held.
func TestInvalidKeysAndValues(t *testing.T) {
	b := startBus(t)
	kv := createBucket(t, b.JS)
	putDoc(t, kv, keyOrg("acme"), `{"paused": true}`)
	putDoc(t, kv, keyU("acme", "alice"), `{"paused": false}`)
	putRaw(t, kv, "org.YQ=.org", []byte(`{}`))                      // padded base64: no canonical key
	putRaw(t, kv, keyU("acme", "bob"), []byte(`{"paused": "yes"}`)) // a value of the wrong type
	r := startModel(t, b.JS)
	r.waitReady(t)
	m := r.m
	if m.Snapshot().Len() != 2 {
		t.Fatalf("initial snapshot holds %d documents, want 2", m.Snapshot().Len())
	}
	checkMetric(t, r.reg, "svcpf_readmodel_decode_errors_total", 2)

	cases := []struct{ key, value string }{
		{keyU("acme", "alice"), `{"paused":`},          // replaces a valid document with broken JSON
		{keyOrg("acme"), `{"colour": "blue"}`},         // replaces a valid document with an unknown field
		{"global.extra", `{}`},                         // not the global key
		{"org.YWNtZQ.profile.01", `{}`},                // not canonical
		{"org.YWNtZQ.username.YQ=", `{}`},              // padded value
		{keyP("acme", 1), `null`},                      // JSON null
		{keyP("acme", 2), ``},                          // empty
		{keyL("acme", "hq"), `{"profile": 99999999}`},  // out of range
		{keyD("acme", "d"), `{"action": {"type": 1}}`}, // wrong type deep inside
	}
	for _, c := range cases {
		putRaw(t, kv, c.key, []byte(c.value))
	}
	putDoc(t, kv, keyU("acme", "carol"), `{}`)
	eventually(t, "a valid put after the invalid ones", func() (bool, string) {
		return m.Snapshot().Document("acme", settings.Scope{Kind: settings.ScopeUsername, Value: "carol"}) != nil, ""
	})
	if got := names(m.Snapshot().Layers("acme", identity.Attributes{Username: "alice"}, 0, false)); len(got) != 0 {
		t.Errorf("documents replaced by invalid values still answer: %v", got)
	}
	if m.Snapshot().Len() != 1 {
		t.Errorf("model holds %d documents, want only carol's", m.Snapshot().Len())
	}
	checkMetric(t, r.reg, "svcpf_readmodel_decode_errors_total", float64(2+len(cases)))
	converged(t, m, kv)
}

// TestResumeAfterRestart restarts the NATS server on the same port and
// store, then changes the bucket: the model reconnects, resumes and
// converges.
func TestResumeAfterRestart(t *testing.T) {
	b := startBus(t)
	kv := createBucket(t, b.JS)
	putDoc(t, kv, keyG, `{"safe_search": true}`)
	putDoc(t, kv, keyOrg("acme"), `{"profile": 1}`)
	putDoc(t, kv, keyP("acme", 1), `{"paused": true}`)
	putDoc(t, kv, keyU("acme", "alice"), `{"paused": false}`)
	r := startModel(t, b.JS)
	r.waitReady(t)
	v0 := r.m.Snapshot().Version("acme")

	port := b.Srv.Port()
	b.StopServer()
	eventually(t, "lag grows while disconnected", func() (bool, string) { return r.m.Lag() > 0, r.m.Lag().String() })
	if r.m.Snapshot().Len() != 4 {
		t.Fatal("snapshot lost documents while NATS is down")
	}
	b.StartServer(port)
	wkv, closeW := b.Writer(b.Srv.ClientURL(), settings.Bucket)
	defer closeW()
	putDoc(t, wkv, keyOrg("acme"), `{"profile": 2}`)
	putDoc(t, wkv, keyP("acme", 2), `{"blocklist": ["two.example"]}`)
	del(t, wkv, keyU("acme", "alice"))

	converged(t, r.m, wkv)
	if got := names(r.m.Snapshot().Layers("acme", identity.Attributes{Username: "alice"}, 0, false)); !slices.Equal(got, []string{"global", "org:acme", "profile:2"}) {
		t.Errorf("layers after the resume: %v", got)
	}
	if r.m.Snapshot().Version("acme") <= v0 {
		t.Error("version did not grow")
	}
	eventually(t, "caught up after resume", func() (bool, string) { return r.m.Lag() == 0, r.m.Lag().String() })
	if metric(t, r.reg, "svcpf_readmodel_resumes_total") < 1 {
		t.Error("no resume counted")
	}
	if metric(t, r.reg, "svcpf_readmodel_full_loads_total") != 1 {
		t.Error("a restart of the same stream must not need a full reload")
	}
}

// effectiveCase is one question to GET /org/acme/settings/effective and the
// answer the orgmanager's own test (TestEffectiveSettings) expects of it.
type effectiveCase struct {
	query      string // as the orgmanager takes it
	a          identity.Attributes
	profile    int
	hasProfile bool
	layers     []string
	selected   int
	origin     map[string]string
}

// effectiveDocs are the documents of the orgmanager's TestEffectiveSettings.
var effectiveDocs = []struct{ query, key, doc string }{
	{"global", keyG, `{"blocked_categories": [1], "action": {"type": "refused"}, "safe_search": true}`},
	{"", keyOrg("acme"), `{"blocked_categories": [2], "profile": 1}`},
	{"?profile=1", keyP("acme", 1), `{"allowlist": ["one.example"], "paused": true}`},
	{"?profile=2", keyP("acme", 2), `{"allowlist": ["two.example"]}`},
	{"?location=hq", keyL("acme", "hq"), `{"profile": 2, "safe_search": false}`},
	{"?username=alice", keyU("acme", "alice"), `{"blocked_categories": [], "paused": false}`},
	{"?deviceid=mac:01", keyD("acme", "mac:01"), `{"blocklist": ["ads.example"], "profile": 1}`},
}

// effectiveCases are the cases of TestEffectiveSettings, with a few more.
var effectiveCases = []effectiveCase{
	{"", identity.Attributes{}, 0, false, []string{"global", "org:acme", "profile:1"}, 1,
		map[string]string{"blocked_categories": "org:acme", "allowlist": "profile:1", "paused": "profile:1",
			"action": "global", "safe_search": "global", "filtering": "default", "profile": "org:acme"}},
	// The location selects profile 2, more specific than the org.
	{"?location=hq&username=alice", identity.Attributes{Location: "hq", Username: "alice"}, 0, false,
		[]string{"global", "org:acme", "profile:2", "location:hq", "username:alice"}, 2,
		map[string]string{"blocked_categories": "username:alice", "allowlist": "profile:2", "paused": "username:alice",
			"safe_search": "location:hq", "profile": "location:hq"}},
	// The device is more specific again, and selects 1.
	{"?location=hq&username=alice&deviceid=mac:01", identity.Attributes{Location: "hq", Username: "alice", DeviceID: "mac:01"}, 0, false,
		[]string{"global", "org:acme", "profile:1", "location:hq", "username:alice", "deviceid:mac:01"}, 1,
		map[string]string{"blocklist": "deviceid:mac:01", "allowlist": "profile:1", "profile": "deviceid:mac:01"}},
	// The parameter wins over every layer's choice.
	{"?location=hq&profile=1", identity.Attributes{Location: "hq"}, 1, true,
		[]string{"global", "org:acme", "profile:1", "location:hq"}, 1,
		map[string]string{"allowlist": "profile:1", "profile": "location:hq"}},
	// A profile without a document: selected, no layer.
	{"?profile=7", identity.Attributes{}, 7, true, []string{"global", "org:acme"}, 7,
		map[string]string{"allowlist": "default", "paused": "default"}},
	// Attributes without documents add no layer.
	{"?username=bob&location=branch", identity.Attributes{Username: "bob", Location: "branch"}, 0, false,
		[]string{"global", "org:acme", "profile:1"}, 1, nil},
	// A device alone: its profile over the org's.
	{"?deviceid=mac:01&profile=", identity.Attributes{DeviceID: "mac:01"}, 0, false,
		[]string{"global", "org:acme", "profile:1", "deviceid:mac:01"}, 1,
		map[string]string{"blocklist": "deviceid:mac:01", "profile": "deviceid:mac:01", "blocked_categories": "org:acme"}},
}

// TestLayersRule checks the layers, their names, the profile chosen and
// the merged origins against the answers the orgmanager's
// /settings/effective gives for the same documents (its
// TestEffectiveSettings).
func TestLayersRule(t *testing.T) {
	b := startBus(t)
	kv := createBucket(t, b.JS)
	for _, d := range effectiveDocs {
		putDoc(t, kv, d.key, d.doc)
	}
	r := startModel(t, b.JS)
	r.waitReady(t)
	s := r.m.Snapshot()
	for _, c := range effectiveCases {
		t.Run(c.query, func(t *testing.T) {
			ls := s.Layers("acme", c.a, c.profile, c.hasProfile)
			if got := names(ls); !slices.Equal(got, c.layers) {
				t.Errorf("layers %v, want %v", got, c.layers)
			}
			if n, ok := s.Stack("acme", c.a).Profile(c.profile, c.hasProfile); !ok || n != c.selected {
				t.Errorf("profile %d %v, want %d", n, ok, c.selected)
			}
			e := settings.Merge(ls...)
			for f, want := range c.origin {
				if e.Origin[f] != want {
					t.Errorf("origin of %s = %q, want %q", f, e.Origin[f], want)
				}
			}
		})
	}
	// No session: the global layer alone.
	if got := names(s.Layers("", identity.Attributes{Username: "alice"}, 1, true)); !slices.Equal(got, []string{"global"}) {
		t.Errorf("no session: %v", got)
	}
}

// TestConcurrentReaders reads while the bucket changes: every reader takes
// one snapshot per question, and a version must always stand for the same
// merged policy (the property a policy cache keys on). Run with -race.
func TestConcurrentReaders(t *testing.T) {
	b := startBus(t)
	kv := createBucket(t, b.JS)
	putDoc(t, kv, keyOrg("acme"), `{"profile": 1}`)
	r := startModel(t, b.JS)
	r.waitReady(t)

	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	byVersion := map[uint64]string{} // version → fingerprint
	var reads, conflicts atomic.Int64
	a := identity.Attributes{Location: "hq", Username: "alice"}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]settings.Layer, 0, settings.MaxLayers)
			for !stop.Load() {
				s := r.m.Snapshot()
				v := s.Version("acme")
				fp := settings.Merge(s.AppendLayers(buf[:0], "acme", a, 0, false)...).Fingerprint
				mu.Lock()
				if prev, ok := byVersion[v]; ok && prev != fp {
					conflicts.Add(1)
				}
				byVersion[v] = fp
				mu.Unlock()
				reads.Add(1)
			}
		}()
	}
	for i := range 200 {
		switch i % 4 {
		case 0:
			putDoc(t, kv, keyL("acme", "hq"), fmt.Sprintf(`{"blocked_categories": [%d]}`, i))
		case 1:
			putDoc(t, kv, keyP("acme", 1), fmt.Sprintf(`{"allowlist": ["a%d.example"]}`, i))
		case 2:
			putDoc(t, kv, keyG, fmt.Sprintf(`{"blocklist": ["g%d.example"]}`, i))
		case 3:
			del(t, kv, keyL("acme", "hq"))
		}
		putDoc(t, kv, keyOrg(fmt.Sprint("other-", i%7)), fmt.Sprintf(`{"paused": %v}`, i%2 == 0))
	}
	converged(t, r.m, kv)
	stop.Store(true)
	wg.Wait()
	if conflicts.Load() != 0 {
		t.Errorf("%d reads found a version standing for another policy", conflicts.Load())
	}
	if reads.Load() == 0 {
		t.Error("no reads")
	}
}

func TestConfig(t *testing.T) {
	if _, err := settingsmodel.New(settingsmodel.Config{}); err == nil {
		t.Error("New without JetStream: no error")
	}
	b := startBus(t)
	reg := prometheus.NewRegistry()
	if _, err := settingsmodel.New(settingsmodel.Config{JetStream: b.JS, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	checkMetric(t, reg, "svcpf_readmodel_ready", 0) // labelled bucket="settings" (metric checks it)
	if _, err := settingsmodel.New(settingsmodel.Config{JetStream: b.JS, Registerer: reg}); err == nil {
		t.Error("registering the metrics twice: no error")
	}
	m, err := settingsmodel.New(settingsmodel.Config{JetStream: b.JS, RetryInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if m.Snapshot() == nil || m.Snapshot().Len() != 0 || m.Snapshot().Global() != nil || m.Snapshot().Version("acme") != 0 ||
		len(m.Snapshot().Layers("acme", identity.Attributes{}, 0, false)) != 0 {
		t.Error("before the load the model must be empty")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	time.Sleep(50 * time.Millisecond)
	if err := m.Run(ctx); err == nil {
		t.Error("second Run: no error")
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer wcancel()
	if err := m.WaitReady(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitReady without a bucket = %v", err)
	}
	if m.Ready() || m.Lag() <= 0 {
		t.Error("ready without a bucket")
	}
	createBucket(t, b.JS) // the model waits for the bucket
	rctx, rcancel := context.WithTimeout(context.Background(), waitFor)
	defer rcancel()
	if err := m.WaitReady(rctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel = %v", err)
	}
}

// jsonEqual compares two JSON texts by value.
func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
