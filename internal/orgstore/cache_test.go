package orgstore_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// TestSingleReadsFollowWrites: with the read cache on (SQLite, lock held),
// every kind of write is visible to the next single-override read.
func TestSingleReadsFollowWrites(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		s := open(t)
		ctx := context.Background()
		p := netip.MustParsePrefix
		read := func() orgstore.View {
			t.Helper()
			v, err := s.ReadOverride(ctx, "acme", p("10.1.0.0/16"))
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		if _, err := s.PutOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutOverride(ctx, "acme", orgstore.Override{CIDR: p("10.1.0.0/16"), Attributes: identity.Attributes{Username: "a"}}); err != nil {
			t.Fatal(err)
		}
		if v := read(); v.Overrides[0].Username != "a" || len(v.Prefixes) != 0 {
			t.Fatalf("%+v", v)
		}
		read() // a second read may come from the cache
		if _, err := s.UpdatePrefixes(ctx, "acme", []netip.Prefix{p("10.0.0.0/8")}, nil); err != nil {
			t.Fatal(err)
		}
		if v := read(); len(v.Prefixes) != 1 {
			t.Fatalf("prefix change not seen: %+v", v)
		}
		if _, err := s.ApplyBatch(ctx, "acme", []orgstore.BatchOp{{Override: orgstore.Override{CIDR: p("10.1.0.0/16"), Attributes: identity.Attributes{Username: "b"}}}}); err != nil {
			t.Fatal(err)
		}
		if v := read(); v.Overrides[0].Username != "b" {
			t.Fatalf("batch not seen: %+v", v)
		}
		ver, err := s.PutOrg(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if v := read(); v.Version != ver {
			t.Fatalf("version %d, want %d", v.Version, ver)
		}
		if _, err := s.DeleteOverride(ctx, "acme", p("10.1.0.0/16")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadOverride(ctx, "acme", p("10.1.0.0/16")); err != orgstore.ErrOverrideNotFound {
			t.Fatalf("deleted override read: %v", err)
		}
		if _, err := s.PutOverride(ctx, "acme", orgstore.Override{CIDR: p("10.1.0.0/16"), Attributes: identity.Attributes{Username: "c"}}); err != nil {
			t.Fatal(err)
		}
		read()
		if err := s.DeleteOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadOverride(ctx, "acme", p("10.1.0.0/16")); err != orgstore.ErrOrgNotFound {
			t.Fatalf("deleted org read: %v", err)
		}
	})
}

// TestCachedReadsUnderConcurrentWrites races readers against writers; once
// the writers stop, what the reads return must equal the database, i.e. no
// read that overlapped a write left a stale entry behind.
func TestCachedReadsUnderConcurrentWrites(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite:" + filepath.Join(dir, "o.db")
	s := storetest.OpenConfig(t, orgstore.Config{URL: url})
	ctx := context.Background()
	cidr := netip.MustParsePrefix("10.0.0.0/24")
	if _, err := s.PutOrg(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = s.ReadOverride(ctx, "acme", cidr)
			}
		}()
	}
	var last string
	for i := range 300 {
		last = fmt.Sprint("user-", i)
		if _, err := s.PutOverride(ctx, "acme", orgstore.Override{CIDR: cidr, Attributes: identity.Attributes{Username: last}}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	for range 3 { // from the database, then from the cache
		v, err := s.ReadOverride(ctx, "acme", cidr)
		if err != nil || v.Overrides[0].Username != last {
			t.Fatalf("read %+v, %v; want %s", v, err, last)
		}
	}
	full, err := s.ReadOverrides(ctx, "acme", orgstore.Full)
	if err != nil || full.Overrides[0].Username != last {
		t.Fatalf("database says %+v, %v", full, err)
	}
}
