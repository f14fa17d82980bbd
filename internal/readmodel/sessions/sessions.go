// Package sessions is the node's sessions read model: the read side of the
// sessions the IP Mapper publishes (docs/ipmapper.md, the session). A
// readmodel.Follower keeps an immutable sessionindex.Index of the KV bucket
// "sessions" behind an atomic pointer, so the resolver and the simulator turn
// a client IP, a username or a device id into a session without a network
// call and without ever waiting for a lock.
//
// Data flow: IP Mapper → KV "sessions" → readmodel.Follower → Model →
// atomic snapshot → resolver / simulator. See docs/subscriber-index.md.
package sessions

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/svc-pf/svc-pf/internal/readmodel"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
	"github.com/svc-pf/svc-pf/internal/sessionsnap"
)

// Config configures a Model: the follower's options, Bucket defaulting to
// session.Bucket.
type Config readmodel.Options

// Model is the node-local sessions read model. Its read methods are safe for
// any number of goroutines and never block; Run keeps it current.
type Model struct {
	snap     atomic.Pointer[sessionindex.Index]
	follower *readmodel.Follower[*session.Session]
}

// New returns a Model holding no sessions; call Run to load and follow the
// bucket.
func New(cfg Config) (*Model, error) {
	opts := readmodel.Options(cfg)
	if opts.Bucket == "" {
		opts.Bucket = session.Bucket
	}
	m := &Model{}
	m.snap.Store(sessionindex.Empty())
	f, err := readmodel.New(readmodel.Config[*session.Session]{
		Options: opts,
		// The index keeps a compact copy (org and location interned), so
		// the decoded session is garbage once applied.
		Decode: session.Decode,
		Model:  (*indexModel)(m),
		Seed:   seed(opts),
	})
	if err != nil {
		return nil, err
	}
	m.follower = f
	return m, nil
}

// Run loads the bucket and follows it until ctx is done (readmodel.Follower.Run).
func (m *Model) Run(ctx context.Context) error { return m.follower.Run(ctx) }

// Ready reports whether the initial snapshot of the bucket is loaded.
func (m *Model) Ready() bool { return m.follower.Ready() }

// WaitReady blocks until the initial snapshot is loaded or ctx is done.
func (m *Model) WaitReady(ctx context.Context) error { return m.follower.WaitReady(ctx) }

// Lag is how stale the current snapshot may be (readmodel.Follower.Lag).
func (m *Model) Lag() time.Duration { return m.follower.Lag() }

// Snapshot returns the current snapshot. It never blocks; hold on to it to
// answer several questions from one consistent view.
func (m *Model) Snapshot() *sessionindex.Index { return m.snap.Load() }

// LookupIP returns the session whose allocation is the longest prefix
// containing a, in the current snapshot. It does not allocate.
// (Only internal/app's tests call it and Get; they can use Snapshot().)
func (m *Model) LookupIP(a netip.Addr) (sessionindex.Entry, bool) { return m.Snapshot().LookupIP(a) }

// Get returns the session with this id in the current snapshot.
func (m *Model) Get(id string) (sessionindex.Entry, bool) { return m.Snapshot().Get(id) }

// indexModel is the readmodel.Model side of a Model, kept off its method
// set so that only the follower publishes snapshots.
type indexModel Model

func (x *indexModel) Load(fill func(put func(*session.Session), del func(string)) error) (int, error) {
	b := sessionindex.NewBuilder(0)
	if err := fill(b.Put, b.Delete); err != nil {
		return 0, err
	}
	ix := b.Index()
	x.snap.Store(ix)
	return ix.Len(), nil
}

func (x *indexModel) Apply(puts []*session.Session, dels []string) int {
	ix := x.snap.Load().Apply(puts, dels)
	x.snap.Store(ix)
	return ix.Len()
}

func (x *indexModel) Keys(yield func(string) bool) {
	for e := range x.snap.Load().All {
		if !yield(e.ID()) {
			return
		}
	}
}

var _ readmodel.Model[*session.Session] = (*indexModel)(nil)

// seed opens the IP Mapper's newest snapshot of the bucket (sessionsnap),
// so that a cold start reads one object and the stream after it instead of
// every message of the stream. Its records are the bucket's values,
// decoded by the same rule as the stream's, so both paths load the same
// index.
func seed(opts readmodel.Options) func(context.Context) (*readmodel.Seed, error) {
	return func(ctx context.Context) (*readmodel.Seed, error) {
		snap, err := sessionsnap.Open(ctx, opts.JetStream, opts.Bucket)
		if errors.Is(err, sessionsnap.ErrNone) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return &readmodel.Seed{Sequence: snap.Sequence, StreamCreated: snap.StreamCreated, Taken: snap.Taken,
			ValidFor: snap.ValidFor, Next: snap.Next, Close: snap.Close}, nil
	}
}
