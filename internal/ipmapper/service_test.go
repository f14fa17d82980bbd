package ipmapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/session"
)

func TestSetSessionStoresPlainSessionJSONAndAnswersEveryQuery(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	in := session.Session{
		ID:          "sess-1",
		Org:         "acme",
		Revision:    7,
		Allocations: []netip.Prefix{mustPrefix("192.0.2.0/24"), mustPrefix("2001:db8:1::/48")},
		Attributes:  identity.Attributes{Username: "alice", DeviceID: "laptop-1", Location: "paris"},

		TraceID:  "trace-1",
		OpaqueID: "radius-42",
	}
	got, err := f.client.SetSession(ctx, in, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Every field comes back exactly as stored, from the in-memory index
	// (sessionindex keeps a compact copy) as from the bucket.
	want := in
	want.UpdatedAt = f.clock.Now()
	exp := f.clock.Now().Add(time.Hour)
	want.ExpiresAt = &exp
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SetSession returned\n%+v\nwant\n%+v", got, want)
	}

	// The bucket holds exactly json.Marshal(session.Session): what every
	// node's subscriber index decodes.
	e, err := kvOf(t, f.bus.nc).Get(ctx, "sess-1")
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.Marshal(want)
	if string(e.Value()) != string(wantJSON) {
		t.Fatalf("KV value\n%s\nwant\n%s", e.Value(), wantJSON)
	}

	for _, q := range []Query{
		{ID: "sess-1"},
		{IP: netip.MustParseAddr("192.0.2.77")},
		{IP: netip.MustParseAddr("::ffff:192.0.2.77")},
		{IP: netip.MustParseAddr("2001:db8:1:2::1")},
		{Org: "acme"},
		{Username: "alice"},
		{DeviceID: "laptop-1"},
	} {
		list, err := f.client.GetSessions(ctx, q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		if len(list) != 1 || !reflect.DeepEqual(list[0], want) {
			t.Fatalf("%+v: got %+v", q, list)
		}
	}
	for _, q := range []Query{
		{ID: "nope"}, {IP: netip.MustParseAddr("198.51.100.1")}, {Org: "other"}, {Username: "bob"}, {DeviceID: "x"},
	} {
		list, err := f.client.GetSessions(ctx, q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		if list == nil || len(list) != 0 {
			t.Fatalf("%+v: want an empty non-nil list, got %#v", q, list)
		}
	}
	if v := metricValue(f.svc.metrics.stored); v != 1 {
		t.Fatalf("svcpf_ipmapper_sessions = %v, want 1", v)
	}
	requestsCounted(t, f.svc, CmdGetSessions, resultOK, 12)
}

func TestGetSessionsLongestPrefixMatch(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	wide := session.Session{ID: "wide", Org: "isp", Allocations: []netip.Prefix{mustPrefix("10.0.0.0/8")}}
	narrow := session.Session{ID: "narrow", Org: "isp", Allocations: []netip.Prefix{mustPrefix("10.1.2.0/24")}}
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{wide, narrow}); err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[string]string{"10.1.2.3": "narrow", "10.1.3.3": "wide", "10.255.0.1": "wide"} {
		list, err := f.client.GetSessions(ctx, Query{IP: netip.MustParseAddr(ip)})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].ID != want {
			t.Fatalf("%s: got %+v, want %s", ip, list, want)
		}
	}
}

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
			stored, err := f.client.GetSessions(ctx, Query{ID: "m"})
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
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != 400 || !strings.Contains(re.Message, "opaque_id is immutable") {
		t.Fatalf("want a 400 opaque_id refusal, got %v", err)
	}
	// The refused update changed nothing, username included.
	list, _ := f.client.GetSessions(ctx, Query{ID: "o"})
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
	var be *BatchError
	if !errors.As(err, &be) || n != 1 || be.Failed != 1 || be.Items[0].Index != 1 ||
		!strings.Contains(be.Items[0].Error, "opaque_id") {
		t.Fatalf("batch: stored %d, err %v", n, err)
	}
}

func TestSetSessionRefusals(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "taken", Org: "acme"}, 0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		s    session.Session
		want string
	}{
		{"missing id", session.Session{Org: "acme"}, "invalid session id"},
		{"id with a dot", session.Session{ID: "a.b", Org: "acme"}, "invalid session id"},
		{"missing org", session.Session{ID: "x"}, "org is required"},
		{"host bits", session.Session{ID: "x", Org: "acme", Allocations: []netip.Prefix{mustPrefix("10.0.0.1/8")}}, "host bits"},
		{"negative revision", session.Session{ID: "x", Org: "acme", Revision: -1}, "negative"},
		{"id of another org", session.Session{ID: "taken", Org: "evil"}, "another organisation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.client.SetSession(ctx, tc.s, 0)
			var re *RemoteError
			if !errors.As(err, &re) || re.Code != 400 || !strings.Contains(re.Message, tc.want) {
				t.Fatalf("want 400 containing %q, got %v", tc.want, err)
			}
		})
	}
	list, _ := f.client.GetSessions(ctx, Query{ID: "taken"})
	if len(list) != 1 || list[0].Org != "acme" {
		t.Fatalf("refused updates changed the table: %+v", list)
	}
	requestsCounted(t, f.svc, CmdSetSession, resultInvalid, float64(len(tests)))
}

