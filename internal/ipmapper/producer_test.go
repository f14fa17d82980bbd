package ipmapper

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/session"
)

const radius = session.ProducerRADIUS

// TestSetSessionRefusesAnotherProducersSession: a producer never changes a
// session another producer stored, by set-session or in a batch (a
// per-item error, the rest stored); its own updates keep the producer.
func TestSetSessionRefusesAnotherProducersSession(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	om := session.Session{ID: "om", Org: "a", Allocations: []netip.Prefix{mustPrefix("10.0.0.0/24")}}
	rad := session.Session{ID: "rad", Org: "a", Allocations: []netip.Prefix{mustPrefix("10.0.0.7/32")},
		Attributes: identity.Attributes{Username: "u"}, Producer: radius}
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{om, rad}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		in   session.Session
	}{
		{"RADIUS over the orgmanager's", session.Session{ID: "om", Org: "a", Allocations: []netip.Prefix{mustPrefix("10.9.0.1/32")}, Producer: radius}},
		{"the orgmanager over RADIUS's", session.Session{ID: "rad", Org: "a", Attributes: identity.Attributes{Username: "x"}}},
		{"a third producer", session.Session{ID: "rad", Org: "a", Producer: "lab"}},
	} {
		_, err := f.client.SetSession(ctx, tc.in, 0)
		var re *mapperclient.RemoteError
		if !errors.As(err, &re) || re.Code != 400 || !strings.Contains(re.Message, ErrOtherProducer.Error()) {
			t.Fatalf("%s: want 400 %q, got %v", tc.name, ErrOtherProducer, err)
		}
	}

	// In a batch: the foreign item fails alone.
	n, err := f.client.SetSessionBatch(ctx, []session.Session{
		{ID: "om", Org: "a", Producer: radius, Attributes: identity.Attributes{Username: "hijack"}},
		{ID: "rad2", Org: "a", Producer: radius, Allocations: []netip.Prefix{mustPrefix("10.0.0.8/32")}},
	})
	var be *mapperclient.BatchError
	if n != 1 || !errors.As(err, &be) || be.Failed != 1 || be.Items[0].Index != 0 || !strings.Contains(be.Items[0].Error, ErrOtherProducer.Error()) {
		t.Fatalf("batch: stored %d, %v; want 1 stored and item 0 refused", n, err)
	}

	// Updates by the owner keep the producer, in the table and the bucket.
	if got, err := f.client.SetSession(ctx, session.Session{ID: "rad", Org: "a", Producer: radius, Attributes: identity.Attributes{DeviceID: "msisdn:4479"}}, 0); err != nil ||
		got.Producer != radius || got.Username != "u" {
		t.Fatalf("owner's update: %+v %v", got, err)
	}
	kv := kvOf(t, f.bus.nc)
	for id, want := range map[string]string{"om": "", "rad": radius, "rad2": radius} {
		e, err := kv.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		s, err := session.Decode(id, e.Value())
		if err != nil || s.Producer != want {
			t.Fatalf("%s in the bucket: producer %q, %v; want %q", id, s.Producer, err, want)
		}
		if want == "" && s.Username != "" {
			t.Fatalf("%s was changed by another producer: %+v", id, s)
		}
		list, _ := f.client.GetSessions(ctx, mapperclient.Query{ID: id})
		if len(list) != 1 || list[0].Producer != want {
			t.Fatalf("%s in the table: %+v", id, list)
		}
	}
}

// TestCleanSessionsTakesOnlyTheRequestsProducer: every selector removes
// only the request's producer's sessions, so the orgmanager's deploy
// never removes RADIUS sessions and RADIUS never removes the orgmanager's.
func TestCleanSessionsTakesOnlyTheRequestsProducer(t *testing.T) {
	seed := []session.Session{
		{ID: "om1", Org: "a", Revision: 1, Allocations: []netip.Prefix{mustPrefix("10.0.0.0/24")}},
		{ID: "om2", Org: "a", Revision: 5, Allocations: []netip.Prefix{mustPrefix("10.0.1.0/24")}},
		{ID: "rad1", Org: "a", Allocations: []netip.Prefix{mustPrefix("10.0.0.7/32")}, Producer: radius},
		{ID: "rad2", Org: "a", Allocations: []netip.Prefix{mustPrefix("2001:db8:1:2::/64")}, Producer: radius},
		{ID: "radb", Org: "b", Allocations: []netip.Prefix{mustPrefix("10.0.0.9/32")}, Producer: radius},
	}
	for _, tc := range []struct {
		name    string
		req     mapperclient.CleanRequest
		removed []string
	}{
		{"orgmanager: all of an org", mapperclient.CleanRequest{Org: "a", All: true}, []string{"om1", "om2"}},
		{"orgmanager: revision below", mapperclient.CleanRequest{Org: "a", RevisionBelow: 10}, []string{"om1", "om2"}},
		{"orgmanager: subnets", mapperclient.CleanRequest{Org: "a", Subnets: []netip.Prefix{mustPrefix("10.0.0.0/8"), mustPrefix("2001:db8::/32")}}, []string{"om1", "om2"}},
		{"radius: all of an org", mapperclient.CleanRequest{Org: "a", All: true, Producer: radius}, []string{"rad1", "rad2"}},
		{"radius: revision below", mapperclient.CleanRequest{Org: "a", RevisionBelow: 10, Producer: radius}, []string{"rad1", "rad2"}},
		{"radius: subnets", mapperclient.CleanRequest{Org: "a", Subnets: []netip.Prefix{mustPrefix("10.0.0.0/24")}, Producer: radius}, []string{"rad1"}},
		{"radius: ids", mapperclient.CleanRequest{IDs: []string{"rad1", "radb"}, Producer: radius}, []string{"rad1", "radb"}},
		{"orgmanager: ids", mapperclient.CleanRequest{Org: "a", IDs: []string{"om2"}}, []string{"om2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFixture(t, nil)
			ctx := ctxT(t)
			if _, err := f.client.SetSessionBatch(ctx, seed); err != nil {
				t.Fatal(err)
			}
			n, err := f.client.CleanSessions(ctx, tc.req)
			if err != nil || n != len(tc.removed) {
				t.Fatalf("removed %d, %v; want %d", n, err, len(tc.removed))
			}
			kv := kvOf(t, f.bus.nc)
			for _, s := range seed {
				list, _ := f.client.GetSessions(ctx, mapperclient.Query{ID: s.ID})
				_, kerr := kv.Get(ctx, s.ID)
				gone := slices.Contains(tc.removed, s.ID)
				if gone != (len(list) == 0) || gone != errors.Is(kerr, jetstream.ErrKeyNotFound) {
					t.Errorf("%s: want removed=%v; table has %d, KV err %v", s.ID, gone, len(list), kerr)
				}
			}
		})
	}
}

