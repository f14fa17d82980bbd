package orgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

func TestOverrides(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		s, clk := openClocked(t, dialect)
		t0 := clk.Now().UTC().Truncate(time.Microsecond)
		if _, err := s.PutOverride(ctx, "acme", orgstore.Override{CIDR: pfx("10.0.0.0/24")}); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("PutOverride(missing org) err = %v", err)
		}
		if _, err := s.DeleteOverride(ctx, "acme", pfx("10.0.0.0/24")); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("DeleteOverride(missing org) err = %v", err)
		}
		if _, err := s.ReadOverride(ctx, "acme", pfx("10.0.0.0/24")); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("ReadOverride(missing org) err = %v", err)
		}
		if _, err := s.ReadOverrides(ctx, "acme", orgstore.Full); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("ReadOverrides(missing org) err = %v", err)
		}
		must[int64](t)(s.PutOrg(ctx, "acme"))
		must[int64](t)(s.UpdatePrefixes(ctx, "acme", pfxs("10.0.0.0/8", "2001:db8::/32"), nil)) // v2

		if _, err := s.ReadOverride(ctx, "acme", pfx("10.0.0.0/24")); !errors.Is(err, orgstore.ErrOverrideNotFound) {
			t.Fatalf("ReadOverride(missing) err = %v, want ErrOverrideNotFound", err)
		}
		view := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", orgstore.Full))
		if view.Version != 2 || len(view.Overrides) != 0 || !slices.Equal(view.Prefixes, pfxs("10.0.0.0/8", "2001:db8::/32")) {
			t.Fatalf("ReadOverrides(no overrides) = %+v", view)
		}

		first := orgstore.Override{
			CIDR: pfx("10.1.0.0/16"), Attributes: identity.Attributes{Username: "alice", DeviceID: "mac:00:11:22:33:44:55", Location: "hq"},
			Meta:    json.RawMessage(`{ "trace_id" : "t-1", "x_team": {"a": [1, 2]} }`),
			TraceID: "ignored: derived from meta",
		}
		if v := must[int64](t)(s.PutOverride(ctx, "acme", first)); v != 3 {
			t.Fatalf("PutOverride = %d, want 3", v)
		}
		got := must[orgstore.View](t)(s.ReadOverride(ctx, "acme", first.CIDR))
		want := orgstore.Override{
			CIDR: first.CIDR, Attributes: identity.Attributes{Username: "alice", DeviceID: "mac:00:11:22:33:44:55", Location: "hq"},
			Meta: json.RawMessage(`{"trace_id":"t-1","x_team":{"a":[1,2]}}`), TraceID: "t-1",
			CTime: t0, MTime: t0,
		}
		if got.Version != 3 || len(got.Overrides) != 1 || !equalOverride(got.Overrides[0], want) {
			t.Fatalf("ReadOverride = %+v, want version 3 and %+v", got, want)
		}
		if !slices.Equal(got.Prefixes, pfxs("10.0.0.0/8", "2001:db8::/32")) {
			t.Fatalf("ReadOverride prefixes = %v", got.Prefixes)
		}

		// Overwrite replaces everything, keeps CTime, moves MTime.
		clk.Advance(90 * time.Second)
		if v := must[int64](t)(s.PutOverride(ctx, "acme", orgstore.Override{CIDR: first.CIDR, Attributes: identity.Attributes{Location: "branch"}})); v != 4 {
			t.Fatalf("PutOverride(overwrite) = %d, want 4", v)
		}
		got = must[orgstore.View](t)(s.ReadOverride(ctx, "acme", first.CIDR))
		want = orgstore.Override{CIDR: first.CIDR, Attributes: identity.Attributes{Location: "branch"}, CTime: t0, MTime: t0.Add(90 * time.Second)}
		if !equalOverride(got.Overrides[0], want) {
			t.Fatalf("after overwrite: %+v, want %+v", got.Overrides[0], want)
		}
		// Even an identical overwrite bumps the version.
		if v := must[int64](t)(s.PutOverride(ctx, "acme", orgstore.Override{CIDR: first.CIDR, Attributes: identity.Attributes{Location: "branch"}})); v != 5 {
			t.Fatalf("PutOverride(identical) = %d, want 5", v)
		}

		// An override outside the prefixes is stored like any other; order
		// is IPv4 first, then address, then length.
		for _, c := range []string{"2001:db8::/48", "10.1.0.0/24", "192.168.1.0/24", "10.1.0.0/17", "::/0", "0.0.0.0/0", "10.0.0.0/8", "2001:db8::1/128"} {
			must[int64](t)(s.PutOverride(ctx, "acme", orgstore.Override{CIDR: pfx(c), Attributes: identity.Attributes{Username: "u-" + c}}))
		}
		wantOrder := pfxs("0.0.0.0/0", "10.0.0.0/8", "10.1.0.0/16", "10.1.0.0/17", "10.1.0.0/24", "192.168.1.0/24", "::/0", "2001:db8::/48", "2001:db8::1/128")
		for _, d := range []orgstore.Detail{orgstore.CIDROnly, orgstore.Identity, orgstore.Full} {
			view := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", d))
			if view.Version != 13 {
				t.Fatalf("detail %d: version %d, want 13", d, view.Version)
			}
			var cidrs []netip.Prefix
			for _, o := range view.Overrides {
				cidrs = append(cidrs, o.CIDR)
				switch {
				case d == orgstore.CIDROnly && (o.Username != "" || o.Location != "" || !o.MTime.IsZero()):
					t.Fatalf("CIDROnly filled more than the CIDR: %+v", o)
				case d == orgstore.Identity && o.CIDR != first.CIDR && o.Username != "u-"+o.CIDR.String():
					t.Fatalf("Identity: %+v", o)
				case d == orgstore.Identity && (!o.MTime.IsZero() || o.Meta != nil):
					t.Fatalf("Identity filled times or meta: %+v", o)
				case d == orgstore.Full && (o.MTime.IsZero() || o.CTime.IsZero() || o.MTime.Location() != time.UTC):
					t.Fatalf("Full: times missing or not UTC: %+v", o)
				}
			}
			if !slices.Equal(cidrs, wantOrder) {
				t.Fatalf("detail %d: order %v, want %v", d, cidrs, wantOrder)
			}
		}

		// Delete bumps only when something was deleted.
		if v := must[int64](t)(s.DeleteOverride(ctx, "acme", pfx("10.1.0.0/24"))); v != 14 {
			t.Fatalf("DeleteOverride = %d, want 14", v)
		}
		if v := must[int64](t)(s.DeleteOverride(ctx, "acme", pfx("10.1.0.0/24"))); v != 14 {
			t.Fatalf("DeleteOverride(absent) = %d, want 14 (no bump)", v)
		}
		if _, err := s.ReadOverride(ctx, "acme", pfx("10.1.0.0/24")); !errors.Is(err, orgstore.ErrOverrideNotFound) {
			t.Fatalf("ReadOverride(deleted) err = %v", err)
		}
		if _, err := s.DeleteOverride(ctx, "acme", pfx("10.1.0.1/24")); !errors.Is(err, orgstore.ErrInvalidInput) {
			t.Fatalf("DeleteOverride(host bits) err = %v, want ErrInvalidInput", err)
		}
		if _, err := s.ReadOverride(ctx, "acme", netip.Prefix{}); !errors.Is(err, orgstore.ErrInvalidInput) {
			t.Fatalf("ReadOverride(invalid) err = %v, want ErrInvalidInput", err)
		}
		// Overrides are per organisation: the same CIDR elsewhere is separate.
		must[int64](t)(s.PutOrg(ctx, "other"))
		must[int64](t)(s.PutOverride(ctx, "other", orgstore.Override{CIDR: first.CIDR, Attributes: identity.Attributes{Username: "bob"}}))
		if o := must[orgstore.View](t)(s.ReadOverride(ctx, "acme", first.CIDR)).Overrides[0]; o.Location != "branch" || o.Username != "" {
			t.Fatalf("acme's override changed by other's write: %+v", o)
		}
	})
}