// TestErrorReplyFormat checks the wire form of an error on every command:
// the micro status headers and the JSON body.
func TestErrorReplyFormat(t *testing.T) {
	f := startFixture(t, nil)
	for _, tc := range []struct{ subject, body, want string }{
		{SubjectSetSession, `{"session":{"id":"x","org":"a"},"ttl":5}`, "unknown field"},
		{SubjectSetSession, `{"session":{"id":"x","org":"a"}} {}`, "trailing data"},
		{SubjectSetSession, `{"session":{"id":"x","org":"a"},"ttl_seconds":-5}`, "ttl_seconds"},
		{SubjectSetSession, ``, "empty request body"},
		{SubjectSetSessionBatch, `{}`, `"sessions" is required`},
		{SubjectSetSessionBatch, `[1,2]`, "invalid JSON"},
		{SubjectGetSessions, `{}`, "exactly one"},
		{SubjectGetSessions, `{"id":"a","org":"b"}`, "exactly one"},
		{SubjectGetSessions, `{"ip":"10.0.0.300"}`, "invalid ip"},
		{SubjectGetSessions, `{"ip":"fe80::1%eth0"}`, "invalid ip"},
		{SubjectCleanSessions, `{}`, "needs one of"},
		{SubjectCleanSessions, `{"org":"a"}`, "needs one of"},
		{SubjectCleanSessions, `{"org":"a","subnets":[]}`, "subnets is empty"},
		{SubjectCleanSessions, `{"ids":[]}`, "ids is empty"},
		{SubjectCleanSessions, `{"org":"a","revision_below":3,"subnets":["10.0.0.0/8"]}`, "only one of"},
		{SubjectCleanSessions, `{"org":"a","all":true,"ids":["x"]}`, "only one of"},
		{SubjectCleanSessions, `{"revision_below":3}`, "org is required"},
		{SubjectCleanSessions, `{"org":"a","revision_below":-1}`, "positive"},
		{SubjectCleanSessions, `{"ids":["a/b"]}`, "invalid session id"},
		{SubjectCleanSessions, `{"org":"a","subnets":["10.0.0.0/33"]}`, "invalid JSON"},
		{SubjectCleanSessions, `{"org":"a","subnets":["10.0.0.0/8","::ffff:10.0.0.0/104"]}`, "IPv4-mapped IPv6 subnet; use the IPv4 form"},
	} {
		msg, err := f.bus.nc.Request(tc.subject, []byte(tc.body), 10*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.subject, tc.body, err)
		}
		if code := msg.Header.Get(micro.ErrorCodeHeader); code != "400" {
			t.Errorf("%s %s: code header %q, want 400", tc.subject, tc.body, code)
		}
		desc := msg.Header.Get(micro.ErrorHeader)
		var eb ErrorReply
		if err := json.Unmarshal(msg.Data, &eb); err != nil {
			t.Fatalf("%s %s: body %q is not an error object: %v", tc.subject, tc.body, msg.Data, err)
		}
		if !strings.Contains(eb.Error, tc.want) || !strings.Contains(desc, tc.want) {
			t.Errorf("%s %s: error %q / header %q, want %q", tc.subject, tc.body, eb.Error, desc, tc.want)
		}
	}
}

