// Package readmodel holds what every filter node keeps in memory of the
// control plane's JetStream key-value buckets (docs/architecture.md): one
// generic Follower that loads a bucket and follows it, and, in its
// subpackages, the read models built on it (sessions/: the IP → subscriber
// index; settings/: the settings layers). The feed index (feeds/) is polled
// from feed directories, not followed from a bucket.
//
// Data flow: producer (IP Mapper, orgmanager) → KV bucket → (watch) →
// Follower.Run → Model.Load / Model.Apply → an immutable snapshot behind an
// atomic pointer → resolver / simulator, which read without a network call
// and without ever waiting for a lock.
//
// The Follower knows nothing of what the values mean: a Decode function
// turns a bucket value into a V, and a Model builds and publishes snapshots
// of V. The initial contents are loaded in one bulk pass (decoded on every
// core); live changes are applied in bursts, each published with one swap.
// The watch survives NATS restarts and disconnects: it resumes after the
// last applied stream sequence, then reconciles with the bucket's list of
// live keys, so deletes whose markers vanished while the node was away are
// not missed; a bucket deleted and created again is reloaded in full. See
// docs/subscriber-index.md.
package readmodel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/natsbus"
)

// Model is what a Follower keeps current. Its methods are called from the
// Follower's Run goroutine only; each publishes a new snapshot atomically,
// so the model's readers never see a half-applied change.
type Model[V any] interface {
	// Load replaces the model's contents with a bucket's complete contents.
	// fill calls put and del in bucket order (a later call for a key wins);
	// when fill fails, Load must publish nothing and return its error.
	// Load returns how many entries the model then holds.
	Load(fill func(put func(V), del func(key string)) error) (int, error)
	// Apply publishes one burst of changes: puts and deletes by key, no key
	// in both. It returns how many entries the model then holds.
	Apply(puts []V, dels []string) int
	// Keys yields the key of every entry the model holds.
	Keys(yield func(string) bool)
}

// Options are the settings every read model shares.
type Options struct {
	// JetStream is the client the watch runs on; required. Its connection
	// should reconnect forever (natsbus.Connect does).
	JetStream jetstream.JetStream
	// Bucket is the KV bucket to follow; each read model has its default.
	Bucket string
	// Logger receives progress and problems; nil discards them.
	Logger *slog.Logger
	// Registerer receives the svcpf_readmodel_* metrics, labelled with the
	// bucket; nil skips them.
	Registerer prometheus.Registerer
	// Clock is the time source for Lag; default time.Now.
	Clock func() time.Time
	// RetryInterval is the pause between attempts to open the bucket or to
	// resume the watch; default 1s.
	RetryInterval time.Duration
	// MaxBurst caps how many updates one snapshot swap applies, so that a
	// flood of changes still becomes visible in steps; default 4096.
	MaxBurst int
	// CheckInterval is how often the bucket's stream is checked against the
	// one being followed (one stream-info request); default 10s. It catches
	// a bucket deleted and created again, which leaves a watch silently
	// waiting for sequences the new stream will not reach soon.
	CheckInterval time.Duration
}

// Config configures a Follower of values of type V.
type Config[V any] struct {
	Options
	// Decode turns the value stored under key into a V, or refuses it; a
	// refused value is counted, logged (rate-limited) and treated as a
	// delete of its key: a stale entry must not keep answering for it.
	// Required.
	Decode func(key string, value []byte) (V, error)
	// Model receives the decoded values; required.
	Model Model[V]
	// Seed, when set, opens a snapshot of the bucket for a full load: the
	// load reads it and then only the stream after the sequence it covers,
	// instead of the whole stream. It returns nil (and no error) when there
	// is none. A seed whose stream is not the bucket's current one, that
	// reaches past its end, or that is too old (Seed.ValidFor) is not
	// used; one that
	// fails to open or to read is given up for a replay of the whole
	// stream. Either way the loaded contents are the same.
	Seed func(ctx context.Context) (*Seed, error)
}

