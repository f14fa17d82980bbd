package settingsmodel

import (
	"fmt"
	"hash/maphash"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// The tests of this file drive the model as the follower does, without
// NATS: Load and Apply on the Run goroutine's side, reads on the other.

func newTestModel() (*Model, *followModel) {
	m := &Model{seed: maphash.MakeSeed()}
	m.snap.Store(emptySnapshot(m.seed))
	return m, (*followModel)(m)
}

func orgKey(org string, sc settings.Scope) string { return settings.Key(org, sc) }

var (
	scOrg = settings.Scope{Kind: settings.ScopeOrg}
	scP   = func(n int) settings.Scope { return settings.Scope{Kind: settings.ScopeProfile, Profile: n} }
	scLoc = func(v string) settings.Scope { return settings.Scope{Kind: settings.ScopeLocation, Value: v} }
	scU   = func(v string) settings.Scope { return settings.Scope{Kind: settings.ScopeUsername, Value: v} }
	scD   = func(v string) settings.Scope { return settings.Scope{Kind: settings.ScopeDeviceID, Value: v} }
)

func mustEntry(t testing.TB, key, value string) entry {
	t.Helper()
	e, err := decode(key, []byte(value))
	if err != nil {
		t.Fatalf("decode(%q, %s): %v", key, value, err)
	}
	return e
}

func sortedKeys(s *Snapshot) []string {
	keys := []string{}
	for k := range s.All {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestDecode(t *testing.T) {
	e := mustEntry(t, orgKey("a b", scU("alice")), `{"paused":true}`)
	if e.org != "a b" || e.scope != scU("alice") || e.global || !*e.doc.Paused {
		t.Errorf("decode: %+v", e)
	}
	if e := mustEntry(t, settings.GlobalKey, `{}`); !e.global || e.doc == nil {
		t.Errorf("global: %+v", e)
	}
	for _, c := range []struct{ key, value string }{
		{"org.YWNtZQ.user.YQ", `{}`},           // unknown scope
		{"sessions-key", `{}`},                 // not a settings key
		{orgKey("acme", scOrg), `{"x":1}`},     // unknown field
		{orgKey("acme", scOrg), `[]`},          // not an object
		{orgKey("acme", scOrg), ``},            // empty
		{settings.GlobalKey, `{"profile":-1}`}, // invalid value
	} {
		if _, err := decode(c.key, []byte(c.value)); err == nil {
			t.Errorf("decode(%q, %s) accepted", c.key, c.value)
		}
	}
}

func TestCopyOnWrite(t *testing.T) {
	m, x := newTestModel()
	var orgs []string
	for i := range 600 { // several organisations per shard
		orgs = append(orgs, "org-"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	_, err := x.Load(func(put func(entry), del func(string)) error {
		for _, org := range orgs {
			put(mustEntry(t, orgKey(org, scOrg), `{"paused":false}`))
			put(mustEntry(t, orgKey(org, scP(1)), `{"paused":true}`))
			put(mustEntry(t, orgKey(org, scU("alice")), `{"safe_search":true}`))
			put(mustEntry(t, orgKey(org, scLoc("hq")), `{"safe_search":false}`))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	before := m.Snapshot()
	if before.Len() != 4*len(orgs) || before.Orgs() != len(orgs) {
		t.Fatalf("loaded %d documents of %d organisations", before.Len(), before.Orgs())
	}

	touched := orgs[0]
	x.Apply([]entry{mustEntry(t, orgKey(touched, scU("bob")), `{"paused":true}`)}, nil)
	after := m.Snapshot()
	if after == before {
		t.Fatal("no new snapshot")
	}
	ti := before.shard(touched)
	for i := range shardCount {
		same := reflect.ValueOf(before.shards[i]).Pointer() == reflect.ValueOf(after.shards[i]).Pointer()
		if same == (i == ti) {
			t.Errorf("shard %d: shared %v (the touched organisation's is %d)", i, same, ti)
		}
	}
	for _, org := range orgs {
		o0, o1 := before.org(org), after.org(org)
		if (o0 == o1) == (org == touched) {
			t.Errorf("%s: record shared %v", org, o0 == o1)
		}
	}
	// In the touched record, only the usernames map was copied.
	o0, o1 := before.org(touched), after.org(touched)
	if reflect.ValueOf(o0.profiles).Pointer() != reflect.ValueOf(o1.profiles).Pointer() ||
		reflect.ValueOf(o0.attrs[attrIndex(settings.ScopeLocation)]).Pointer() != reflect.ValueOf(o1.attrs[attrIndex(settings.ScopeLocation)]).Pointer() {
		t.Error("an untouched scope map was copied")
	}
	if len(o0.attrs[attrIndex(settings.ScopeUsername)]) != 1 || len(o1.attrs[attrIndex(settings.ScopeUsername)]) != 2 {
		t.Error("the old snapshot changed, or the new one lacks the put")
	}
	if before.Document(touched, scU("bob")) != nil || after.Document(touched, scU("bob")) == nil {
		t.Error("the put is not only in the new snapshot")
	}
	if after.Len() != before.Len()+1 || after.Orgs() != before.Orgs() {
		t.Errorf("counts after the put: %d documents, %d organisations", after.Len(), after.Orgs())
	}
}

func TestVersions(t *testing.T) {
	m, x := newTestModel()
	if v := m.Snapshot().Version("acme"); v != 0 {
		t.Fatalf("version before the load: %d", v)
	}
	x.Load(func(put func(entry), del func(string)) error {
		put(mustEntry(t, orgKey("acme", scOrg), `{"paused":false}`))
		put(mustEntry(t, orgKey("other", scOrg), `{"paused":false}`))
		return nil
	})
	seen := map[string]string{} // org and version → contents
	// step applies a burst and checks which organisations' versions moved.
	step := func(what string, puts []entry, dels []string, moved ...string) {
		t.Helper()
		before := map[string]uint64{}
		for _, org := range []string{"acme", "other", "none"} {
			before[org] = m.Snapshot().Version(org)
		}
		x.Apply(puts, dels)
		for org, v0 := range before {
			v1 := m.Snapshot().Version(org)
			switch {
			case v1 < v0:
				t.Errorf("%s: %s's version went back from %d to %d", what, org, v0, v1)
			case (v1 != v0) != slices.Contains(moved, org):
				t.Errorf("%s: %s's version %d → %d, moved should be %v", what, org, v0, v1, slices.Contains(moved, org))
			}
			// An organisation's version names one content.
			desc, key := m.Snapshot().describe(org), fmt.Sprint(org, v1)
			if prev, ok := seen[key]; ok && prev != desc {
				t.Errorf("%s: version %d of %s names other contents: %s, before %s", what, v1, org, desc, prev)
			}
			seen[key] = desc
		}
	}
	step("put in acme", []entry{mustEntry(t, orgKey("acme", scU("alice")), `{"paused":true}`)}, nil, "acme")
	step("equal put", []entry{mustEntry(t, orgKey("acme", scU("alice")), `{ "paused" : true }`)}, nil)
	step("delete of a key not held", nil, []string{orgKey("acme", scD("mac:01")), orgKey("none", scOrg), "not-a-key"})
	step("update in other", []entry{mustEntry(t, orgKey("other", scOrg), `{"paused":true}`)}, nil, "other")
	step("global put", []entry{mustEntry(t, settings.GlobalKey, `{"safe_search":true}`)}, nil, "acme", "other", "none")
	step("equal global put", []entry{mustEntry(t, settings.GlobalKey, `{"safe_search":true}`)}, nil)
	step("delete in acme", nil, []string{orgKey("acme", scU("alice"))}, "acme")
	step("new organisation", []entry{mustEntry(t, orgKey("none", scP(3)), `{}`)}, nil, "none")
	step("last document of none", nil, []string{orgKey("none", scP(3))}, "acme", "other", "none")
	step("global delete", nil, []string{settings.GlobalKey}, "acme", "other", "none")

	v := m.Snapshot().Version("acme")
	x.Load(func(put func(entry), del func(string)) error { return nil })
	if m.Snapshot().Version("acme") <= v || m.Snapshot().Len() != 0 {
		t.Errorf("a reload must move every version: %d → %d", v, m.Snapshot().Version("acme"))
	}
}

// describe renders what a subscriber of org can merge: for the version test.
func (s *Snapshot) describe(org string) string {
	out := ""
	if s.global != nil {
		out += "global=" + s.global.String()
	}
	if o := s.org(org); o != nil {
		for k := range s.All {
			if d, _ := keyDoc(s, k); d != nil && k != settings.GlobalKey {
				if o2, _, _, _ := settings.ParseKey(k); o2 == org {
					out += " " + k + "=" + d.String()
				}
			}
		}
	}
	return out
}

func keyDoc(s *Snapshot, key string) (*settings.Document, error) {
	org, sc, global, err := settings.ParseKey(key)
	if err != nil || global {
		return s.global, err
	}
	return s.Document(org, sc), nil
}

func TestApplyAndKeys(t *testing.T) {
	m, x := newTestModel()
	keys := []string{
		settings.GlobalKey,
		orgKey("acme", scOrg), orgKey("acme", scP(0)), orgKey("acme", scP(2)),
		orgKey("acme", scLoc("hq")), orgKey("acme", scU("alice")), orgKey("acme", scD("mac:0a:1b")),
		orgKey("école", scU("élève")),
	}
	n, err := x.Load(func(put func(entry), del func(string)) error {
		for _, k := range keys {
			put(mustEntry(t, k, `{"paused":true}`))
		}
		put(mustEntry(t, orgKey("gone", scOrg), `{}`))
		del(orgKey("gone", scOrg)) // a later call for a key wins
		del("no-such-key")
		return nil
	})
	if err != nil || n != len(keys) {
		t.Fatalf("Load = %d, %v", n, err)
	}
	var got []string
	for k := range x.Keys {
		got = append(got, k)
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(got, want) || !slices.Equal(sortedKeys(m.Snapshot()), want) {
		t.Errorf("Keys = %v, want %v", got, want)
	}
	for k := range x.Keys {
		_ = k
		break // stopping early is allowed
	}

	if n := x.Apply(nil, keys[1:7]); n != 2 || m.Snapshot().Orgs() != 1 {
		t.Errorf("after deleting acme's documents: %d documents, %d organisations", n, m.Snapshot().Orgs())
	}
	if m.Snapshot().org("acme") != nil {
		t.Error("an organisation without documents keeps a record")
	}
	if n := x.Apply([]entry{mustEntry(t, orgKey("acme", scD("d")), `{}`)}, []string{settings.GlobalKey}); n != 2 {
		t.Errorf("put and global delete: %d documents", n)
	}
	if m.Snapshot().Global() != nil {
		t.Error("global document not deleted")
	}
}

func TestLayersDoNotAllocate(t *testing.T) {
	m, x := newTestModel()
	x.Load(func(put func(entry), del func(string)) error {
		put(mustEntry(t, settings.GlobalKey, `{"safe_search":true}`))
		put(mustEntry(t, orgKey("acme", scOrg), `{"profile":1}`))
		put(mustEntry(t, orgKey("acme", scP(1)), `{"paused":true}`))
		put(mustEntry(t, orgKey("acme", scLoc("hq")), `{}`))
		put(mustEntry(t, orgKey("acme", scU("alice")), `{}`))
		put(mustEntry(t, orgKey("acme", scD("mac:01")), `{}`))
		return nil
	})
	a := identity.Attributes{Location: "hq", Username: "alice", DeviceID: "mac:01"}
	buf := make([]settings.Layer, 0, settings.MaxLayers)
	var ls []settings.Layer
	allocs := testing.AllocsPerRun(1000, func() {
		s := m.Snapshot()
		_ = s.Version("acme")
		ls = s.AppendLayers(buf[:0], "acme", a, 0, false)
	})
	if allocs != 0 {
		t.Errorf("Version + AppendLayers allocate %v times", allocs)
	}
	names := []string{}
	for _, l := range ls {
		names = append(names, l.Name)
	}
	if want := []string{"global", "org:acme", "profile:1", "location:hq", "username:alice", "deviceid:mac:01"}; !slices.Equal(names, want) {
		t.Errorf("layers %v, want %v", names, want)
	}
	if got := maps.Collect(func(yield func(string, int) bool) {
		for i, l := range m.Snapshot().Layers("", a, 0, false) {
			if !yield(l.Name, i) {
				return
			}
		}
	}); len(got) != 1 || got["global"] != 0 {
		t.Errorf("no organisation: layers %v, want the global one alone", got)
	}
}
