package orgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

func TestOrgLifecycle(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		s, clk := openClocked(t, dialect)
		t0 := clk.Now().UTC().Truncate(time.Microsecond)

		if _, err := s.GetOrg(ctx, "acme"); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("GetOrg(missing) err = %v, want ErrOrgNotFound", err)
		}
		if v := must[int64](t)(s.PutOrg(ctx, "acme")); v != 1 {
			t.Fatalf("PutOrg(new) = %d, want 1", v)
		}
		clk.Advance(time.Second)
		if v := must[int64](t)(s.PutOrg(ctx, "acme")); v != 2 {
			t.Fatalf("PutOrg(existing) = %d, want 2", v)
		}
		o := must[orgstore.Org](t)(s.GetOrg(ctx, "acme"))
		want := orgstore.Org{ID: "acme", Version: 2, CreatedAt: t0, UpdatedAt: t0.Add(time.Second)}
		if o != want {
			t.Fatalf("GetOrg = %+v, want %+v", o, want)
		}
		if o.CreatedAt.Location() != time.UTC {
			t.Fatalf("CreatedAt location = %v, want UTC", o.CreatedAt.Location())
		}

		for _, id := range []string{"zeta", "Beta", "beta", "a b c", "ünïcode"} {
			must[int64](t)(s.PutOrg(ctx, id))
		}
		got := must[[]orgstore.OrgVersion](t)(s.OrgVersions(ctx))
		wantList := []orgstore.OrgVersion{{ID: "Beta", Version: 1}, {ID: "a b c", Version: 1}, {ID: "acme", Version: 2},
			{ID: "beta", Version: 1}, {ID: "zeta", Version: 1}, {ID: "ünïcode", Version: 1}}
		for i := range got {
			if got[i].UpdatedAt.IsZero() {
				t.Fatalf("OrgVersions[%d].UpdatedAt is zero", i)
			}
			got[i].UpdatedAt = time.Time{}
		}
		if !slices.Equal(got, wantList) {
			t.Fatalf("OrgVersions = %v, want %v (byte order)", got, wantList)
		}

		if err := s.DeleteOrg(ctx, "acme"); err != nil {
			t.Fatalf("DeleteOrg: %v", err)
		}
		if err := s.DeleteOrg(ctx, "acme"); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("DeleteOrg(again) err = %v, want ErrOrgNotFound", err)
		}
		if _, err := s.GetOrg(ctx, "acme"); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("GetOrg(deleted) err = %v, want ErrOrgNotFound", err)
		}
		if v := must[int64](t)(s.PutOrg(ctx, "acme")); v != 1 {
			t.Fatalf("PutOrg(recreated) = %d, want 1", v)
		}
	})
}

func TestOrgIDValidation(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		// The API's rule (identity.ValidateOrg): "/", "." and ".." are not
		// one path segment, control characters not printable.
		for _, id := range []string{"", strings.Repeat("x", 256), "nul\x00byte", "bad\xffutf8", "a/b", ".", "..", "tab\tid"} {
			if _, err := s.PutOrg(ctx, id); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("PutOrg(%q) err = %v, want ErrInvalidInput", id, err)
			}
			// Ids the store cannot hold do not exist.
			if _, err := s.GetOrg(ctx, id); !errors.Is(err, orgstore.ErrOrgNotFound) {
				t.Errorf("GetOrg(%q) err = %v, want ErrOrgNotFound", id, err)
			}
			if _, err := s.ReadOverrides(ctx, id, orgstore.Full); !errors.Is(err, orgstore.ErrOrgNotFound) {
				t.Errorf("ReadOverrides(%q) err = %v, want ErrOrgNotFound", id, err)
			}
		}
		long := strings.Repeat("é", 127) + "x" // 255 bytes
		if v, err := s.PutOrg(ctx, long); err != nil || v != 1 {
			t.Fatalf("PutOrg(255 bytes) = %d, %v", v, err)
		}
	})
}

func TestNextRevision(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		if _, err := s.NextRevision(ctx, "acme"); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("NextRevision(missing) err = %v, want ErrOrgNotFound", err)
		}
		must[int64](t)(s.PutOrg(ctx, "acme"))
		must[int64](t)(s.PutOrg(ctx, "other"))
		for want := int64(1); want <= 3; want++ {
			if got := must[int64](t)(s.NextRevision(ctx, "acme")); got != want {
				t.Fatalf("NextRevision = %d, want %d", got, want)
			}
		}
		if got := must[int64](t)(s.NextRevision(ctx, "other")); got != 1 {
			t.Fatalf("NextRevision(other) = %d, want 1 (per organisation)", got)
		}
		wantVersion(t, s, "acme", 1)
	})
}