// Seed is a snapshot of a bucket: its contents as of one stream sequence.
type Seed struct {
	// Sequence is the last stream sequence the snapshot covers.
	Sequence uint64
	// StreamCreated is the creation time of the stream it was taken from.
	StreamCreated time.Time
	// Taken is when it was taken: the Created time of its entries.
	Taken time.Time
	// ValidFor is how long after Taken the stream still holds every
	// delete marker written after Sequence. A load does not start from a
	// seed older than half of it (room for clocks that differ and for the
	// load itself): a delete whose marker is gone would not reach it.
	ValidFor time.Duration
	// Next returns the next key and its value (a put), in the order they
	// must be applied, and io.EOF after the last.
	Next func() (key string, value []byte, err error)
	// Close releases it.
	Close func() error
}

// Follower loads a bucket into a Model and keeps it current. Its status
// methods are safe for any number of goroutines and never block.
type Follower[V any] struct {
	opts      Options
	decode    func(string, []byte) (V, error)
	model     Model[V]
	seed      func(context.Context) (*Seed, error)
	log       *slog.Logger
	m         *metrics
	started   time.Time
	running   atomic.Bool
	ready     chan struct{}
	readyOnce sync.Once

	// Lag bookkeeping, written by Run, read by Lag.
	caughtUp    atomic.Bool
	syncedAt    atomic.Int64 // unix ns: last moment the model was known complete
	lastCreated atomic.Int64 // unix ns: server timestamp of the last applied entry
	lastSeq     atomic.Uint64

	// size is how many entries the model held after its last change (Run
	// goroutine only): the reconcile's size hint.
	size int

	// Invalid values are logged at most logBurst per second (Run goroutine
	// only): a bucket full of garbage must not flood the log. The metric
	// counts them all.
	logSecond int64
	logCount  int
}

const logBurst = 20