func equalOverride(a, b orgstore.Override) bool {
	return a.CIDR == b.CIDR && a.Username == b.Username && a.DeviceID == b.DeviceID && a.Location == b.Location &&
		string(a.Meta) == string(b.Meta) && (a.Meta == nil) == (b.Meta == nil) && a.TraceID == b.TraceID &&
		a.CTime.Equal(b.CTime) && a.MTime.Equal(b.MTime)
}

func TestOverrideValidation(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		c := pfx("10.0.0.0/24")
		bad := []orgstore.Override{
			{CIDR: pfx("10.0.0.1/24")},
			{},
			{CIDR: c, Meta: json.RawMessage(`[1,2]`)},
			{CIDR: c, Meta: json.RawMessage(`"x"`)},
			{CIDR: c, Meta: json.RawMessage(`null`)},
			{CIDR: c, Meta: json.RawMessage(`{"a":`)},
			{CIDR: c, Meta: json.RawMessage(`{} {}`)},
			{CIDR: c, Meta: json.RawMessage("{\"a\":\"\xff\"}")},
			{CIDR: c, Meta: json.RawMessage(`{"trace_id":"a\u0000b"}`)},
			{CIDR: c, Attributes: identity.Attributes{Username: "nul\x00"}},
			{CIDR: c, Attributes: identity.Attributes{DeviceID: "\xfe"}},
			{CIDR: c, Attributes: identity.Attributes{Location: "x\x00"}},
		}
		for _, o := range bad {
			if _, err := s.PutOverride(ctx, "acme", o); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("PutOverride(%+v) err = %v, want ErrInvalidInput", o, err)
			}
		}
		wantVersion(t, s, "acme", 1)

		// NUL inside meta is fine as an escape; unicode survives.
		ok := orgstore.Override{CIDR: c, Attributes: identity.Attributes{Username: "ünï"}, Meta: json.RawMessage(`{"x_k":"a\u0000b","trace_id":5}`)}
		must[int64](t)(s.PutOverride(ctx, "acme", ok))
		got := must[orgstore.View](t)(s.ReadOverride(ctx, "acme", c)).Overrides[0]
		if got.Username != "ünï" || string(got.Meta) != `{"x_k":"a\u0000b","trace_id":5}` || got.TraceID != "" {
			t.Fatalf("round trip: %+v", got)
		}
	})
}