func TestDeletedOrgsArePendingUntilForgotten(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		for _, org := range []string{"acme", "keep"} {
			must[int64](t)(s.PutOrg(ctx, org))
		}
		must[int64](t)(s.NextRevision(ctx, "acme"))
		must[int64](t)(s.NextRevision(ctx, "acme"))
		if _, ok, err := s.DeletedOrg(ctx, "acme"); ok || err != nil {
			t.Fatalf("DeletedOrg before the delete: %v %v", ok, err)
		}
		if err := s.DeleteOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		first, ok, err := s.DeletedOrg(ctx, "acme")
		if !ok || err != nil || first.ID != "acme" || first.Revision != 2 {
			t.Fatalf("DeletedOrg = %+v %v %v, want acme at revision 2", first, ok, err)
		}
		if list := must[[]orgstore.DeletedOrg](t)(s.DeletedOrgs(ctx)); len(list) != 1 || list[0] != first {
			t.Fatalf("DeletedOrgs = %+v", list)
		}
		// Re-created, deployed and deleted again before the first clean was
		// forgotten: forgetting the first record keeps the second.
		must[int64](t)(s.PutOrg(ctx, "acme"))
		must[int64](t)(s.NextRevision(ctx, "acme"))
		if err := s.DeleteOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if err := s.ForgetDeletedOrg(ctx, first); err != nil {
			t.Fatal(err)
		}
		second, ok, err := s.DeletedOrg(ctx, "acme")
		if !ok || err != nil || second.Revision != 3 {
			t.Fatalf("second delete = %+v %v %v, want pending at revision 3", second, ok, err)
		}
		if err := s.ForgetDeletedOrg(ctx, second); err != nil {
			t.Fatal(err)
		}
		if list := must[[]orgstore.DeletedOrg](t)(s.DeletedOrgs(ctx)); len(list) != 0 {
			t.Fatalf("DeletedOrgs after forgetting = %+v", list)
		}
	})
}

func TestDeleteOrgRemovesEverything(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		for _, org := range []string{"acme", "keep"} {
			must[int64](t)(s.PutOrg(ctx, org))
		}
		must[int64](t)(s.UpdatePrefixes(ctx, "acme", pfxs("10.0.0.0/8", "2001:db8::/32"), nil))
		must[int64](t)(s.UpdatePrefixes(ctx, "keep", pfxs("11.0.0.0/8"), nil))
		for _, org := range []string{"acme", "keep"} {
			must[int64](t)(s.ApplyBatch(ctx, org, []orgstore.BatchOp{
				{Override: orgstore.Override{CIDR: pfx("10.1.0.0/16"), Attributes: identity.Attributes{Username: org}}},
				{Override: orgstore.Override{CIDR: pfx("2001:db8::/64"), Meta: json.RawMessage(`{}`)}},
			}))
		}
		must[int64](t)(s.NextRevision(ctx, "acme"))
		if err := s.DeleteOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		// The prefixes are free again, for anyone.
		if _, err := s.UpdatePrefixes(ctx, "keep", pfxs("10.0.0.0/8", "2001:db8::/32"), nil); err != nil {
			t.Fatalf("prefixes of a deleted organisation are still taken: %v", err)
		}
		must[int64](t)(s.UpdatePrefixes(ctx, "keep", nil, pfxs("10.0.0.0/8", "2001:db8::/32")))
		must[int64](t)(s.PutOrg(ctx, "acme"))
		view := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", orgstore.Full))
		if view.Version != 1 || len(view.Prefixes) != 0 || len(view.Overrides) != 0 {
			t.Fatalf("re-created organisation inherited data: %+v", view)
		}
		// The deploy revisions continue: the deleted organisation was at 1.
		if rev := must[int64](t)(s.NextRevision(ctx, "acme")); rev != 2 {
			t.Fatalf("re-created organisation's revision = %d, want 2", rev)
		}
		if pending := must[[]orgstore.DeletedOrg](t)(s.DeletedOrgs(ctx)); len(pending) != 0 {
			t.Fatalf("re-creating the organisation left its delete pending: %+v", pending)
		}
		keep := must[orgstore.View](t)(s.ReadOverrides(ctx, "keep", orgstore.Identity))
		if len(keep.Overrides) != 2 || keep.Overrides[0].Username != "keep" || !slices.Equal(keep.Prefixes, pfxs("11.0.0.0/8")) {
			t.Fatalf("other organisation changed: %+v", keep)
		}
	})
}