// TestCleanByIDsOfAnotherProducerIsRefused: an id held by another
// producer refuses the whole request (nothing is removed), as an id of
// another org does; a stray bucket value of another producer is left.
func TestCleanByIDsOfAnotherProducerIsRefused(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{
		{ID: "om1", Org: "a"}, {ID: "rad1", Org: "a", Producer: radius}, {ID: "rad2", Org: "a", Producer: radius},
	}); err != nil {
		t.Fatal(err)
	}
	for _, req := range []mapperclient.CleanRequest{
		{IDs: []string{"rad1", "om1"}, Producer: radius},
		{Org: "a", IDs: []string{"om1", "rad1"}},
	} {
		_, err := f.client.CleanSessions(ctx, req)
		var re *mapperclient.RemoteError
		if !errors.As(err, &re) || re.Code != 400 || !strings.Contains(re.Message, ErrOtherProducer.Error()) {
			t.Fatalf("%+v: want 400 %q, got %v", req, ErrOtherProducer, err)
		}
	}
	for _, id := range []string{"om1", "rad1", "rad2"} {
		if list, _ := f.client.GetSessions(ctx, mapperclient.Query{ID: id}); len(list) != 1 {
			t.Fatalf("%s removed by a refused request", id)
		}
	}

	// A stray value (in the bucket, not in the table) of another producer
	// stays; one of the request's producer goes.
	kv := kvOf(t, f.bus.nc)
	for _, s := range []session.Session{{ID: "stray-om", Org: "a"}, {ID: "stray-rad", Org: "a", Producer: radius}} {
		if _, err := kv.Put(ctx, s.ID, mustJSON(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := f.client.CleanSessions(ctx, mapperclient.CleanRequest{IDs: []string{"stray-om", "stray-rad", "rad2"}, Producer: radius}); err != nil || n != 1 {
		t.Fatalf("removed %d, %v; want 1 (rad2; strays are not counted)", n, err)
	}
	if _, err := kv.Get(ctx, "stray-om"); err != nil {
		t.Fatalf("the orgmanager's stray value was deleted by a RADIUS clean: %v", err)
	}
	if _, err := kv.Get(ctx, "stray-rad"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("RADIUS's stray value left: %v", err)
	}
}

// TestFindFiltersByProducer: GET /sessions' producer filter ("" is the
// orgmanager's) on top of a selector.
func TestFindFiltersByProducer(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{
		{ID: "om1", Org: "a"}, {ID: "rad1", Org: "a", Producer: radius}, {ID: "rad2", Org: "a", Producer: radius},
	}); err != nil {
		t.Fatal(err)
	}
	for prod, want := range map[string][]string{"": {"om1"}, radius: {"rad1", "rad2"}, "lab": nil} {
		found, err := f.svc.Find(Query{Org: "a", ByProducer: true, Producer: prod}, 1)
		if err != nil || found.Total != len(want) || len(want) > 0 && (found.Sessions[0].ID != want[0] || found.Sessions[0].Producer != prod) {
			t.Fatalf("producer %q: %+v %v; want %v", prod, found, err, want)
		}
	}
	if found, err := f.svc.Find(Query{Org: "a"}, 10); err != nil || found.Total != 3 {
		t.Fatalf("no filter: %+v %v", found, err)
	}
	if _, err := f.svc.Find(Query{Org: "a", ByProducer: true, Producer: "Bad"}, 10); !IsInvalid(err) {
		t.Fatalf("invalid producer: %v", err)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
