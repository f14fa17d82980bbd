package ipmapper

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/session"
)

func TestSetSessionMergeRules(t *testing.T) {
	base := session.Session{
		ID: "m", Org: "acme", Revision: 3,
		Allocations: []netip.Prefix{mustPrefix("192.0.2.0/25")},
		Attributes:  identity.Attributes{Username: "alice", DeviceID: "d1", Location: "paris"}, TraceID: "t1",
	}
	tests := []struct {
		name   string
		update session.Session
		want   func(*session.Session)
	}{
		{"empty fields keep stored values", session.Session{ID: "m", Org: "acme"}, func(*session.Session) {}},
		{"revision replaces", session.Session{ID: "m", Org: "acme", Revision: 9}, func(s *session.Session) { s.Revision = 9 }},
		{"empty allocations keep, non-empty replace",
			session.Session{ID: "m", Org: "acme", Allocations: []netip.Prefix{mustPrefix("2001:db8::/64")}},
			func(s *session.Session) { s.Allocations = []netip.Prefix{mustPrefix("2001:db8::/64")} }},
		{"strings replace when set",
			session.Session{ID: "m", Org: "acme", Attributes: identity.Attributes{Username: "bob", DeviceID: "d2", Location: "rome"}, TraceID: "t2"},
			func(s *session.Session) { s.Username, s.DeviceID, s.Location, s.TraceID = "bob", "d2", "rome", "t2" }},
		{"opaque_id may be set when empty", session.Session{ID: "m", Org: "acme", OpaqueID: "o1"},
			func(s *session.Session) { s.OpaqueID = "o1" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := startFixture(t, nil)
			ctx := ctxT(t)
			if _, err := f.client.SetSession(ctx, base, 0); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(time.Minute)
			got, err := f.client.SetSession(ctx, tc.update, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := base
			tc.want(&want)
			want.UpdatedAt = got.UpdatedAt
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got\n%+v\nwant\n%+v", got, want)
			}
			stored, err := f.client.GetSessions(ctx, mapperclient.Query{ID: "m"})
			if err != nil || len(stored) != 1 || !reflect.DeepEqual(stored[0], got) {
				t.Fatalf("stored %+v, %v; want %+v", stored, err, got)
			}
		})
	}
}

func TestSetSessionUnchangedKeepsUpdatedAtAndSkipsWrite(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	s := mkSession(1, "acme")
	first, err := f.client.SetSession(ctx, s, 0)
	if err != nil {
		t.Fatal(err)
	}
	kv := kvOf(t, f.bus.nc)
	e1, _ := kv.Get(ctx, s.ID)
	f.clock.Advance(time.Hour)
	again, err := f.client.SetSession(ctx, s, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !again.UpdatedAt.Equal(first.UpdatedAt) {
		t.Fatalf("updated_at moved on an identical update: %v -> %v", first.UpdatedAt, again.UpdatedAt)
	}
	e2, _ := kv.Get(ctx, s.ID)
	if e1.Revision() != e2.Revision() {
		t.Fatalf("identical update wrote the KV again (revision %d -> %d)", e1.Revision(), e2.Revision())
	}
	if v := metricValue(f.svc.metrics.sessionsSet); v != 1 {
		t.Fatalf("sessions_set_total = %v, want 1", v)
	}
	s.Location = "elsewhere"
	changed, err := f.client.SetSession(ctx, s, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !changed.UpdatedAt.Equal(f.clock.Now()) {
		t.Fatalf("updated_at = %v, want %v", changed.UpdatedAt, f.clock.Now())
	}
}

func TestOpaqueIDIsImmutable(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	s := session.Session{ID: "o", Org: "acme", OpaqueID: "first", Attributes: identity.Attributes{Username: "alice"}}
	if _, err := f.client.SetSession(ctx, s, 0); err != nil {
		t.Fatal(err)
	}
	s.OpaqueID, s.Username = "second", "mallory"
	_, err := f.client.SetSession(ctx, s, 0)
	var re *mapperclient.RemoteError
	if !errors.As(err, &re) || re.Code != 400 || !strings.Contains(re.Message, "opaque_id is immutable") {
		t.Fatalf("want a 400 opaque_id refusal, got %v", err)
	}
	// The refused update changed nothing, username included.
	list, _ := f.client.GetSessions(ctx, mapperclient.Query{ID: "o"})
	if len(list) != 1 || list[0].OpaqueID != "first" || list[0].Username != "alice" {
		t.Fatalf("stored session changed: %+v", list)
	}
	// Same opaque_id, or none, is fine.
	for _, op := range []string{"first", ""} {
		if _, err := f.client.SetSession(ctx, session.Session{ID: "o", Org: "acme", OpaqueID: op, Attributes: identity.Attributes{Location: "x" + op}}, 0); err != nil {
			t.Fatalf("opaque_id %q: %v", op, err)
		}
	}
	// In a batch the refusal is an item error.
	n, err := f.client.SetSessionBatch(ctx, []session.Session{
		{ID: "p", Org: "acme"},
		{ID: "o", Org: "acme", OpaqueID: "third"},
	})
	var be *mapperclient.BatchError
	if !errors.As(err, &be) || n != 1 || be.Failed != 1 || be.Items[0].Index != 1 ||
		!strings.Contains(be.Items[0].Error, "opaque_id") {
		t.Fatalf("batch: stored %d, err %v", n, err)
	}
}