// New returns a Follower whose model is not loaded yet; call Run.
func New[V any](cfg Config[V]) (*Follower[V], error) {
	o := cfg.Options
	switch {
	case o.JetStream == nil:
		return nil, errors.New("readmodel: Options.JetStream is required")
	case o.Bucket == "":
		return nil, errors.New("readmodel: Options.Bucket is required")
	case cfg.Decode == nil || cfg.Model == nil:
		return nil, errors.New("readmodel: Config.Decode and Config.Model are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = time.Second
	}
	if o.MaxBurst <= 0 {
		o.MaxBurst = 4096
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = 10 * time.Second
	}
	f := &Follower[V]{
		opts:   o,
		decode: cfg.Decode,
		model:  cfg.Model,
		seed:   cfg.Seed,
		log:    o.Logger.With("component", "readmodel", "bucket", o.Bucket),
		ready:  make(chan struct{}),
	}
	f.started = o.Clock()
	m, err := newMetrics(o.Registerer, o.Bucket, func() float64 { return f.Lag().Seconds() })
	if err != nil {
		return nil, err
	}
	f.m = m
	return f, nil
}

// Ready reports whether the initial contents of the bucket are loaded.
func (f *Follower[V]) Ready() bool {
	select {
	case <-f.ready:
		return true
	default:
		return false
	}
}

// WaitReady blocks until the initial contents are loaded or ctx is done.
func (f *Follower[V]) WaitReady(ctx context.Context) error {
	select {
	case <-f.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Lag is how stale the model may be; docs/subscriber-index.md defines it.
// In short: zero while caught up (the last update delivered reported
// nothing further pending, everything delivered is applied and the
// connection is up); otherwise the time since the model was last known
// complete: the later of the last moment it was caught up and the server
// timestamp of the last applied update. Before the initial load it is the
// time since New.
func (f *Follower[V]) Lag() time.Duration {
	now := f.opts.Clock()
	if !f.Ready() {
		return max(now.Sub(f.started), 0)
	}
	if f.caughtUp.Load() {
		return 0
	}
	since := max(f.syncedAt.Load(), f.lastCreated.Load())
	return max(now.Sub(time.Unix(0, since)), 0)
}

// errResume ends one watch so that Run resumes with a fresh one.
var errResume = errors.New("resume")

// errStreamReset means the bucket's stream is not the one loaded (deleted
// and created again): only a full reload is correct.
var errStreamReset = errors.New("bucket stream was recreated")

// Run loads the bucket and follows it until ctx is done, then returns nil.
// It waits for the bucket if it does not exist yet, and resumes after NATS
// disconnects and restarts without losing an update. Run may be called once.
func (f *Follower[V]) Run(ctx context.Context) error {
	if !f.running.CompareAndSwap(false, true) {
		return errors.New("readmodel: Run called twice")
	}
	w := &watchState{}
	for ctx.Err() == nil {
		err := f.watchOnce(ctx, w)
		if ctx.Err() != nil {
			break
		}
		switch {
		case errors.Is(err, errResume):
			f.log.Info("resuming the watch", "after_sequence", f.lastSeq.Load())
		case errors.Is(err, errStreamReset):
			f.log.Warn("bucket was recreated; reloading it in full")
			w.loaded = false
		default:
			f.log.Warn("watch interrupted; retrying", "err", err)
		}
		f.caughtUp.Store(false)
		if !errors.Is(err, errResume) && !sleep(ctx, f.opts.RetryInterval) {
			break
		}
	}
	return nil
}

// watchState carries what one watch hands to the next.
type watchState struct {
	kv         jetstream.KeyValue
	loaded     bool      // a complete snapshot was loaded at least once
	streamMade time.Time // creation time of the stream that snapshot came from
	resumed    bool      // this watch continues an earlier one: reconcile first
	seedFailed bool      // a seed failed to load: replay the whole stream
	reconnects uint64
}

// watchOnce runs one watcher from its start to its end: the initial load (or
// a resume), then live updates until a reconnect, a closed watcher or ctx.
func (f *Follower[V]) watchOnce(ctx context.Context, w *watchState) error {
	if w.kv == nil {
		kv, err := f.openBucket(ctx)
		if err != nil {
			return err
		}
		w.kv = kv
	}
	nc := f.opts.JetStream.Conn()
	w.reconnects = nc.Stats().Reconnects
	made, lastSeq, oneRevision, err := streamState(ctx, w.kv)
	if err != nil {
		return err
	}
	// A stream created anew, or one that ends before what was applied, is not
	// the one this node followed: resuming by sequence would skip its data.
	if w.loaded && (!made.Equal(w.streamMade) || lastSeq < f.lastSeq.Load()) {
		return errStreamReset
	}

	var watcher jetstream.KeyWatcher
	var seed *Seed
	reconcile := false
	if !w.loaded && f.seed != nil && !w.seedFailed {
		seed = f.openSeed(ctx, made, lastSeq)
	}
	if seed != nil {
		defer func() { _ = seed.Close() }()
		// Everything after the seed: puts, deletes and purges alike.
		watcher, err = w.kv.WatchAll(ctx, jetstream.ResumeFromRevision(seed.Sequence+1))
	} else if w.loaded {
		if w.resumed {
			f.m.resumes.Inc()
			reconcile = true // once the replay below is applied
		}
		// Every applied sequence is ≤ lastSeq, so starting after it replays
		// exactly what this node has not applied.
		watcher, err = w.kv.WatchAll(ctx, jetstream.ResumeFromRevision(f.lastSeq.Load()+1))
	} else {
		var opts []jetstream.WatchOpt
		if oneRevision {
			// A bucket that keeps one revision per key holds exactly
			// the last value of each key, so delivering all of it is
			// the same load. A last-per-subject consumer's creation
			// walks every key first: at 10 million keys it took
			// nats-server longer than the client's 5 s API timeout,
			// every retry asked again, and the node never started.
			opts = append(opts, jetstream.IncludeHistory())
		}
		watcher, err = w.kv.WatchAll(ctx, opts...)
	}
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer func() { _ = watcher.Stop() }()
	updates := watcher.Updates()

	if !w.loaded {
		src := watchSource(ctx, updates)
		if seed != nil {
			src = seedSource(ctx, f.opts.Bucket, seed, updates)
		}
		if err := f.load(ctx, src, seed); err != nil {
			if errors.Is(err, errSeed) {
				w.seedFailed = true
				f.m.seedFailures.Inc()
			}
			return err
		}
		f.caughtUp.Store(len(updates) == 0)
		w.loaded, w.streamMade = true, made
	}
	w.resumed = true // whatever ends this watch, the next one is a resume

	tick := time.NewTicker(min(250*time.Millisecond, f.opts.CheckInterval))
	defer tick.Stop()
	lastCheck := time.Now()
	burst := make([]jetstream.KeyValueEntry, 0, f.opts.MaxBurst)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-updates:
			if !ok {
				return errors.New("watcher closed by the client library")
			}
			burst = append(burst[:0], e)
		drain:
			for len(burst) < f.opts.MaxBurst {
				select {
				case e, ok := <-updates:
					if !ok {
						break drain // apply what we have; the next receive reports the close
					}
					burst = append(burst, e)
				default:
					break drain
				}
			}
			f.applyBurst(burst, len(updates) == 0)
			if reconcile && slices.Contains(burst, nil) {
				// The replay is applied. Reading this watcher pauses while
				// the reconcile lists the keys; NATS flow control holds what
				// arrives meanwhile, and it is applied right after.
				if err := f.reconcile(ctx, w.kv); err != nil {
					return err
				}
				reconcile = false
			}
		case <-tick.C:
			if nc.Status() != nats.CONNECTED {
				f.caughtUp.Store(false)
				continue
			}
			if r := nc.Stats().Reconnects; r != w.reconnects {
				return errResume
			}
			if time.Since(lastCheck) >= f.opts.CheckInterval {
				lastCheck = time.Now()
				if err := f.checkStream(ctx, w, len(updates) == 0); err != nil {
					return err
				}
			}
			if f.caughtUp.Load() {
				f.syncedAt.Store(f.opts.Clock().UnixNano())
			}
		}
	}
}

// checkStream compares the bucket's stream with the one being followed. A
// failed request only marks the model as possibly behind: it keeps
// serving, and Lag shows the doubt.
func (f *Follower[V]) checkStream(ctx context.Context, w *watchState, drained bool) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	made, lastSeq, _, err := streamState(cctx, w.kv)
	switch {
	case err != nil:
		f.caughtUp.Store(false)
		f.log.Warn("cannot check the bucket", "err", err)
		return nil
	case !made.Equal(w.streamMade) || lastSeq < f.lastSeq.Load():
		return errStreamReset
	case drained && lastSeq <= f.lastSeq.Load():
		// Everything the stream holds is applied.
		f.caughtUp.Store(true)
	}
	return nil
}

