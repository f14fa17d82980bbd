package orgstore_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// clock is a hand-set clock for timestamp assertions.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock {
	// Nanoseconds on purpose: the store keeps microseconds.
	return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("X", 3600))}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openClocked(t *testing.T, dialect string) (*orgstore.Store, *clock) {
	clk := newClock()
	s := storetest.OpenConfig(t, orgstore.Config{URL: storetest.URL(t, dialect), Now: clk.Now})
	return s, clk
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func pfxs(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = pfx(s)
	}
	return out
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func must2(t *testing.T) func(int64, []netip.Prefix, error) (int64, []netip.Prefix) {
	return func(v int64, ps []netip.Prefix, err error) (int64, []netip.Prefix) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v, ps
	}
}

func wantVersion(t *testing.T, s *orgstore.Store, org string, want int64) {
	t.Helper()
	o, err := s.GetOrg(context.Background(), org)
	if err != nil {
		t.Fatalf("GetOrg(%q): %v", org, err)
	}
	if o.Version != want {
		t.Fatalf("org %q version = %d, want %d", org, o.Version, want)
	}
}

func TestOpenAndPing(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		s := open(t)
		if err := s.Ping(context.Background()); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		if got := s.Dialect(); got != t.Name()[strings.LastIndexByte(t.Name(), '/')+1:] {
			t.Fatalf("Dialect() = %q in subtest %s", got, t.Name())
		}
	})
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, url := range []string{"", "mysql://x", "sqlite:", "sqlite::memory:", "sqlite:a.db?mode=memory", "postgres:nohost", "postgres://%zz"} {
		if s, err := orgstore.Open(ctx, orgstore.Config{URL: url}); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want an error", url)
		}
	}
	// A password never shows up in the error.
	_, err := orgstore.Open(ctx, orgstore.Config{URL: "postgres://u:sekrit@127.0.0.1:1/db?sslmode=disable&connect_timeout=1"})
	if err == nil || strings.Contains(err.Error(), "sekrit") {
		t.Fatalf("Open with unreachable postgres: err = %v, want an error without the password", err)
	}
}

func TestConcurrentWritesToOneOrg(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		ctx := context.Background()
		s := open(t)
		must[int64](t)(s.PutOrg(ctx, "acme"))
		const writers, each = 8, 15
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			versions = map[int64]bool{}
		)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					c := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(w), byte(i), 0}), 24)
					var (
						v   int64
						err error
					)
					switch i % 3 {
					case 0:
						v, err = s.PutOverride(ctx, "acme", orgstore.Override{CIDR: c})
					case 1:
						v, err = s.ApplyBatch(ctx, "acme", []orgstore.BatchOp{{Override: orgstore.Override{CIDR: c}}})
					default:
						v, err = s.UpdatePrefixes(ctx, "acme", []netip.Prefix{c}, nil)
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if versions[v] {
						t.Errorf("version %d returned twice", v)
					}
					versions[v] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		// Every write changed something, so each bumped exactly once.
		wantVersion(t, s, "acme", 1+writers*each)
		view := must[orgstore.View](t)(s.ReadOverrides(ctx, "acme", orgstore.CIDROnly))
		if len(view.Overrides) != writers*each*2/3 || len(view.Prefixes) != writers*each/3 {
			t.Fatalf("%d overrides and %d prefixes, want %d and %d", len(view.Overrides), len(view.Prefixes), writers*each*2/3, writers*each/3)
		}
	})
}

// TestSQLiteDirectoryMustExist: a database.url whose directory does not
// exist (a typo) is refused, naming the path, instead of creating
// directories and an empty database.
func TestSQLiteDirectoryMustExist(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-dir", "orgmanager.db")
	_, err := orgstore.Open(context.Background(), orgstore.Config{URL: "sqlite:" + missing})
	if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "no-such-dir") {
		t.Fatalf("Open = %v, want a refusal naming the missing directory", err)
	}
	if _, statErr := os.Stat(filepath.Dir(missing)); !os.IsNotExist(statErr) {
		t.Fatalf("the directory was created: %v", statErr)
	}
}