func TestApplyBatch(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		s, clk := openClocked(t, dialect)
		t0 := clk.Now().UTC().Truncate(time.Microsecond)
		if _, err := s.ApplyBatch(ctx, "acme", []orgstore.BatchOp{{Override: orgstore.Override{CIDR: pfx("10.0.0.0/8")}}}); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("ApplyBatch(missing org) err = %v", err)
		}
		if _, err := s.ApplyBatch(ctx, "acme", nil); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("ApplyBatch(missing org, empty) err = %v", err)
		}
		must[int64](t)(s.PutOrg(ctx, "acme"))
		if v := must[int64](t)(s.ApplyBatch(ctx, "acme", nil)); v != 1 {
			t.Fatalf("empty batch = %d, want 1 (no bump)", v)
		}
		up := func(c, user string) orgstore.BatchOp {
			return orgstore.BatchOp{Override: orgstore.Override{CIDR: pfx(c), Attributes: identity.Attributes{Username: user}, Meta: json.RawMessage(`{"trace_id":"` + user + `"}`)}}
		}
		del := func(c string) orgstore.BatchOp {
			return orgstore.BatchOp{Delete: true, Override: orgstore.Override{CIDR: pfx(c)}}
		}
		// Existing rows for the re-create and keep-ctime cases.
		must[int64](t)(s.ApplyBatch(ctx, "acme", []orgstore.BatchOp{up("10.0.1.0/24", "old"), up("10.0.2.0/24", "old"), up("10.0.3.0/24", "old")}))
		clk.Advance(time.Minute)
		t1 := t0.Add(time.Minute)

		v := must[int64](t)(s.ApplyBatch(ctx, "acme", []orgstore.BatchOp{
			up("10.9.0.0/24", "a"), del("10.9.0.0/24"), // upsert then delete: absent
			del("10.9.1.0/24"), up("10.9.1.0/24", "b"), // delete then upsert: present
			up("10.9.2.0/24", "c1"), up("10.9.2.0/24", "c2"), // last upsert wins
			del("10.0.1.0/24"),                                 // delete of an existing row
			del("10.0.2.0/24"), up("10.0.2.0/24", "recreated"), // re-created: new ctime
			up("10.0.3.0/24", "overwritten"), // overwrite: ctime kept
			del("2001:db8::/64"),             // delete of nothing
			up("2001:db8::/64", "v6"), del("2001:db8::/64"), up("2001:db8::/64", "v6b"),
		}))
		if v != 3 {
			t.Fatalf("batch version = %d, want 3 (one bump per batch)", v)
		}
		view := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", orgstore.Full))
		type row struct {
			cidr, user, trace string
			ctime             time.Time
		}
		var got []row
		for _, o := range view.Overrides {
			got = append(got, row{o.CIDR.String(), o.Username, o.TraceID, o.CTime})
		}
		want := []row{
			{"10.0.2.0/24", "recreated", "recreated", t1},
			{"10.0.3.0/24", "overwritten", "overwritten", t0},
			{"10.9.1.0/24", "b", "b", t1},
			{"10.9.2.0/24", "c2", "c2", t1},
			{"2001:db8::/64", "v6b", "v6b", t1},
		}
		if len(got) != len(want) {
			t.Fatalf("after batch: %v, want %v", got, want)
		}
		for i := range want {
			if got[i].cidr != want[i].cidr || got[i].user != want[i].user || got[i].trace != want[i].trace || !got[i].ctime.Equal(want[i].ctime) {
				t.Fatalf("after batch row %d: %v, want %v", i, got[i], want[i])
			}
			if !view.Overrides[i].MTime.Equal(t1) {
				t.Fatalf("row %s: MTime %v, want %v", got[i].cidr, view.Overrides[i].MTime, t1)
			}
		}

		// An invalid op anywhere fails the whole batch.
		_, err := s.ApplyBatch(ctx, "acme", []orgstore.BatchOp{up("10.50.0.0/16", "x"), {Override: orgstore.Override{CIDR: pfx("10.9.1.0/24"), Meta: json.RawMessage(`[]`)}}})
		if !errors.Is(err, orgstore.ErrInvalidInput) || !strings.Contains(err.Error(), "item 1") {
			t.Fatalf("invalid batch err = %v, want ErrInvalidInput naming item 1", err)
		}
		wantVersion(t, s, "acme", 3)
		if _, err := s.ReadOverride(ctx, "acme", pfx("10.50.0.0/16")); !errors.Is(err, orgstore.ErrOverrideNotFound) {
			t.Fatalf("op of a refused batch was applied: %v", err)
		}

		// Large batches cross the statement chunk size.
		var ops []orgstore.BatchOp
		for i := range 2500 {
			ops = append(ops, up(netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16 + byte(i>>8), byte(i), 0}), 24).String(), fmt.Sprint(i)))
		}
		for i := range 1200 {
			ops = append(ops, del(netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16 + byte(i>>8), byte(i), 0}), 24).String()))
		}
		if v := must[int64](t)(s.ApplyBatch(ctx, "acme", ops)); v != 4 {
			t.Fatalf("large batch version = %d, want 4", v)
		}
		view = must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", orgstore.Identity))
		if len(view.Overrides) != 5+1300 {
			t.Fatalf("after large batch: %d overrides, want %d", len(view.Overrides), 5+1300)
		}
	})
}