func (f *Follower[V]) openBucket(ctx context.Context) (jetstream.KeyValue, error) {
	logged := false
	for {
		kv, err := f.opts.JetStream.KeyValue(ctx, f.opts.Bucket)
		if err == nil {
			return kv, nil
		}
		if !logged {
			// nats.go says "outbound buffer limit exceeded" while the
			// server is away: name the server and what waits for it.
			err = natsbus.Unreachable(f.opts.JetStream.Conn(), err, "open the bucket")
			f.log.Info("waiting for the bucket", "err", err)
			logged = true
		}
		if !sleep(ctx, f.opts.RetryInterval) {
			return nil, ctx.Err()
		}
	}
}

// streamState returns when the bucket's stream was created, its last
// sequence number, and whether it keeps one revision per key.
func streamState(ctx context.Context, kv jetstream.KeyValue) (made time.Time, lastSeq uint64, oneRevision bool, err error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return time.Time{}, 0, false, fmt.Errorf("bucket status: %w", err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return time.Time{}, 0, false, errors.New("bucket status without stream info")
	}
	info := bs.StreamInfo()
	return info.Created, info.State.LastSeq, bs.History() == 1, nil
}

// openSeed opens the seed for a full load of the stream created at made
// whose last sequence is lastSeq, or returns nil when there is none to use.
func (f *Follower[V]) openSeed(ctx context.Context, made time.Time, lastSeq uint64) *Seed {
	seed, err := f.seed(ctx)
	switch {
	case err != nil:
		f.log.Warn("cannot open the snapshot; replaying the whole stream", "err", err)
		f.m.seedFailures.Inc()
		return nil
	case seed == nil:
		return nil
	case !seed.StreamCreated.Equal(made) || seed.Sequence > lastSeq:
		// Taken from another stream: the bucket was deleted and created
		// again since.
		f.log.Info("the snapshot is of another stream of the bucket; replaying the whole stream",
			"snapshot_sequence", seed.Sequence, "last_sequence", lastSeq)
		_ = seed.Close()
		return nil
	case f.opts.Clock().Sub(seed.Taken) > seed.ValidFor/2:
		f.log.Warn("the bucket's snapshot is too old to start from; replaying the whole stream",
			"taken", seed.Taken, "valid_for", seed.ValidFor)
		_ = seed.Close()
		return nil
	}
	return seed
}

