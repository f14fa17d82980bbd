package orgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// pages walks ListOrgs from the start with the page size and returns the
// ids in the order seen and the number of pages.
func pages(t *testing.T, s *orgstore.Store, size int) ([]string, int) {
	t.Helper()
	var (
		ids   []string
		after string
		n     int
	)
	for {
		page, next, err := s.ListOrgs(context.Background(), after, size)
		if err != nil {
			t.Fatal(err)
		}
		n++
		for _, o := range page {
			ids = append(ids, o.ID)
		}
		if next == "" {
			return ids, n
		}
		if len(page) == 0 || next != page[len(page)-1].ID {
			t.Fatalf("page after %q: next %q is not its last id (%d items)", after, next, len(page))
		}
		after = next
	}
}

func TestListOrgsPages(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		if page, next, err := s.ListOrgs(ctx, "", 10); err != nil || len(page) != 0 || next != "" {
			t.Fatalf("empty store: %v %q %v", page, next, err)
		}
		var want []string
		for i := range 23 {
			id := fmt.Sprintf("org-%02d", i)
			want = append(want, id)
		}
		want = append(want, "Beta", "a b c", "ünïcode", "zz")
		for _, id := range want {
			must[int64](t)(s.PutOrg(ctx, id))
		}
		must[int64](t)(s.PutOrg(ctx, "zz")) // version 2
		slices.Sort(want)                   // byte order
		for _, size := range []int{1, 7, 27, 1000} {
			got, n := pages(t, s, size)
			if !slices.Equal(got, want) {
				t.Fatalf("pages of %d:\n got %v\nwant %v", size, got, want)
			}
			if wantN := max(1, (len(want)+size-1)/size); n != wantN {
				t.Errorf("pages of %d: %d pages, want %d", size, n, wantN)
			}
		}
		// The summary is the organisation's row.
		page, _, err := s.ListOrgs(ctx, "zy", 5)
		if err != nil || len(page) != 2 || page[0].ID != "zz" || page[0].Version != 2 || page[1].ID != "ünïcode" {
			t.Fatalf("last page: %+v %v", page, err)
		}
		if o := must[orgstore.Org](t)(s.GetOrg(ctx, "zz")); page[0] != o {
			t.Fatalf("summary %+v, GetOrg %+v", page[0], o)
		}
		// A cursor need not exist; past the end the page is empty.
		if page, next, err := s.ListOrgs(ctx, "\U0010FFFF", 5); err != nil || len(page) != 0 || next != "" {
			t.Fatalf("after the end: %v %q %v", page, next, err)
		}
		// The limit is clamped.
		if page, _, _ := s.ListOrgs(ctx, "", 0); len(page) != 1 {
			t.Fatalf("limit 0: %d items, want 1", len(page))
		}
		if page, _, _ := s.ListOrgs(ctx, "", 1_000_000); len(page) != len(want) {
			t.Fatalf("limit 1e6: %d items", len(page))
		}
		// A cursor that cannot be an id is refused as input, on both.
		for _, bad := range []string{"a\x00b", "\xff", "a/b"} {
			if _, _, err := s.ListOrgs(ctx, bad, 5); !errors.Is(err, orgstore.ErrInvalidInput) {
				t.Errorf("after %q: %v, want ErrInvalidInput", bad, err)
			}
		}
	})
}

// TestListOrgsPagesWhileOrgsAreCreated: keyset pages neither repeat nor
// skip an organisation that existed throughout, however many are created
// (before or after the cursor) and deleted while a reader pages.
func TestListOrgsPagesWhileOrgsAreCreated(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		var stable []string
		for i := range 300 {
			id := fmt.Sprintf("m%04d", i*2)
			stable = append(stable, id)
			must[int64](t)(s.PutOrg(ctx, id))
		}
		must[int64](t)(s.PutOrg(ctx, "m0001-doomed"))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Between the stable ids, before and after any cursor.
				if _, err := s.PutOrg(ctx, fmt.Sprintf("m%04d-new%d", (i*37)%600, i)); err != nil {
					t.Error(err)
					return
				}
				if i == 5 {
					if err := s.DeleteOrg(ctx, "m0001-doomed"); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
		var got []string
		for round := 0; round < 3; round++ {
			ids, _ := pages(t, s, 13)
			if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
				t.Fatalf("round %d: ids not strictly increasing (a repeat)", round)
			}
			got = ids
		}
		close(stop)
		wg.Wait()
		for _, id := range stable {
			if _, found := slices.BinarySearch(got, id); !found {
				t.Fatalf("%s, present throughout, missing from the pages", id)
			}
		}
	})
}

func TestListSettingsEntries(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		if _, _, err := s.ListSettingsEntries(ctx, "acme"); !errors.Is(err, orgstore.ErrOrgNotFound) {
			t.Fatalf("missing org: %v", err)
		}
		must[int64](t)(s.PutOrg(ctx, "acme"))
		must[int64](t)(s.PutOrg(ctx, "other"))
		v, list, err := s.ListSettingsEntries(ctx, "acme")
		if err != nil || v != 1 || len(list) != 0 {
			t.Fatalf("none: %d %v %v", v, list, err)
		}
		docs := map[settings.Scope]string{
			orgScope:              `{"profile":10,"blocked_categories":[1,2,3]}`,
			profile(10):           `{"blocked_categories":[7]}`,
			profile(2):            `{"safe_search":true}`,
			location("hq"):        `{"profile":2}`,
			username("ünïcode"):   `{"blocked_categories":[9],"blocklist":["ex.ample"]}`,
			deviceID("mac:aa:bb"): `{"filtering":false}`,
		}
		for sc, d := range docs {
			must[int64](t)(s.PutSettings(ctx, "acme", sc, doc(t, d)))
		}
		must[int64](t)(s.PutSettings(ctx, "other", username("x"), doc(t, `{"safe_search":true}`)))
		v, list, err = s.ListSettingsEntries(ctx, "acme")
		if err != nil || v != int64(1+len(docs)) {
			t.Fatalf("list: version %d, %v", v, err)
		}
		want := []settings.Scope{orgScope, profile(2), profile(10), location("hq"), username("ünïcode"), deviceID("mac:aa:bb")}
		var got []settings.Scope
		for _, e := range list {
			got = append(got, e.Scope)
			stored, _, err := s.GetSettings(ctx, "acme", e.Scope)
			if err != nil {
				t.Fatal(err)
			}
			if e.Size != int64(len(stored)) {
				t.Errorf("%v: size %d, the stored document has %d bytes", e.Scope, e.Size, len(stored))
			}
			d := doc(t, string(stored))
			if e.HasProfile != (d.Profile != nil) || (d.Profile != nil && e.SelectsProfile != *d.Profile) {
				t.Errorf("%v: selects profile %v %d, the document %v", e.Scope, e.HasProfile, e.SelectsProfile, d.Profile)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("order:\n got %v\nwant %v", got, want)
		}
	})
}
