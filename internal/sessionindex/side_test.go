package sessionindex

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/session"
)

// hasPointers reports whether values of t hold any pointer the garbage
// collector would follow.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	}
	return true
}

// TestChunkHasNoPointers pins what takes the index's entries out of the
// garbage collector's mark work: the runtime allocates a pointer-free type
// noscan, and never reads it during a cycle.
func TestChunkHasNoPointers(t *testing.T) {
	if hasPointers(reflect.TypeFor[slotChunk]()) {
		t.Fatal("slotChunk holds pointers")
	}
	if !hasPointers(reflect.TypeFor[chunkRef]()) {
		t.Fatal("hasPointers misses pointers")
	}
}

func withRest(id, org, trace, opaque string) *session.Session {
	return &session.Session{ID: id, Org: org, Attributes: identity.Attributes{Username: "u-" + id, Location: "loc-" + org},
		TraceID: trace, OpaqueID: opaque, Allocations: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32"), netip.MustParsePrefix("10.0.0.2/32")}}
}

// TestInternIDsStable: an org keeps its id in every snapshot derived from
// the first, whatever comes and goes; names added later are invisible to
// earlier snapshots; concurrent Applies on one snapshot that add different
// names each see their own.
func TestInternIDsStable(t *testing.T) {
	ix := Empty().Apply([]*session.Session{withRest("a", "org-a", "", ""), withRest("b", "org-b", "", "")}, nil)
	idOf := func(ix *Index, id string) OrgID {
		e, ok := ix.Get(id)
		if !ok {
			t.Fatalf("Get(%q) missed", id)
		}
		return e.OrgID()
	}
	a, b := idOf(ix, "a"), idOf(ix, "b")
	n := len(ix.names.strs)
	cur := ix
	for i := range 200 {
		org := fmt.Sprintf("org-%d", i)
		cur = cur.Apply([]*session.Session{withRest(fmt.Sprint("x", i), org, "", "")}, []string{fmt.Sprint("x", i-1)})
		if i == 100 {
			cur = cur.Apply(nil, []string{"a"}) // org-a has no session left
		}
	}
	cur = cur.Apply([]*session.Session{withRest("a2", "org-a", "", "")}, nil)
	if idOf(cur, "a2") != a || idOf(cur, "b") != b || idOf(ix, "a") != a {
		t.Fatal("an org's OrgID changed across snapshots")
	}
	if got := cur.ByOrg("org-a"); len(got) != 1 || got[0].ID() != "a2" {
		t.Fatalf("ByOrg(org-a) = %v", ids(got))
	}
	if len(ix.names.strs) != n {
		t.Fatalf("the first snapshot's intern table grew: %d names, had %d", len(ix.names.strs), n)
	}
	if _, ok := ix.nameID("org-150"); ok {
		t.Fatal("the first snapshot sees a name added later")
	}

	// Two Applies on one snapshot: both add a name at the same id.
	var wg sync.WaitGroup
	outs := make([]*Index, 8)
	for i := range outs {
		wg.Go(func() {
			outs[i] = cur.Apply([]*session.Session{withRest("c", fmt.Sprint("fork-", i), "t", "o")}, nil)
		})
	}
	wg.Wait()
	for i, o := range outs {
		e, _ := o.Get("c")
		if e.Org() != fmt.Sprint("fork-", i) || e.Location() != fmt.Sprint("loc-fork-", i) || len(o.ByOrg(e.Org())) != 1 {
			t.Fatalf("fork %d: org %q, location %q", i, e.Org(), e.Location())
		}
		if _, ok := cur.nameID(e.Org()); ok {
			t.Fatalf("fork %d's name is in the snapshot it forked from", i)
		}
	}
}

// TestSidesCopyOnWrite: what an old snapshot's entries keep out of line
// (records and extra records), and the strings it handed out, never change
// whatever later Applies do to the same chunk; concurrent Applies on one
// snapshot stay independent.
func TestSidesCopyOnWrite(t *testing.T) {
	long := strings.Repeat("L", 80) // id + username + device id past inlineLen: all five strings in the record
	var in []*session.Session
	for i := range 64 {
		s := withRest(fmt.Sprint(i), "o", fmt.Sprint("trace-", i), fmt.Sprint("opaque-", i))
		if i%3 == 0 {
			s.DeviceID = long
		}
		if i%5 == 0 {
			s.UpdatedAt = time.Unix(int64(i), 0).In(time.FixedZone("Z", 3600))
		}
		in = append(in, s)
	}
	for name, base := range map[string]*Index{"apply": Empty().Apply(in, nil), "builder": func() *Index {
		b := NewBuilder(0)
		for _, s := range in {
			b.Put(s)
		}
		return b.Index()
	}()} {
		type held struct {
			e                    Entry
			id, dev, trace, opaq string
		}
		var hs []held
		for _, s := range in {
			e, _ := base.Get(s.ID)
			hs = append(hs, held{e, e.ID(), e.DeviceID(), e.TraceID(), e.OpaqueID()})
		}
		check := func(when string) {
			t.Helper()
			for i, h := range hs {
				if !reflect.DeepEqual(h.e.Session(), in[i]) {
					t.Fatalf("%s, %s: entry %d changed: %#v", name, when, i, h.e.Session())
				}
				if h.id != in[i].ID || h.dev != in[i].DeviceID || h.trace != in[i].TraceID || h.opaq != in[i].OpaqueID {
					t.Fatalf("%s, %s: strings of entry %d changed", name, when, i)
				}
				if got, _ := base.Get(in[i].ID); got != h.e {
					t.Fatalf("%s, %s: Get(%q) no longer gives the held Entry", name, when, in[i].ID)
				}
			}
		}
		cur := base
		for round := range 20 {
			var ups []*session.Session
			var dels []string
			for i := round % 4; i < 64; i += 4 {
				s := *in[i]
				s.TraceID = fmt.Sprintf("trace-%d-%d-%s", i, round, strings.Repeat("x", round))
				s.OpaqueID = ""
				if round%2 == 1 {
					s.UpdatedAt = time.Unix(int64(round), 0).In(time.FixedZone("Y", 60))
					s.DeviceID = long + long
				}
				ups = append(ups, &s)
			}
			dels = append(dels, fmt.Sprint((round*7)%64))
			cur = cur.Apply(ups, dels)
			check(fmt.Sprint("round ", round))
		}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				up := *in[1]
				up.TraceID = strings.Repeat(fmt.Sprint(i), 100)
				nx := base.Apply([]*session.Session{&up}, []string{"2"})
				if e, _ := nx.Get("1"); !reflect.DeepEqual(e.Session(), &up) {
					t.Errorf("%s: concurrent Apply %d: %#v", name, i, e.Session())
				}
			})
		}
		wg.Wait()
		check("after concurrent Applies")
	}
}