func TestTTLExpiryAndSweep(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	kv := kvOf(t, f.bus.nc)
	got, err := f.client.SetSession(ctx, session.Session{ID: "t", Org: "acme", Attributes: identity.Attributes{Username: "u"}}, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got.ExpiresAt == nil || !got.ExpiresAt.Equal(f.clock.Now().Add(90*time.Second)) {
		t.Fatalf("expires_at = %v", got.ExpiresAt)
	}
	// ttl 0 keeps the expiry; a fresh ttl moves it.
	got, _ = f.client.SetSession(ctx, session.Session{ID: "t", Org: "acme", Attributes: identity.Attributes{Location: "l"}}, 0)
	if got.ExpiresAt == nil || !got.ExpiresAt.Equal(f.clock.Now().Add(90*time.Second)) {
		t.Fatalf("ttl 0 changed expires_at: %v", got.ExpiresAt)
	}
	f.clock.Advance(60 * time.Second)
	got, _ = f.client.SetSession(ctx, session.Session{ID: "t", Org: "acme"}, 90*time.Second)
	if !got.ExpiresAt.Equal(f.clock.Now().Add(90 * time.Second)) {
		t.Fatalf("refresh: expires_at = %v", got.ExpiresAt)
	}
	// A negative ttl removes the expiry; the session no longer expires.
	if _, err := f.client.SetSession(ctx, session.Session{ID: "forever", Org: "acme"}, time.Second); err != nil {
		t.Fatal(err)
	}
	got, _ = f.client.SetSession(ctx, session.Session{ID: "forever", Org: "acme"}, -1)
	if got.ExpiresAt != nil {
		t.Fatalf("negative ttl kept expires_at %v", got.ExpiresAt)
	}

	f.clock.Advance(91 * time.Second)
	// Expired: gone for readers at once, still in the bucket until swept.
	if list, _ := f.client.GetSessions(ctx, Query{ID: "t"}); len(list) != 0 {
		t.Fatalf("expired session still answered: %+v", list)
	}
	if _, err := kv.Get(ctx, "t"); err != nil {
		t.Fatalf("expired session left the bucket before the sweep: %v", err)
	}
	n, err := f.svc.sweep()
	if err != nil || n != 1 {
		t.Fatalf("sweep removed %d, %v; want 1", n, err)
	}
	if _, err := kv.Get(ctx, "t"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("swept session still in the bucket: %v", err)
	}
	if list, _ := f.client.GetSessions(ctx, Query{Org: "acme"}); len(list) != 1 || list[0].ID != "forever" {
		t.Fatalf("after sweep: %+v", list)
	}
	if v := metricValue(f.svc.metrics.removedExpired); v != 1 {
		t.Fatalf("removed expired = %v", v)
	}
}

func TestExpiredSessionIsReplacedNotMerged(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "e", Org: "a", OpaqueID: "o1", Attributes: identity.Attributes{Username: "old"}}, time.Second); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(2 * time.Second)
	// Not swept yet, but expired: another org may take the id, with a new opaque_id.
	got, err := f.client.SetSession(ctx, session.Session{ID: "e", Org: "b", OpaqueID: "o2"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Username != "" || got.ExpiresAt != nil || got.Org != "b" {
		t.Fatalf("expired session leaked into the new one: %+v", got)
	}
	if n, _ := f.svc.sweep(); n != 0 {
		t.Fatalf("sweep removed the replacement")
	}
}

func TestSweeperRemovesExpiredSessionsOnItsOwn(t *testing.T) {
	f := startFixture(t, func(c *Config) {
		c.Clock = nil // real time
		c.SweepInterval = 20 * time.Millisecond
	})
	ctx := ctxT(t)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "short", Org: "a"}, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.SetSession(ctx, session.Session{ID: "long", Org: "a"}, 0); err != nil {
		t.Fatal(err)
	}
	kv := kvOf(t, f.bus.nc)
	eventually(t, "the sweeper to delete the expired key", func() bool {
		_, err := kv.Get(ctx, "short")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if _, err := kv.Get(ctx, "long"); err != nil {
		t.Fatalf("sweeper removed a session without expiry: %v", err)
	}
}

func TestSetSessionBatchItemErrors(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "other", Org: "z"}, 0); err != nil {
		t.Fatal(err)
	}
	batch := []session.Session{
		{ID: "a", Org: "o", Attributes: identity.Attributes{Username: "u1"}},
		{ID: "", Org: "o"},
		{ID: "b", Org: "o"},
		{ID: "other", Org: "o"},
		{ID: "a", Org: "o", Attributes: identity.Attributes{DeviceID: "d1"}}, // merges over item 0
		{ID: "c"},
	}
	n, err := f.client.SetSessionBatch(ctx, batch)
	var be *BatchError
	if !errors.As(err, &be) {
		t.Fatalf("want *BatchError, got %v", err)
	}
	if n != 3 || be.Stored != 3 || be.Failed != 3 {
		t.Fatalf("stored %d, BatchError %+v", n, be)
	}
	var idx []int
	for _, it := range be.Items {
		idx = append(idx, it.Index)
	}
	if !slices.Equal(idx, []int{1, 3, 5}) {
		t.Fatalf("failed indexes %v, want [1 3 5]: %v", idx, be)
	}
	if !strings.Contains(be.Error(), "3 of 6 sessions not stored") {
		t.Fatalf("error text: %v", be)
	}
	list, _ := f.client.GetSessions(ctx, Query{ID: "a"})
	if len(list) != 1 || list[0].Username != "u1" || list[0].DeviceID != "d1" {
		t.Fatalf("duplicate id in a batch did not merge: %+v", list)
	}
	list, _ = f.client.GetSessions(ctx, Query{Org: "o"})
	if len(list) != 2 {
		t.Fatalf("org o has %d sessions, want 2", len(list))
	}
	// Empty batch: nothing to do, no request.
	if n, err := f.client.SetSessionBatch(ctx, nil); n != 0 || err != nil {
		t.Fatalf("empty batch: %d, %v", n, err)
	}
	// Batch TTL.
	if _, err := f.client.SetSessionBatchTTL(ctx, []session.Session{{ID: "ttl", Org: "o"}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	list, _ = f.client.GetSessions(ctx, Query{ID: "ttl"})
	if len(list) != 1 || list[0].ExpiresAt == nil || !list[0].ExpiresAt.Equal(f.clock.Now().Add(time.Minute)) {
		t.Fatalf("batch ttl: %+v", list)
	}
}

// TestSetSessionBatchSplitsOverMaxPayload sends more than one NATS message's
// worth of sessions; the client must split it and every session must land.
func TestSetSessionBatchSplitsOverMaxPayload(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	const n = 10000
	sessions := make([]session.Session, n)
	size := 0
	for i := range sessions {
		sessions[i] = mkSession(i, "big")
		sessions[i].TraceID = strings.Repeat("t", 100)
		b, _ := json.Marshal(sessions[i])
		size += len(b)
	}
	if size < 2*int(f.bus.nc.MaxPayload()) {
		t.Fatalf("test batch is only %d bytes; max payload %d", size, f.bus.nc.MaxPayload())
	}
	// One session larger than a message is refused by the client, by index.
	huge := session.Session{ID: "huge", Org: "big", Attributes: identity.Attributes{Location: strings.Repeat("x", int(f.bus.nc.MaxPayload()))}}
	sessions = slices.Insert(sessions, 5000, huge)

	stored, err := f.client.SetSessionBatch(ctx, sessions)
	var be *BatchError
	if !errors.As(err, &be) || be.Failed != 1 || be.Items[0].Index != 5000 || be.Items[0].ID != "huge" {
		t.Fatalf("want one item error for index 5000, got %v", err)
	}
	if stored != n {
		t.Fatalf("stored %d, want %d", stored, n)
	}
	requests := metricValue(f.svc.metrics.requests.WithLabelValues(CmdSetSessionBatch, resultOK))
	if requests < 3 {
		t.Fatalf("%d bytes went in %v requests; want a split", size, requests)
	}
	st, err := kvOf(t, f.bus.nc).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Values() != n {
		t.Fatalf("bucket holds %d values, want %d", st.Values(), n)
	}
	// get-sessions pages through the same volume.
	list, err := f.client.GetSessions(ctx, Query{Org: "big"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n {
		t.Fatalf("got %d sessions by org, want %d", len(list), n)
	}
	for i := range list {
		if list[i].ID != fmt.Sprintf("s%06d", i) {
			t.Fatalf("list[%d] = %s: not in id order or not complete", i, list[i].ID)
		}
	}
	if pages := metricValue(f.svc.metrics.requests.WithLabelValues(CmdGetSessions, resultOK)); pages < 3 {
		t.Fatalf("get-sessions of %d bytes took %v pages", size, pages)
	}
}

func TestCleanSessionsModes(t *testing.T) {
	seed := []session.Session{
		{ID: "a1", Org: "a", Revision: 1, Allocations: []netip.Prefix{mustPrefix("10.0.0.0/24")}},
		{ID: "a2", Org: "a", Revision: 2, Allocations: []netip.Prefix{mustPrefix("10.0.1.0/24"), mustPrefix("2001:db8:a::/48")}},
		{ID: "a3", Org: "a", Revision: 3, Allocations: []netip.Prefix{mustPrefix("10.8.0.0/16")}},
		{ID: "a4", Org: "a", Revision: 3},
		{ID: "b1", Org: "b", Revision: 1, Allocations: []netip.Prefix{mustPrefix("10.0.0.0/24")}},
	}
	tests := []struct {
		name    string
		req     CleanRequest
		removed []string
	}{
		{"all of an org", CleanRequest{Org: "a", All: true}, []string{"a1", "a2", "a3", "a4"}},
		{"revision below", CleanRequest{Org: "a", RevisionBelow: 3}, []string{"a1", "a2"}},
		{"revision below, none", CleanRequest{Org: "a", RevisionBelow: 1}, nil},
		// Decision: "within subnets" is containment. An allocation wider
		// than the subnet only overlaps it and is not selected; one equal
		// to it or inside it is, and any one such allocation selects the
		// session.
		{"subnet inside an allocation selects nothing", CleanRequest{Org: "a", Subnets: []netip.Prefix{mustPrefix("10.8.3.0/24")}}, nil},
		{"subnet equal to an allocation", CleanRequest{Org: "a", Subnets: []netip.Prefix{mustPrefix("10.8.0.0/16")}}, []string{"a3"}},
		{"subnet covering allocations, other org untouched", CleanRequest{Org: "a", Subnets: []netip.Prefix{mustPrefix("10.0.0.0/23")}}, []string{"a1", "a2"}},
		{"one allocation of several inside", CleanRequest{Org: "a", Subnets: []netip.Prefix{mustPrefix("10.0.1.0/24")}}, []string{"a2"}},
		{"several subnets, one with an allocation inside", CleanRequest{Org: "a", Subnets: []netip.Prefix{mustPrefix("10.8.0.0/17"), mustPrefix("10.0.0.0/16")}}, []string{"a1", "a2"}},
		{"v6 subnet", CleanRequest{Org: "a", Subnets: []netip.Prefix{mustPrefix("2001:db8::/32")}}, []string{"a2"}},
		{"subnet with host bits is masked", CleanRequest{Org: "a", Subnets: []netip.Prefix{mustPrefix("10.0.0.77/24")}}, []string{"a1"}},
		{"disjoint subnet", CleanRequest{Org: "a", Subnets: []netip.Prefix{mustPrefix("192.168.0.0/16")}}, nil},
		{"ids", CleanRequest{IDs: []string{"a1", "b1", "missing", "a1"}}, []string{"a1", "b1"}},
		{"ids with matching org", CleanRequest{Org: "a", IDs: []string{"a3", "a4"}}, []string{"a3", "a4"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := startFixture(t, nil)
			ctx := ctxT(t)
			if _, err := f.client.SetSessionBatch(ctx, seed); err != nil {
				t.Fatal(err)
			}
			n, err := f.client.CleanSessions(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(tc.removed) {
				t.Fatalf("removed %d, want %d", n, len(tc.removed))
			}
			kv := kvOf(t, f.bus.nc)
			for _, s := range seed {
				list, _ := f.client.GetSessions(ctx, Query{ID: s.ID})
				_, kerr := kv.Get(ctx, s.ID)
				gone := slices.Contains(tc.removed, s.ID)
				if gone != (len(list) == 0) || gone != errors.Is(kerr, jetstream.ErrKeyNotFound) {
					t.Errorf("%s: want removed=%v; table has %d, KV err %v", s.ID, gone, len(list), kerr)
				}
			}
			if v := metricValue(f.svc.metrics.removedClean); v != float64(len(tc.removed)) {
				t.Fatalf("removed_total{clean} = %v", v)
			}
		})
	}
}

func TestCleanSessionsRefusals(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{{ID: "a1", Org: "a"}, {ID: "b1", Org: "b"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  CleanRequest
		want string
	}{
		{"empty", CleanRequest{}, "needs one of"},
		{"org alone", CleanRequest{Org: "a"}, "needs one of"},
		{"empty non-nil ids", CleanRequest{Org: "a", IDs: []string{}}, "ids is empty"},
		{"empty non-nil subnets", CleanRequest{Org: "a", Subnets: []netip.Prefix{}}, "subnets is empty"},
		{"ambiguous", CleanRequest{Org: "a", RevisionBelow: 2, Subnets: []netip.Prefix{mustPrefix("10.0.0.0/8")}}, "only one of"},
		{"subnets without org", CleanRequest{Subnets: []netip.Prefix{mustPrefix("10.0.0.0/8")}}, "org is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := f.client.CleanSessions(ctx, tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
	// An id of another org refuses the whole request: nothing is removed.
	_, err := f.client.CleanSessions(ctx, CleanRequest{Org: "a", IDs: []string{"a1", "b1"}})
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != 400 || !strings.Contains(re.Message, "not in org") {
		t.Fatalf("want 400 org mismatch, got %v", err)
	}
	for _, id := range []string{"a1", "b1"} {
		if list, _ := f.client.GetSessions(ctx, Query{ID: id}); len(list) != 1 {
			t.Fatalf("%s removed by a refused request", id)
		}
	}
}

func TestCleanSessionsSplitsLongIDLists(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	const n = 30000
	sessions := make([]session.Session, n)
	ids := make([]string, n)
	for i := range sessions {
		sessions[i] = session.Session{ID: fmt.Sprintf("%0100d", i), Org: "a"}
		ids[i] = sessions[i].ID
	}
	if _, err := f.client.SetSessionBatch(ctx, sessions); err != nil {
		t.Fatal(err)
	}
	removed, err := f.client.CleanSessions(ctx, CleanRequest{Org: "a", IDs: ids})
	if err != nil || removed != n {
		t.Fatalf("removed %d, %v; want %d", removed, err, n)
	}
	if reqs := metricValue(f.svc.metrics.requests.WithLabelValues(CmdCleanSessions, resultOK)); reqs < 3 {
		t.Fatalf("%d ids of 100 bytes went in %v requests", n, reqs)
	}
	if v := metricValue(f.svc.metrics.stored); v != 0 {
		t.Fatalf("%v sessions left", v)
	}
}

// TestKVWriteFailure uses a bucket whose values may not exceed
// 300 bytes: the JetStream server itself refuses the larger writes.
func TestKVWriteFailure(t *testing.T) {
	b := startBus(t)
	ctx := ctxT(t)
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: session.Bucket, MaxValueSize: 300}); err != nil {
		t.Fatal(err)
	}
	f := startFixtureOn(t, b, nil)
	orig := session.Session{ID: "k", Org: "a", Attributes: identity.Attributes{Username: "small"}}
	if _, err := f.client.SetSession(ctx, orig, 0); err != nil {
		t.Fatal(err)
	}
	big := session.Session{ID: "k", Org: "a", Attributes: identity.Attributes{Username: strings.Repeat("u", 400)}}
	_, err = f.client.SetSession(ctx, big, 0)
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != 500 || !strings.Contains(re.Message, "store session") {
		t.Fatalf("want a 500 store error, got %v", err)
	}
	list, _ := f.client.GetSessions(ctx, Query{ID: "k"})
	if len(list) != 1 || list[0].Username != "small" {
		t.Fatalf("table changed after a failed write: %+v", list)
	}
	// In a batch only the failing item is refused.
	n, err := f.client.SetSessionBatch(ctx, []session.Session{{ID: "ok1", Org: "a"}, big, {ID: "ok2", Org: "a"}})
	var be *BatchError
	if !errors.As(err, &be) || n != 2 || be.Failed != 1 || be.Items[0].Index != 1 || !strings.Contains(be.Items[0].Error, "store session") {
		t.Fatalf("batch: stored %d, %v", n, err)
	}
	if list, _ := f.client.GetSessions(ctx, Query{Org: "a"}); len(list) != 3 || list[0].Username != "small" {
		t.Fatalf("after batch: %+v", list)
	}
	if v := metricValue(f.svc.metrics.kvWriteErrors); v != 2 {
		t.Fatalf("kv write errors = %v, want 2", v)
	}
	requestsCounted(t, f.svc, CmdSetSession, resultError, 1)

	// A failed write re-reads its key: if the bucket holds something else
	// (here written behind the IP Mapper's back, as a write whose ack was
	// lost would be), the table follows the bucket.
	landed := session.Session{ID: "k", Org: "a", Attributes: identity.Attributes{Username: "landed"}, Allocations: []netip.Prefix{}, UpdatedAt: f.clock.Now()}
	lb, _ := json.Marshal(landed)
	if _, err := kvOf(t, b.nc).Put(ctx, "k", lb); err != nil {
		t.Fatal(err)
	}
	if err := kvOf(t, b.nc).Delete(ctx, "ok1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.SetSession(ctx, big, 0); err == nil {
		t.Fatal("oversized write accepted")
	}
	if list, _ := f.client.GetSessions(ctx, Query{ID: "k"}); len(list) != 1 || list[0].Username != "landed" {
		t.Fatalf("table not reconciled with the bucket: %+v", list)
	}
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{{ID: "ok1", Org: "a", Attributes: identity.Attributes{Username: strings.Repeat("u", 400)}}}); err == nil {
		t.Fatal("oversized batch item accepted")
	}
	if list, _ := f.client.GetSessions(ctx, Query{ID: "ok1"}); len(list) != 0 {
		t.Fatalf("session deleted in the bucket still in the table: %+v", list)
	}
}

// TestKVDeleteFailureKeepsSessions seals the bucket's stream, after which
// JetStream refuses every write: deletes (clean, sweep) must then fail with
// an error and leave the table as it was.
func TestKVDeleteFailureKeepsSessions(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{{ID: "a1", Org: "a"}, {ID: "a2", Org: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.SetSession(ctx, session.Session{ID: "a3", Org: "a"}, time.Second); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(f.bus.nc)
	stream, err := js.Stream(ctx, "KV_"+session.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.Sealed = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	_, err = f.client.CleanSessions(ctx, CleanRequest{Org: "a", All: true})
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != 500 || !strings.Contains(re.Message, "removed 0 of 3") {
		t.Fatalf("want a 500 delete error, got %v", err)
	}
	f.clock.Advance(time.Minute)
	if n, err := f.svc.sweep(); err == nil || n != 0 {
		t.Fatalf("sweep on a sealed bucket: removed %d, err %v", n, err)
	}
	if _, err := f.client.SetSession(ctx, session.Session{ID: "a1", Org: "a", Attributes: identity.Attributes{Username: "new"}}, 0); err == nil {
		t.Fatal("set-session on a sealed bucket succeeded")
	}
	list, _ := f.client.GetSessions(ctx, Query{Org: "a"})
	if len(list) != 2 || list[0].Username != "" {
		t.Fatalf("table changed although every write failed: %+v", list)
	}
	// The expired one is hidden from readers but still held for the next sweep.
	if v := metricValue(f.svc.metrics.stored); v != 3 {
		t.Fatalf("table holds %v sessions, want 3", v)
	}
	if v := metricValue(f.svc.metrics.kvWriteErrors); v != 5 {
		t.Fatalf("kv write errors = %v, want 5", v)
	}
}

func TestRestartReloadsFromBucket(t *testing.T) {
	b := startBus(t)
	ctx := ctxT(t)
	f1 := startFixtureOn(t, b, nil)
	var batch []session.Session
	for i := range 500 {
		batch = append(batch, mkSession(i, "r"))
	}
	if _, err := f1.client.SetSessionBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if _, err := f1.client.SetSession(ctx, session.Session{ID: "exp", Org: "r"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := f1.client.CleanSessions(ctx, CleanRequest{IDs: []string{"s000000"}}); err != nil {
		t.Fatal(err)
	}
	before, _ := f1.client.GetSessions(ctx, Query{Org: "r"})
	if err := f1.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := f1.client.GetSessions(ctx, Query{Org: "r"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("stopped service still answers: %v", err)
	}
	// A value that is not a session is skipped at load, not fatal.
	if _, err := kvOf(t, b.nc).Put(ctx, "garbage", []byte("{not json")); err != nil {
		t.Fatal(err)
	}

	clock := newFakeClock()
	clock.Advance(2 * time.Minute) // "exp" expired while the IP Mapper was down
	svc, err := New(Config{Conn: b.nc, Clock: clock.Now, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Ready() {
		t.Fatal("ready before Start")
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if !svc.Ready() {
		t.Fatal("not ready after Start")
	}
	if v := metricValue(svc.metrics.loadSkipped); v != 1 {
		t.Fatalf("load skipped %v, want 1", v)
	}
	after, err := f1.client.GetSessions(ctx, Query{Org: "r"})
	if err != nil {
		t.Fatal(err)
	}
	var wantAfter []session.Session
	for _, s := range before {
		if s.ID != "exp" {
			wantAfter = append(wantAfter, s)
		}
	}
	if len(after) != 499 || !reflect.DeepEqual(after, wantAfter) {
		t.Fatalf("reloaded %d sessions, want the 499 unexpired ones as before", len(after))
	}
	if _, err := kvOf(t, b.nc).Get(ctx, "exp"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("session that expired during the downtime not swept at start: %v", err)
	}
	// Reloaded state takes part in merges: org and opaque rules still apply.
	if _, err := f1.client.SetSession(ctx, session.Session{ID: "s000001", Org: "other"}, 0); err == nil {
		t.Fatal("reloaded session's org not enforced")
	}
	got, err := f1.client.SetSession(ctx, session.Session{ID: "s000001", Org: "r", Attributes: identity.Attributes{Location: "moved"}}, 0)
	if err != nil || got.Username != "user1" {
		t.Fatalf("merge over a reloaded session: %+v, %v", got, err)
	}
}

func TestServiceKeepsAnsweringAfterNATSRestart(t *testing.T) {
	b := startBus(t)
	ctx := ctxT(t)
	f := startFixtureOn(t, b, nil)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "before", Org: "a"}, 0); err != nil {
		t.Fatal(err)
	}
	port := b.srv.Port()
	b.srv.Shutdown()
	srv, err := natsbusRestart(b.dir, port)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = srv
	eventually(t, "the IP Mapper to answer after the NATS restart", func() bool {
		_, err := f.client.SetSession(ctx, session.Session{ID: "after", Org: "a"}, 0)
		return err == nil
	})
	list, err := f.client.GetSessions(ctx, Query{Org: "a"})
	if err != nil || len(list) != 2 {
		t.Fatalf("after restart: %+v, %v", list, err)
	}
	for _, id := range []string{"before", "after"} {
		if _, err := kvOf(t, b.nc).Get(ctx, id); err != nil {
			t.Fatalf("%s not in the bucket after the NATS restart: %v", id, err)
		}
	}
}

func TestClientWithoutServiceIsUnavailable(t *testing.T) {
	b := startBus(t)
	c, err := NewClient(ClientConfig{Conn: b.nc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetSession(ctxT(t), session.Session{ID: "x", Org: "a"}, 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("want ErrUnavailable, got %v", err)
	}
}

func TestConfigChecks(t *testing.T) {
	b := startBus(t)
	for _, cfg := range []Config{
		{},
		{Conn: b.nc, Replicas: -1},
		{Conn: b.nc, Replicas: 7},
		{Conn: b.nc, SweepInterval: -time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	if _, err := NewClient(ClientConfig{}); err == nil {
		t.Error("NewClient without Conn accepted")
	}
	svc, err := New(Config{Conn: b.nc})
	if err != nil {
		t.Fatal(err)
	}
	if svc.cfg.PurgeDeletesAfter != 24*time.Hour {
		t.Errorf("PurgeDeletesAfter default %v, want 24h", svc.cfg.PurgeDeletesAfter)
	}
	if err := svc.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if err := svc.Start(ctxT(t)); err == nil {
		t.Error("second Start accepted")
	}
}

func TestMicroServiceIdentity(t *testing.T) {
	f := startFixture(t, nil)
	msg, err := f.bus.nc.Request("$SRV.INFO."+ServiceName, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
	}
	slices.Sort(subjects)
	want := []string{SubjectCleanSessions, SubjectGetSessions, SubjectSetSession, SubjectSetSessionBatch}
	if info.Name != "ipmapper" || !slices.Equal(subjects, want) {
		t.Fatalf("service %q endpoints %v, want %v", info.Name, subjects, want)
	}
}

// TestStartCanBeRetried starts the IP Mapper while NATS is down: Start fails,
// and a later Start, once NATS is back, succeeds.
func TestStartCanBeRetried(t *testing.T) {
	b := startBus(t)
	port, url := b.srv.Port(), b.srv.ClientURL()
	b.srv.Shutdown()
	nc, err := natsbus.Connect(url, "retry", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	svc, err := New(Config{Conn: nc, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := svc.Start(short); err == nil {
		t.Fatal("Start succeeded without NATS")
	}
	if svc.Ready() {
		t.Fatal("ready after a failed Start")
	}
	if b.srv, err = natsbusRestart(b.dir, port); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Start to succeed once NATS is back", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return svc.Start(ctx) == nil
	})
	defer svc.Stop()
	if !svc.Ready() {
		t.Fatal("not ready after Start")
	}
}

// TestWriteDuringDisconnectFailsAndNeverLands: a set-session while NATS is
// away fails, and nothing of it reaches the bucket once NATS is back (the
// connection keeps no reconnect buffer to flush it later).
func TestWriteDuringDisconnectFailsAndNeverLands(t *testing.T) {
	b := startBus(t)
	f := startFixtureOn(t, b, func(c *Config) { c.WriteTimeout = 2 * time.Second })
	ctx := ctxT(t)
	port := b.srv.Port()
	b.srv.Shutdown()
	eventually(t, "the client to notice the outage", func() bool { return b.nc.Status() != nats.CONNECTED })

	body, _ := json.Marshal(SetSessionRequest{Session: session.Session{ID: "late", Org: "a"}})
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, _, err := f.svc.setSession(wctx, body); err == nil || !strings.Contains(err.Error(), "store session late") {
		t.Fatalf("set-session while NATS is down: %v, want a store error", err)
	}

	srv, err := natsbusRestart(b.dir, port)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = srv
	eventually(t, "the IP Mapper to answer again", func() bool {
		_, err := f.client.SetSession(ctx, session.Session{ID: "after", Org: "a"}, 0)
		return err == nil
	})
	// "after" went through the same connection later, so a buffered "late"
	// would be in the bucket by now.
	if _, err := kvOf(t, b.nc).Get(ctx, "late"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("write that failed during the outage is in the bucket: %v", err)
	}
	if list, _ := f.client.GetSessions(ctx, Query{ID: "late"}); len(list) != 0 {
		t.Fatalf("failed write in the table: %+v", list)
	}
}

// TestCleanByIDsDeletesStrayBucketKeys: ids the table does not hold are
// deleted from the bucket when it holds them (a failed write that landed),
// without being counted; ids nowhere get no delete marker.
func TestCleanByIDsDeletesStrayBucketKeys(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{{ID: "a1", Org: "a"}, {ID: "b1", Org: "b"}}); err != nil {
		t.Fatal(err)
	}
	kv := kvOf(t, f.bus.nc)
	// Written behind the IP Mapper's back, as a write whose failure was
	// reported but which landed later would be.
	for _, s := range []session.Session{{ID: "stray-a", Org: "a"}, {ID: "stray-b", Org: "b"}} {
		v, _ := json.Marshal(s)
		if _, err := kv.Put(ctx, s.ID, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "stray-garbage", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	inBucket := func(id string) bool {
		_, err := kv.Get(ctx, id)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	// A held id of another org still refuses the whole request, strays
	// included.
	_, err := f.client.CleanSessions(ctx, CleanRequest{Org: "a", IDs: []string{"b1", "stray-a"}})
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != 400 || !strings.Contains(re.Message, "not in org") {
		t.Fatalf("want 400 org mismatch, got %v", err)
	}
	if !inBucket("stray-a") || !inBucket("b1") {
		t.Fatal("a refused clean deleted something")
	}

	// With an org, only a stray session of that org is deleted.
	n, err := f.client.CleanSessions(ctx, CleanRequest{Org: "a", IDs: []string{"stray-b", "stray-garbage", "stray-a", "a1"}})
	if err != nil || n != 1 {
		t.Fatalf("removed %d, %v; want 1 (a1; strays are not counted)", n, err)
	}
	for id, want := range map[string]bool{"a1": false, "stray-a": false, "stray-b": true, "stray-garbage": true, "b1": true} {
		if got := inBucket(id); got != want {
			t.Errorf("%s in the bucket: %v, want %v", id, got, want)
		}
	}

	// Without an org, any stray value goes; an id that is nowhere costs no
	// delete marker.
	n, err = f.client.CleanSessions(ctx, CleanRequest{IDs: []string{"never", "stray-b", "stray-garbage"}})
	if err != nil || n != 0 {
		t.Fatalf("removed %d, %v; want 0", n, err)
	}
	if inBucket("stray-b") || inBucket("stray-garbage") {
		t.Fatal("stray values left in the bucket")
	}
	if _, err := kv.History(ctx, "never"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("an id that was never stored got a delete marker: %v", err)
	}
	if v := metricValue(f.svc.metrics.removedClean); v != 1 {
		t.Fatalf("removed_total{clean} = %v, want 1", v)
	}
	if v := metricValue(f.svc.metrics.stored); v != 1 {
		t.Fatalf("table holds %v sessions, want 1 (b1)", v)
	}
}

// TestGetSessionsByIPSkipsExpiredWinner: an expired session not swept yet
// must not hide the next session covering the address.
func TestGetSessionsByIPSkipsExpiredWinner(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	set := func(s session.Session, ttl time.Duration) {
		t.Helper()
		if _, err := f.client.SetSession(ctx, s, ttl); err != nil {
			t.Fatal(err)
		}
	}
	set(session.Session{ID: "wide", Org: "o", Allocations: []netip.Prefix{mustPrefix("10.0.0.0/8")}}, 0)
	set(session.Session{ID: "mid", Org: "o", Allocations: []netip.Prefix{mustPrefix("10.1.0.0/16")}}, 2*time.Minute)
	set(session.Session{ID: "narrow", Org: "o", Allocations: []netip.Prefix{mustPrefix("10.1.2.0/24")}}, time.Minute)
	// Two holders of one prefix: the later one answers while it lives.
	set(session.Session{ID: "older", Org: "o", Allocations: []netip.Prefix{mustPrefix("192.0.2.0/24")}}, 0)
	set(session.Session{ID: "newer", Org: "o", Allocations: []netip.Prefix{mustPrefix("192.0.2.0/24")}}, time.Minute)
	set(session.Session{ID: "alone", Org: "o", Allocations: []netip.Prefix{mustPrefix("2001:db8::/64")}}, time.Minute)

	check := func(when string, want map[string]string) {
		t.Helper()
		for ip, id := range want {
			list, err := f.client.GetSessions(ctx, Query{IP: netip.MustParseAddr(ip)})
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if len(list) == 1 {
				got = list[0].ID
			}
			if len(list) > 1 || got != id {
				t.Errorf("%s: %s → %+v, want %q", when, ip, list, id)
			}
		}
	}
	check("before expiry", map[string]string{"10.1.2.3": "narrow", "10.1.9.9": "mid", "192.0.2.7": "newer", "2001:db8::1": "alone"})
	f.clock.Advance(90 * time.Second)
	check("narrow expired", map[string]string{"10.1.2.3": "mid", "10.1.9.9": "mid", "192.0.2.7": "older", "2001:db8::1": ""})
	f.clock.Advance(time.Minute)
	check("mid expired too", map[string]string{"10.1.2.3": "wide", "10.1.9.9": "wide", "192.0.2.7": "older"})
	// Nothing was swept: the answers came from the table with the expired
	// sessions still in it.
	if v := metricValue(f.svc.metrics.stored); v != 6 {
		t.Fatalf("table holds %v sessions, want 6", v)
	}
}

// TestGetSessionsOversizedSessionIsAnError stores a session that fits in
// the bucket but not, with the reply's envelope, in a NATS message: the
// request must get a 500 at once, not a timeout.
func TestGetSessionsOversizedSessionIsAnError(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	maxPayload := int(f.bus.nc.MaxPayload())
	// Built from two set-sessions (each request fits in a message; the
	// merged session is larger than either), sized exactly: valueSize
	// bytes of JSON in the bucket.
	build := func(id string, valueSize int) {
		t.Helper()
		want := session.Session{ID: id, Org: "o", Allocations: []netip.Prefix{}, Attributes: identity.Attributes{Username: strings.Repeat("u", maxPayload/2)}, UpdatedAt: f.clock.Now()}
		base, _ := json.Marshal(want)
		want.Location = strings.Repeat("l", valueSize-len(base)-len(`,"location":""`))
		if v, _ := json.Marshal(want); len(v) != valueSize {
			t.Fatalf("test arithmetic: value is %d bytes, want %d", len(v), valueSize)
		}
		if _, err := f.client.SetSession(ctx, session.Session{ID: id, Org: "o", Attributes: identity.Attributes{Username: want.Username}}, 0); err != nil {
			t.Fatal(err)
		}
		got, err := f.client.SetSession(ctx, session.Session{ID: id, Org: "o", Attributes: identity.Attributes{Location: want.Location}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kvOf(t, f.bus.nc).Get(ctx, id)
		if err != nil || len(e.Value()) != valueSize || got.Location != want.Location {
			t.Fatalf("stored %d bytes (%v), want %d", len(e.Value()), err, valueSize)
		}
	}
	// Over the page budget but within a message: still answered.
	build("fits", maxPayload-replyOverhead/2)
	// `{"sessions":[` + value + `]}` is one byte more than a message.
	build("huge", maxPayload-14)

	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if list, err := f.client.GetSessions(qctx, Query{ID: "fits"}); err != nil || len(list) != 1 {
		t.Fatalf("session within a message: %d sessions, %v", len(list), err)
	}
	for _, q := range []Query{{ID: "huge"}, {Org: "o"}} { // by org: "fits" on page 1, then "huge"
		_, err := f.client.GetSessions(qctx, q)
		var re *RemoteError
		if !errors.As(err, &re) || re.Code != 500 || !strings.Contains(re.Message, "session huge is too large for a get-sessions reply") {
			t.Fatalf("%+v: want a 500 naming the session, got %v", q, err)
		}
	}
	requestsCounted(t, f.svc, CmdGetSessions, resultError, 2)
}

// TestReloadSkipsInvalidSessions: values session.Validate refuses (which
// every node skips too) are skipped at load, counted, and left in the
// bucket.
func TestReloadSkipsInvalidSessions(t *testing.T) {
	b := startBus(t)
	ctx := ctxT(t)
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: session.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{
		"good":     `{"id":"good","org":"o","allocations":["10.9.0.0/16"]}`,
		"mapped":   `{"id":"mapped","org":"o","allocations":["::ffff:10.0.0.0/104"]}`,
		"hostbits": `{"id":"hostbits","org":"o","allocations":["10.1.0.1/16"]}`,
		"noorg":    `{"id":"noorg","org":"","allocations":["10.2.0.0/16"]}`,
		"otherkey": `{"id":"good","org":"o"}`,
	} {
		if _, err := kv.Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	f := startFixtureOn(t, b, nil)
	if v := metricValue(f.svc.metrics.loadSkipped); v != 4 {
		t.Fatalf("load skipped %v, want 4", v)
	}
	list, err := f.client.GetSessions(ctx, Query{Org: "o"})
	if err != nil || len(list) != 1 || list[0].ID != "good" {
		t.Fatalf("table after load: %+v, %v", list, err)
	}
	for _, ip := range []string{"10.0.0.1", "10.1.0.1", "10.2.0.1"} {
		if list, _ := f.client.GetSessions(ctx, Query{IP: netip.MustParseAddr(ip)}); len(list) != 0 {
			t.Errorf("%s answered by a skipped value: %+v", ip, list)
		}
	}
	for _, key := range []string{"mapped", "hostbits", "noorg", "otherkey"} {
		if _, err := kv.Get(ctx, key); err != nil {
			t.Errorf("skipped value %s not left in the bucket: %v", key, err)
		}
	}
}

// TestReconcileDropsInvalidBucketValue: when a failed write re-reads its
// key and finds a value no node accepts, the table drops the session, as
// every node did.
func TestReconcileDropsInvalidBucketValue(t *testing.T) {
	b := startBus(t)
	ctx := ctxT(t)
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: session.Bucket, MaxValueSize: 300}); err != nil {
		t.Fatal(err)
	}
	f := startFixtureOn(t, b, nil)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "k", Org: "a"}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := kvOf(t, b.nc).Put(ctx, "k", []byte(`{"id":"k","org":"a","allocations":["::ffff:10.0.0.0/104"]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.SetSession(ctx, session.Session{ID: "k", Org: "a", Attributes: identity.Attributes{Username: strings.Repeat("u", 400)}}, 0); err == nil {
		t.Fatal("oversized write accepted")
	}
	if list, _ := f.client.GetSessions(ctx, Query{ID: "k"}); len(list) != 0 {
		t.Fatalf("session whose bucket value is invalid still in the table: %+v", list)
	}
}

func TestSetSessionRefusesIPv4MappedAllocation(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	_, err := f.client.SetSession(ctx, session.Session{ID: "m", Org: "a", Allocations: []netip.Prefix{mustPrefix("::ffff:10.0.0.0/104")}}, 0)
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != 400 || !strings.Contains(re.Message, "IPv4-mapped IPv6 allocation; use the IPv4 form") {
		t.Fatalf("want a 400 IPv4-mapped refusal, got %v", err)
	}
	n, err := f.client.SetSessionBatch(ctx, []session.Session{
		{ID: "v4", Org: "a", Allocations: []netip.Prefix{mustPrefix("10.0.0.0/8")}},
		{ID: "m", Org: "a", Allocations: []netip.Prefix{mustPrefix("::ffff:10.0.0.0/104")}},
	})
	var be *BatchError
	if !errors.As(err, &be) || n != 1 || be.Failed != 1 || be.Items[0].Index != 1 || !strings.Contains(be.Items[0].Error, "IPv4-mapped") {
		t.Fatalf("batch: stored %d, %v", n, err)
	}
	if _, err := kvOf(t, f.bus.nc).Get(ctx, "m"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("refused session in the bucket: %v", err)
	}
}

// markersIn lists the bucket's delete markers by key.
func markersIn(t *testing.T, f *fixture) map[string]marker {
	t.Helper()
	ms, err := f.svc.store.deleteMarkers(ctxT(t), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]marker, len(ms))
	for _, m := range ms {
		out[m.key] = m
	}
	return out
}

func streamLastSeq(t *testing.T, f *fixture) (last, msgs uint64) {
	t.Helper()
	st, err := kvOf(t, f.bus.nc).Status(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
	return info.State.LastSeq, info.State.Msgs
}

func TestPurgeDeletesRemovesOldMarkersOnly(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{{ID: "d1", Org: "a"}, {ID: "d2", Org: "a"}, {ID: "keep", Org: "a"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d1", "d2"} {
		if _, err := f.client.CleanSessions(ctx, CleanRequest{IDs: []string{id}}); err != nil {
			t.Fatal(err)
		}
	}
	kv := kvOf(t, f.bus.nc)
	// The cutoff is d2's marker time: d1's marker is older, d2's is not.
	h, err := kv.History(ctx, "d2")
	if err != nil || len(h) != 1 || h[0].Operation() != jetstream.KeyValueDelete {
		t.Fatalf("d2 history %v, %v", h, err)
	}
	n, err := f.svc.purgeDeletes(h[0].Created())
	if err != nil || n != 1 {
		t.Fatalf("purged %d, %v; want 1", n, err)
	}
	if _, err := kv.History(ctx, "d1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("old marker d1 still in the bucket: %v", err)
	}
	if ms := markersIn(t, f); len(ms) != 1 || ms["d2"].key != "d2" {
		t.Fatalf("markers left: %+v, want d2's", ms)
	}

	// Purging the stream's last message (d2's marker) does not move the
	// stream's last sequence back: the node-side subscriber treats a last
	// sequence below what it applied as a recreated bucket.
	lastBefore, _ := streamLastSeq(t, f)
	if n, err := f.svc.purgeDeletes(time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("purged %d, %v; want 1", n, err)
	}
	last, msgs := streamLastSeq(t, f)
	if last != lastBefore || msgs != 1 {
		t.Fatalf("after purging every marker: last seq %d (was %d), %d messages; want %d and 1", last, lastBefore, msgs, lastBefore)
	}
	if _, err := kv.Get(ctx, "keep"); err != nil {
		t.Fatalf("live session lost in a purge: %v", err)
	}
	if list, _ := f.client.GetSessions(ctx, Query{Org: "a"}); len(list) != 1 || list[0].ID != "keep" {
		t.Fatalf("table after purge: %+v", list)
	}
	if v := metricValue(f.svc.metrics.markersPurged); v != 2 {
		t.Fatalf("markers purged = %v, want 2", v)
	}
}

// TestPurgeKeepsAWriteAfterTheMarker stages the race a purge must survive:
// a key is written again between the listing of its marker and its purge.
func TestPurgeKeepsAWriteAfterTheMarker(t *testing.T) {
	f := startFixture(t, nil)
	ctx := ctxT(t)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "k", Org: "a", Attributes: identity.Attributes{Username: "first"}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CleanSessions(ctx, CleanRequest{IDs: []string{"k"}}); err != nil {
		t.Fatal(err)
	}
	listed, err := f.svc.store.deleteMarkers(ctx, time.Now().Add(time.Hour))
	if err != nil || len(listed) != 1 || listed[0].key != "k" {
		t.Fatalf("markers %+v, %v", listed, err)
	}
	if _, err := f.client.SetSession(ctx, session.Session{ID: "k", Org: "a", Attributes: identity.Attributes{Username: "again"}}, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := f.svc.store.purgeMarkers(ctx, listed); err != nil || n != 1 {
		t.Fatalf("purged %d, %v", n, err)
	}
	e, err := kvOf(t, f.bus.nc).Get(ctx, "k")
	if err != nil {
		t.Fatalf("write after the marker lost by the purge: %v", err)
	}
	var s session.Session
	if err := json.Unmarshal(e.Value(), &s); err != nil || s.Username != "again" {
		t.Fatalf("bucket holds %s, %v", e.Value(), err)
	}
}

func TestPurgeLoopRemovesMarkersOnItsOwn(t *testing.T) {
	f := startFixture(t, func(c *Config) { c.PurgeDeletesAfter = 50 * time.Millisecond })
	ctx := ctxT(t)
	if _, err := f.client.SetSessionBatch(ctx, []session.Session{{ID: "gone", Org: "a"}, {ID: "kept", Org: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CleanSessions(ctx, CleanRequest{IDs: []string{"gone"}}); err != nil {
		t.Fatal(err)
	}
	kv := kvOf(t, f.bus.nc)
	eventually(t, "the purger to remove the marker", func() bool {
		_, err := kv.History(ctx, "gone")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if _, err := kv.Get(ctx, "kept"); err != nil {
		t.Fatalf("purger removed a live session: %v", err)
	}
	if err := f.svc.Stop(); err != nil { // returns only once the loops are done
		t.Fatal(err)
	}
}
