package deploy

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
	"github.com/svc-pf/svc-pf/internal/session"
)

// recorder is a hand-written Publisher: it records every diff, can be made
// to fail, and can hold publishes until released.
type recorder struct {
	mu    sync.Mutex
	diffs []Diff
	fail  bool
	err   error         // what a failing Publish returns; nil: a plain error
	gate  chan struct{} // when set, Publish waits for it to close
	calls int
}

func (r *recorder) Publish(ctx context.Context, d Diff) error {
	r.mu.Lock()
	gate := r.gate
	r.calls++
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		if r.err != nil {
			return r.err
		}
		return errors.New("IP Mapper unreachable")
	}
	r.diffs = append(r.diffs, d)
	return nil
}

func (r *recorder) setFail(v bool) { r.mu.Lock(); r.fail = v; r.mu.Unlock() }

// failWith makes Publish fail with err (nil: succeed).
func (r *recorder) failWith(err error) { r.mu.Lock(); r.fail, r.err = err != nil, err; r.mu.Unlock() }

func (r *recorder) callCount() int { r.mu.Lock(); defer r.mu.Unlock(); return r.calls }

func (r *recorder) all() []Diff {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.diffs)
}

func (r *recorder) last() Diff {
	d := r.all()
	return d[len(d)-1]
}

type fixture struct {
	t     *testing.T
	store *orgstore.Store
	pub   *recorder
	d     *Deployer
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	f := &fixture{t: t, store: storetest.Open(t, storetest.SQLite), pub: &recorder{}}
	cfg.Store, cfg.Publisher = f.store, f.pub
	if cfg.RetryMin == 0 {
		cfg.RetryMin, cfg.RetryMax = 5*time.Millisecond, 20*time.Millisecond
	}
	var err error
	if f.d, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

func (f *fixture) ctx() context.Context { return context.Background() }

func (f *fixture) org(id string, prefixes ...string) {
	f.t.Helper()
	if _, err := f.store.PutOrg(f.ctx(), id); err != nil {
		f.t.Fatal(err)
	}
	var ps []netip.Prefix
	for _, p := range prefixes {
		ps = append(ps, netip.MustParsePrefix(p))
	}
	if _, err := f.store.UpdatePrefixes(f.ctx(), id, ps, nil); err != nil {
		f.t.Fatal(err)
	}
	f.d.Notify(id)
}

func (f *fixture) put(org, cidr, user string, meta string) {
	f.t.Helper()
	o := orgstore.Override{CIDR: netip.MustParsePrefix(cidr), Attributes: identity.Attributes{Username: user}}
	if meta != "" {
		o.Meta = []byte(meta)
	}
	if _, err := f.store.PutOverride(f.ctx(), org, o); err != nil {
		f.t.Fatal(err)
	}
	f.d.Notify(org)
}

// settle waits until org is deployed and not dirty.
func (f *fixture) settle(org string) Status {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := f.d.Status(org)
		if !st.Dirty && st.Deployed {
			return st
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s not settled: %+v", org, st)
		}
		time.Sleep(time.Millisecond)
	}
}

func ids(ss []session.Session) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.ID)
	}
	return out
}

func id(org, orig, user string) string {
	return session.NewID(identity.Identity{Org: org, Attributes: identity.Attributes{Username: user}}, netip.MustParsePrefix(orig))
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