// TestSideCompaction: records left behind by replaced and deleted
// sessions do not accumulate: within one Apply a side is rebuilt when it
// runs out of room, and the next Apply rebuilds a side before writing it;
// a chunk whose entries keep nothing out of line loses its side.
func TestSideCompaction(t *testing.T) {
	var in []*session.Session
	for i := range 64 {
		in = append(in, withRest(fmt.Sprint(i), "o", strings.Repeat("t", 50), ""))
	}
	ix := Empty().Apply(in, nil)
	side := func(ix *Index) *chunkSide {
		_, xs := ix.slots.get(0)
		return *xs
	}
	live := func(ix *Index) int {
		n := 0
		for e := range ix.All {
			n += len(e.TraceID()) + len(e.OpaqueID()) + allocLen*(len(e.Allocations())-1)
		}
		return n
	}
	zoned := func(s *session.Session) *session.Session {
		s.UpdatedAt = time.Unix(1, 0).In(time.FixedZone("Z", 60)) // an extra record
		return s
	}
	// One Apply replacing every session 50 times, another deleting and
	// re-adding them one by one, then Applies of one change each.
	var ups []*session.Session
	for round := range 50 {
		for i := range 64 {
			ups = append(ups, withRest(fmt.Sprint(i), "o", strings.Repeat("t", 40+round%20), "op"))
		}
	}
	ix = ix.Apply(ups, nil)
	if x, l := side(ix), live(ix); cap(x.rest) > 3*l {
		t.Fatalf("after one large Apply: %d bytes for %d live", cap(x.rest), l)
	}
	for i := range 64 {
		ix = ix.Apply([]*session.Session{zoned(withRest(fmt.Sprint(i), "o", strings.Repeat("u", 30), ""))}, nil)
		if x, l := side(ix), live(ix); len(x.rest) != l || cap(x.rest) > l+l/8+8 || len(x.ext) != i+1 {
			t.Fatalf("after update %d: %d bytes (room %d) for %d live, %d extra records", i, len(x.rest), cap(x.rest), l, len(x.ext))
		}
	}
	for e := range ix.All {
		if e.TraceID() != strings.Repeat("u", 30) || e.OpaqueID() != "" {
			t.Fatalf("%s: trace %q, opaque %q", e.ID(), e.TraceID(), e.OpaqueID())
		}
	}
	// No record and no extra record left: no side.
	var plain []*session.Session
	for i := range 64 {
		plain = append(plain, sess(fmt.Sprint(i), "o", "u", "d", "10.0.0.0/24"))
	}
	ix = ix.Apply(plain, nil)
	if x := side(ix); x != nil {
		t.Fatalf("side left with %d bytes, %d extra records", len(x.rest), len(x.ext))
	}
	for i, s := range plain {
		if e, _ := ix.Get(s.ID); !reflect.DeepEqual(e.Session(), plain[i]) {
			t.Fatalf("%q: %#v", s.ID, e.Session())
		}
	}
}
