package settingsmodel

import (
	"fmt"
	"testing"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// loadOrgs loads n organisations with an org, a profile and a username
// document each, and acme with a document at every scope.
func loadOrgs(b *testing.B, n int) (*Model, *followModel) {
	m, x := newTestModel()
	doc := func(s string) *settings.Document {
		d, err := settings.Parse([]byte(s))
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	orgDoc, profDoc, userDoc := doc(`{"profile":1}`), doc(`{"paused":true}`), doc(`{"safe_search":true}`)
	_, err := x.Load(func(put func(entry), del func(string)) error {
		put(entry{global: true, doc: doc(`{"blocked_categories":[1]}`)})
		for i := range n {
			org := fmt.Sprintf("org-%07d", i)
			put(entry{org: org, scope: scOrg, doc: orgDoc})
			put(entry{org: org, scope: scP(1), doc: profDoc})
			put(entry{org: org, scope: scU("alice"), doc: userDoc})
		}
		put(entry{org: "acme", scope: scOrg, doc: orgDoc})
		for _, sc := range []settings.Scope{scP(1), scLoc("hq"), scU("alice"), scD("mac:01")} {
			put(entry{org: "acme", scope: sc, doc: userDoc})
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return m, x
}

// BenchmarkLayers is the hot path of a decision that misses its policy
// cache: one snapshot, the organisation's version and the six layers of a
// subscriber with documents at every scope.
func BenchmarkLayers(b *testing.B) {
	m, _ := loadOrgs(b, 100_000)
	a := identity.Attributes{Location: "hq", Username: "alice", DeviceID: "mac:01"}
	buf := make([]settings.Layer, 0, settings.MaxLayers)
	b.ReportAllocs()
	for b.Loop() {
		s := m.Snapshot()
		_ = s.Version("acme")
		if ls := s.AppendLayers(buf[:0], "acme", a, 0, false); len(ls) != 6 {
			b.Fatal(len(ls))
		}
	}
}

// BenchmarkApply measures one burst that changes one document of one
// organisation, among n organisations of three documents each: the
// copy-on-write cost the follower pays per burst.
func BenchmarkApply(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("%dk-orgs", n/1000), func(b *testing.B) {
			if n > 100_000 && testing.Short() {
				b.Skip("1M organisations: run without -short")
			}
			_, x := loadOrgs(b, n)
			docs := [2]*settings.Document{}
			for i := range docs {
				d, _ := settings.Parse(fmt.Appendf(nil, `{"blocked_categories":[%d]}`, i))
				docs[i] = d
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				x.Apply([]entry{{org: "org-0000042", scope: scU("alice"), doc: docs[i%2]}}, nil)
			}
		})
	}
}