// TestBatchVersionRule: a batch bumps the version when it changed a row,
// by the same rule as the single calls: a batch whose only item deletes a
// CIDR that does not exist keeps the version, as DELETE of that CIDR does;
// a delete that removes a row bumps it once, in either form; an upsert
// always bumps it.
func TestBatchVersionRule(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		s, _ := openClocked(t, dialect)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		del := func(c string) []orgstore.BatchOp {
			return []orgstore.BatchOp{{Delete: true, Override: orgstore.Override{CIDR: pfx(c)}}}
		}
		steps := []struct {
			what  string
			call  func() (int64, error)
			after int64
		}{
			{"batch deleting a missing CIDR", func() (int64, error) { return s.ApplyBatch(ctx, "acme", del("10.0.0.0/24")) }, 1},
			{"DELETE of a missing CIDR", func() (int64, error) { return s.DeleteOverride(ctx, "acme", pfx("10.0.0.0/24")) }, 1},
			{"batch deleting two missing CIDRs", func() (int64, error) {
				return s.ApplyBatch(ctx, "acme", append(del("10.0.0.0/24"), del("2001:db8::/64")...))
			}, 1},
			{"POST", func() (int64, error) { return s.PutOverride(ctx, "acme", orgstore.Override{CIDR: pfx("10.0.0.0/24")}) }, 2},
			{"batch deleting it", func() (int64, error) { return s.ApplyBatch(ctx, "acme", del("10.0.0.0/24")) }, 3},
			{"batch deleting it again", func() (int64, error) { return s.ApplyBatch(ctx, "acme", del("10.0.0.0/24")) }, 3},
			{"batch re-creating it", func() (int64, error) {
				return s.ApplyBatch(ctx, "acme", []orgstore.BatchOp{{Override: orgstore.Override{CIDR: pfx("10.0.0.0/24")}}})
			}, 4},
			{"DELETE of it", func() (int64, error) { return s.DeleteOverride(ctx, "acme", pfx("10.0.0.0/24")) }, 5},
		}
		for _, st := range steps {
			v, err := st.call()
			if err != nil {
				t.Fatalf("%s: %v", st.what, err)
			}
			if v != st.after {
				t.Fatalf("%s: version %d, want %d", st.what, v, st.after)
			}
			wantVersion(t, s, "acme", st.after)
		}
	})
}