// load reads the initial values from src (a seed's records and then the
// watcher's, or the watcher's alone) up to its end into the model as one
// snapshot.
func (f *Follower[V]) load(ctx context.Context, src func() (jetstream.KeyValueEntry, bool, error), seed *Seed) error {
	seeded := seed != nil
	start := f.opts.Clock()
	var newest jetstream.KeyValueEntry
	n := 0
	size, err := f.model.Load(func(put func(V), del func(string)) error {
		return decodeParallel(ctx, src, f.decode, func(e jetstream.KeyValueEntry, v V, err error) {
			n++
			if newest == nil || e.Revision() > newest.Revision() {
				newest = e
			}
			switch {
			case e.Operation() != jetstream.KeyValuePut:
				del(e.Key())
			case err != nil:
				f.noteInvalid(e, err)
				del(e.Key())
			default:
				put(v)
			}
		})
	})
	if err != nil {
		return err
	}
	// A reload after the stream was recreated starts the sequences afresh.
	f.lastSeq.Store(0)
	if seeded {
		// Applied up to the seed's sequence even when it held nothing
		// and nothing followed it.
		f.lastSeq.Store(seed.Sequence)
	}
	if newest != nil {
		f.noteApplied(newest)
	}
	f.m.sequence.Set(float64(f.lastSeq.Load()))
	f.syncedAt.Store(f.opts.Clock().UnixNano())
	f.m.fullLoads.Inc()
	if seeded {
		f.m.seededLoads.Inc()
	}
	f.m.applied.Add(float64(n))
	f.m.swaps.Inc()
	f.size = size
	f.m.entries.Set(float64(size))
	f.readyOnce.Do(func() {
		f.m.ready.Set(1)
		close(f.ready)
	})
	f.log.Info("bucket loaded", "entries", size, "values", n, "sequence", f.lastSeq.Load(), "from_snapshot", seeded,
		"took", f.opts.Clock().Sub(start).Round(time.Millisecond))
	return nil
}

