package orgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// TestOverridesPage walks an organisation's overrides page by page and
// finds exactly ReadOverrides' list, in its order, with every field.
func TestOverridesPage(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		must[int64](t)(s.PutOrg(ctx, "other"))
		must[int64](t)(s.UpdatePrefixes(ctx, "acme", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, nil))
		var ops []orgstore.BatchOp
		for i := range 25 {
			ops = append(ops, orgstore.BatchOp{Override: orgstore.Override{
				CIDR:       netip.MustParsePrefix(fmt.Sprintf("10.0.%d.0/24", i)),
				Attributes: identity.Attributes{Username: fmt.Sprintf("u%d", i)}, Meta: []byte(`{"trace_id":"t"}`)}})
		}
		ops = append(ops, orgstore.BatchOp{Override: orgstore.Override{CIDR: netip.MustParsePrefix("2001:db8::/32")}})
		must[int64](t)(s.ApplyBatch(ctx, "acme", ops))
		must[int64](t)(s.PutOverride(ctx, "other", orgstore.Override{CIDR: netip.MustParsePrefix("10.0.0.0/24")}))

		all, err := s.ReadOverrides(ctx, "acme", orgstore.Full)
		if err != nil {
			t.Fatal(err)
		}
		var got []orgstore.Override
		after := netip.Prefix{}
		pages := 0
		for {
			pg, err := s.OverridesPage(ctx, "acme", after, 10)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if pg.Total != 26 || pg.Version != all.Version || len(pg.Prefixes) != 1 {
				t.Fatalf("page %d: total %d version %d prefixes %v", pages, pg.Total, pg.Version, pg.Prefixes)
			}
			got = append(got, pg.Overrides...)
			if !pg.More {
				break
			}
			after = pg.Overrides[len(pg.Overrides)-1].CIDR
		}
		if pages != 3 || len(got) != len(all.Overrides) {
			t.Fatalf("%d pages, %d overrides; want 3 pages, %d", pages, len(got), len(all.Overrides))
		}
		for i := range got {
			w, g := all.Overrides[i], got[i]
			if g.CIDR != w.CIDR || g.Attributes != w.Attributes || g.TraceID != w.TraceID || string(g.Meta) != string(w.Meta) ||
				!g.MTime.Equal(w.MTime) || !g.CTime.Equal(w.CTime) {
				t.Errorf("override %d: %+v, want %+v", i, g, w)
			}
		}
		if !slices.ContainsFunc(got, func(o orgstore.Override) bool { return o.CIDR.Addr().Is6() }) {
			t.Error("the IPv6 override is missing")
		}

		if _, err := s.OverridesPage(ctx, "nobody", netip.Prefix{}, 10); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Errorf("missing org: %v", err)
		}
		for _, n := range []int{0, orgstore.MaxPageLen + 1} {
			if _, err := s.OverridesPage(ctx, "acme", netip.Prefix{}, n); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("limit %d: %v", n, err)
			}
		}
	})
}
