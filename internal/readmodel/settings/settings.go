// Package settingsmodel (directory readmodel/settings) is the node's
// settings read model: every settings document the orgmanager deploys,
// held in memory by organisation and layer, so that the decision engine
// finds the layers of a subscriber without a network call and without
// ever waiting for a lock (docs/settings-readmodel.md).
//
// Data flow: orgmanager deploy → KV "settings" → readmodel.Follower →
// Model → immutable Snapshot behind an atomic pointer → policy (which
// merges a subscriber's layers with settings.Merge, once per subscriber and
// Version) → resolver / simulator. See docs/settings-readmodel.md.
//
// The package is named settingsmodel rather than settings so that it never
// shadows the settings package of the documents, which its callers use too.
package settingsmodel

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync/atomic"

	"github.com/svc-pf/svc-pf/internal/readmodel"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// Config configures a Model: the follower's options, Bucket defaulting to
// settings.Bucket.
type Config readmodel.Options

// Model is the node-local settings read model. Its read methods are safe
// for any number of goroutines and never block; Run keeps it current.
//
// Each read method of Model loads the current snapshot on its own: two
// calls may see two snapshots. To read a Version and the layers it stands
// for (a cache of merged policies must), take one Snapshot and ask it both.
type Model struct {
	snap     atomic.Pointer[Snapshot]
	follower *readmodel.Follower[entry]
	seed     maphash.Seed
	// version is the last version handed out; the Run goroutine's.
	version uint64
}

// New returns a Model holding no documents; call Run to load and follow
// the bucket.
func New(cfg Config) (*Model, error) {
	opts := readmodel.Options(cfg)
	if opts.Bucket == "" {
		opts.Bucket = settings.Bucket
	}
	m := &Model{seed: maphash.MakeSeed()}
	m.snap.Store(emptySnapshot(m.seed))
	f, err := readmodel.New(readmodel.Config[entry]{
		Options: opts,
		Decode:  decode,
		Model:   (*followModel)(m),
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

// Snapshot returns the current snapshot. It never blocks; hold on to it to
// answer several questions from one consistent view.
func (m *Model) Snapshot() *Snapshot { return m.snap.Load() }

// entry is one decoded value of the bucket: a document and where it goes.
type entry struct {
	org    string
	scope  settings.Scope
	global bool
	doc    *settings.Document
}

// decode reads a key with settings.ParseKey and its value with
// settings.Parse, the orgmanager's own rule. The follower counts a refusal
// in svcpf_readmodel_decode_errors_total and treats it as a delete of the
// key.
func decode(key string, value []byte) (entry, error) {
	org, sc, global, err := settings.ParseKey(key)
	if err != nil {
		return entry{}, err
	}
	doc, err := settings.Parse(value)
	if err != nil {
		return entry{}, fmt.Errorf("settings key %q: %w", key, err)
	}
	return entry{org: org, scope: sc, global: global, doc: doc}, nil
}

// followModel is the readmodel.Model side of a Model, kept off its method
// set so that only the follower publishes snapshots.
type followModel Model

func (x *followModel) Load(fill func(put func(entry), del func(string)) error) (int, error) {
	b := newBuilder(emptySnapshot(x.seed), x.version+1)
	if err := fill(b.put, b.del); err != nil {
		return 0, err
	}
	x.version++
	s := b.finish()
	// Every organisation's version moves past what it was before the load:
	// the documents were possibly all replaced.
	s.base = x.version
	x.snap.Store(s)
	return s.docs, nil
}

func (x *followModel) Apply(puts []entry, dels []string) int {
	cur := x.snap.Load()
	b := newBuilder(cur, x.version+1)
	for _, v := range puts {
		b.put(v)
	}
	for _, k := range dels {
		b.del(k)
	}
	if !b.changed() {
		// Equal documents put again, deletes of keys not held: nothing to
		// publish, and no version moves.
		return cur.docs
	}
	x.version++
	s := b.finish()
	x.snap.Store(s)
	return s.docs
}

func (x *followModel) Keys(yield func(string) bool) {
	for key := range x.snap.Load().All {
		if !yield(key) {
			return
		}
	}
}

var _ readmodel.Model[entry] = (*followModel)(nil)