// applyBurst applies a run of watch entries as one snapshot. Several entries
// for one key collapse to the last. A nil entry (the end-of-initial-values
// marker of a resumed watch) only says the backlog is delivered.
func (f *Follower[V]) applyBurst(burst []jetstream.KeyValueEntry, drained bool) {
	start := time.Now()
	last := make(map[string]int, len(burst))
	var tail jetstream.KeyValueEntry
	for i, e := range burst {
		if e != nil {
			last[e.Key()] = i
			tail = e
		}
	}
	var puts []V
	var dels []string
	for i, e := range burst {
		if e == nil || last[e.Key()] != i {
			continue
		}
		if e.Operation() != jetstream.KeyValuePut {
			dels = append(dels, e.Key())
			continue
		}
		v, err := f.decode(e.Key(), e.Value())
		if err != nil {
			// The bucket no longer holds a usable value for this key; a
			// stale one must not keep answering for it.
			f.noteInvalid(e, err)
			dels = append(dels, e.Key())
			continue
		}
		puts = append(puts, v)
	}
	if tail == nil {
		// Only markers: the resumed watch has delivered its backlog.
		f.caughtUp.Store(drained)
		if drained {
			f.syncedAt.Store(f.opts.Clock().UnixNano())
		}
		return
	}
	size := f.model.Apply(puts, dels)
	f.size = size
	f.noteApplied(tail)
	upToDate := drained && tail.Delta() == 0
	if burst[len(burst)-1] == nil {
		upToDate = drained
	}
	f.caughtUp.Store(upToDate)
	if upToDate {
		f.syncedAt.Store(f.opts.Clock().UnixNano())
	}
	f.m.applied.Add(float64(len(burst) - countNil(burst)))
	f.m.swaps.Inc()
	f.m.entries.Set(float64(size))
	f.m.applySeconds.Observe(time.Since(start).Seconds())
}

func countNil(es []jetstream.KeyValueEntry) int {
	n := 0
	for _, e := range es {
		if e == nil {
			n++
		}
	}
	return n
}

// noteApplied records e's stream sequence (the KV "revision" of the
// client library) as applied.
func (f *Follower[V]) noteApplied(e jetstream.KeyValueEntry) {
	if r := e.Revision(); r > f.lastSeq.Load() {
		f.lastSeq.Store(r)
		f.m.sequence.Set(float64(r))
	}
	f.lastCreated.Store(e.Created().UnixNano())
}

// reconcile removes entries whose keys are no longer live in the bucket.
// A resumed watch replays every change after the last applied sequence that
// the stream still holds, but a delete marker removed while this node was
// away (PurgeDeletes, a TTL) leaves nothing to replay. The live-key list is
// taken after everything applied so far (the caller stops applying while it
// runs), so an entry absent from it is gone as of the listing, and any
// later put of it has a higher sequence and is applied after.
func (f *Follower[V]) reconcile(ctx context.Context, kv jetstream.KeyValue) error {
	start := f.opts.Clock()
	lw, err := kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("reconcile: list keys: %w", err)
	}
	defer func() { _ = lw.Stop() }()
	live := make(map[string]struct{}, f.size)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-lw.Updates():
			switch {
			case !ok:
				return errors.New("reconcile: key listing closed early")
			case e == nil:
				done = true
			default:
				if e.Operation() == jetstream.KeyValuePut {
					live[e.Key()] = struct{}{}
				} else {
					delete(live, e.Key())
				}
			}
		}
	}
	var gone []string
	for k := range f.model.Keys {
		if _, ok := live[k]; !ok {
			gone = append(gone, k)
		}
	}
	if len(gone) > 0 {
		f.size = f.model.Apply(nil, gone)
		f.m.entries.Set(float64(f.size))
		f.m.swaps.Inc()
	}
	f.m.reconcileRemoved.Add(float64(len(gone)))
	f.log.Info("reconciled with the bucket's live keys", "keys", len(live), "removed", len(gone),
		"took", f.opts.Clock().Sub(start).Round(time.Millisecond))
	return nil
}

func (f *Follower[V]) noteInvalid(e jetstream.KeyValueEntry, err error) {
	f.m.decodeErrors.Inc()
	if sec := time.Now().Unix(); sec != f.logSecond {
		f.logSecond, f.logCount = sec, 0
	}
	if f.logCount++; f.logCount <= logBurst {
		f.log.Warn("skipping an invalid value", "key", e.Key(), "sequence", e.Revision(), "err", err)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
