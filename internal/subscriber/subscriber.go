// Package subscriber is the node-local subscriber index: the read side of the
// sessions the IP Mapper publishes (DESIGN.md §1, §3). It watches the
// JetStream KV bucket "sessions" and keeps an immutable
// sessionindex.Index of its contents in an atomic pointer, so the resolver and
// the simulator turn a client IP, a username or a device id into a session
// without a network call and without ever waiting for a lock.
//
// Data flow: IP Mapper → KV "sessions" → (watch) → Index.Run → atomic
// snapshot → resolver / simulator.
//
// The initial contents are loaded in one bulk pass; live changes are applied
// in bursts, each published with one atomic swap. The watch survives NATS
// restarts and disconnects: it resumes from the last applied revision and
// then reconciles with the bucket's list of live keys, so deletes whose
// markers vanished while the node was away are not missed. See
// docs/subscriber-index.md.
package subscriber

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
)

// Config configures an Index.
type Config struct {
	// JetStream is the client the watch runs on; required. Its connection
	// should reconnect forever (natsbus.Connect does).
	JetStream jetstream.JetStream
	// Bucket is the KV bucket to watch; default session.Bucket.
	Bucket string
	// Logger receives progress and problems; nil discards them.
	Logger *slog.Logger
	// Registerer receives the svcpf_subscriber_* metrics; nil skips them.
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
	// one the index follows (one stream-info request); default 10s. It
	// catches a bucket deleted and created again, which leaves a watch
	// silently waiting for revisions the new stream will not reach soon.
	CheckInterval time.Duration
}

// Index is the node-local subscriber index. Its read methods are safe for
// any number of goroutines and never block; Run keeps it current.
type Index struct {
	kvName    string
	js        jetstream.JetStream
	log       *slog.Logger
	now       func() time.Time
	retry     time.Duration
	check     time.Duration
	maxBurst  int
	m         *metrics
	started   time.Time
	running   atomic.Bool
	snap      atomic.Pointer[sessionindex.Index]
	ready     chan struct{}
	readyOnce sync.Once

	// Lag bookkeeping, written by Run, read by Lag.
	caughtUp    atomic.Bool
	syncedAt    atomic.Int64 // unix ns: last moment the snapshot was known complete
	lastCreated atomic.Int64 // unix ns: server timestamp of the last applied entry
	lastRev     atomic.Uint64

	// Invalid values are logged at most logBurst per second (Run goroutine
	// only): a bucket full of garbage must not flood the log. The metric
	// counts them all.
	logSecond int64
	logCount  int
}

const logBurst = 20

// New returns an Index holding no sessions; call Run to load and follow the
// bucket.
func New(cfg Config) (*Index, error) {
	if cfg.JetStream == nil {
		return nil, errors.New("subscriber: Config.JetStream is required")
	}
	if cfg.Bucket == "" {
		cfg.Bucket = session.Bucket
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	if cfg.MaxBurst <= 0 {
		cfg.MaxBurst = 4096
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 10 * time.Second
	}
	x := &Index{
		kvName:   cfg.Bucket,
		js:       cfg.JetStream,
		log:      cfg.Logger.With("component", "subscriber-index", "bucket", cfg.Bucket),
		now:      cfg.Clock,
		retry:    cfg.RetryInterval,
		check:    cfg.CheckInterval,
		maxBurst: cfg.MaxBurst,
		ready:    make(chan struct{}),
	}
	x.started = x.now()
	x.snap.Store(sessionindex.Empty())
	m, err := newMetrics(cfg.Registerer, x)
	if err != nil {
		return nil, err
	}
	x.m = m
	return x, nil
}

// Snapshot returns the current snapshot. It never blocks; hold on to it to
// answer several questions from one consistent view.
func (x *Index) Snapshot() *sessionindex.Index { return x.snap.Load() }

// LookupIP returns the session whose allocation is the longest prefix
// containing a, in the current snapshot. It does not allocate.
func (x *Index) LookupIP(a netip.Addr) (sessionindex.Entry, bool) { return x.Snapshot().LookupIP(a) }

// ByUsername returns the sessions with this username in the current snapshot.
func (x *Index) ByUsername(u string) []sessionindex.Entry { return x.Snapshot().ByUsername(u) }

// ByDeviceID returns the sessions with this device id in the current snapshot.
func (x *Index) ByDeviceID(d string) []sessionindex.Entry { return x.Snapshot().ByDeviceID(d) }

// Get returns the session with this id in the current snapshot.
func (x *Index) Get(id string) (sessionindex.Entry, bool) { return x.Snapshot().Get(id) }

// Ready reports whether the initial snapshot of the bucket is loaded.
func (x *Index) Ready() bool {
	select {
	case <-x.ready:
		return true
	default:
		return false
	}
}

// WaitReady blocks until the initial snapshot is loaded or ctx is done.
func (x *Index) WaitReady(ctx context.Context) error {
	select {
	case <-x.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Lag is how stale the current snapshot may be; docs/subscriber-index.md
// defines it. In short: zero while caught up (the last update delivered
// reported nothing further pending, everything delivered is applied and
// the connection is up); otherwise the time since the snapshot was last
// known complete: the later of the last moment it was caught up and the
// server timestamp of the last applied update. Before the initial snapshot
// it is the time since New.
func (x *Index) Lag() time.Duration {
	now := x.now()
	if !x.Ready() {
		return max(now.Sub(x.started), 0)
	}
	if x.caughtUp.Load() {
		return 0
	}
	since := max(x.syncedAt.Load(), x.lastCreated.Load())
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
func (x *Index) Run(ctx context.Context) error {
	if !x.running.CompareAndSwap(false, true) {
		return errors.New("subscriber: Run called twice")
	}
	w := &watchState{}
	for ctx.Err() == nil {
		err := x.watchOnce(ctx, w)
		if ctx.Err() != nil {
			break
		}
		switch {
		case errors.Is(err, errResume):
			x.log.Info("resuming the sessions watch", "after_revision", x.lastRev.Load())
		case errors.Is(err, errStreamReset):
			x.log.Warn("sessions bucket was recreated; reloading it in full")
			w.loaded = false
		default:
			x.log.Warn("sessions watch interrupted; retrying", "err", err)
		}
		x.caughtUp.Store(false)
		if !errors.Is(err, errResume) && !sleep(ctx, x.retry) {
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
	reconnects uint64
}

// watchOnce runs one watcher from its start to its end: the initial load (or
// a resume), then live updates until a reconnect, a closed watcher or ctx.
func (x *Index) watchOnce(ctx context.Context, w *watchState) error {
	if w.kv == nil {
		kv, err := x.openBucket(ctx)
		if err != nil {
			return err
		}
		w.kv = kv
	}
	nc := x.js.Conn()
	w.reconnects = nc.Stats().Reconnects
	made, lastSeq, err := x.streamState(ctx, w.kv)
	if err != nil {
		return err
	}
	// A stream created anew, or one that ends before what was applied, is not
	// the one this node followed: resuming by revision would skip its data.
	if w.loaded && (!made.Equal(w.streamMade) || lastSeq < x.lastRev.Load()) {
		return errStreamReset
	}

	var watcher jetstream.KeyWatcher
	reconcile := false
	if w.loaded {
		if w.resumed {
			x.m.resumes.Inc()
			reconcile = true // once the replay below is applied
		}
		// Every applied revision is ≤ lastRev, so starting after it replays
		// exactly what this node has not applied.
		watcher, err = w.kv.WatchAll(ctx, jetstream.ResumeFromRevision(x.lastRev.Load()+1))
	} else {
		watcher, err = w.kv.WatchAll(ctx)
	}
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer func() { _ = watcher.Stop() }()
	updates := watcher.Updates()

	if !w.loaded {
		if err := x.load(ctx, updates); err != nil {
			return err
		}
		w.loaded, w.streamMade = true, made
	}
	w.resumed = true // whatever ends this watch, the next one is a resume

	tick := time.NewTicker(min(250*time.Millisecond, x.check))
	defer tick.Stop()
	lastCheck := time.Now()
	burst := make([]jetstream.KeyValueEntry, 0, x.maxBurst)
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
			for len(burst) < x.maxBurst {
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
			x.applyBurst(burst, len(updates) == 0)
			if reconcile && slices.Contains(burst, nil) {
				// The replay is applied. Reading this watcher pauses while
				// the reconcile lists the keys; NATS flow control holds what
				// arrives meanwhile, and it is applied right after.
				if err := x.reconcile(ctx, w.kv); err != nil {
					return err
				}
				reconcile = false
			}
		case <-tick.C:
			if nc.Status() != nats.CONNECTED {
				x.caughtUp.Store(false)
				continue
			}
			if r := nc.Stats().Reconnects; r != w.reconnects {
				return errResume
			}
			if time.Since(lastCheck) >= x.check {
				lastCheck = time.Now()
				if err := x.checkStream(ctx, w, len(updates) == 0); err != nil {
					return err
				}
			}
			if x.caughtUp.Load() {
				x.syncedAt.Store(x.now().UnixNano())
			}
		}
	}
}

// checkStream compares the bucket's stream with the one being followed. A
// failed request only marks the index as possibly behind: the snapshot keeps
// serving, and Lag shows the doubt.
func (x *Index) checkStream(ctx context.Context, w *watchState, drained bool) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	made, lastSeq, err := x.streamState(cctx, w.kv)
	switch {
	case err != nil:
		x.caughtUp.Store(false)
		x.log.Warn("cannot check the sessions bucket", "err", err)
		return nil
	case !made.Equal(w.streamMade) || lastSeq < x.lastRev.Load():
		return errStreamReset
	case drained && lastSeq <= x.lastRev.Load():
		// Everything the stream holds is applied.
		x.caughtUp.Store(true)
	}
	return nil
}

func (x *Index) openBucket(ctx context.Context) (jetstream.KeyValue, error) {
	logged := false
	for {
		kv, err := x.js.KeyValue(ctx, x.kvName)
		if err == nil {
			return kv, nil
		}
		if !logged {
			x.log.Info("waiting for the sessions bucket", "err", err)
			logged = true
		}
		if !sleep(ctx, x.retry) {
			return nil, ctx.Err()
		}
	}
}

// streamState returns when the bucket's stream was created and its last
// sequence number.
func (x *Index) streamState(ctx context.Context, kv jetstream.KeyValue) (time.Time, uint64, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("bucket status: %w", err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return time.Time{}, 0, errors.New("bucket status without stream info")
	}
	info := bs.StreamInfo()
	return info.Created, info.State.LastSeq, nil
}

// load reads the initial values up to the watcher's end-of-snapshot marker
// into a Builder and publishes the result as one snapshot.
func (x *Index) load(ctx context.Context, updates <-chan jetstream.KeyValueEntry) error {
	start := x.now()
	b := sessionindex.NewBuilder(0)
	var newest jetstream.KeyValueEntry
	n := 0
	err := decodeParallel(ctx, updates, func(e jetstream.KeyValueEntry, s *session.Session, err error) {
		n++
		if newest == nil || e.Revision() > newest.Revision() {
			newest = e
		}
		switch {
		case e.Operation() != jetstream.KeyValuePut:
			b.Delete(e.Key())
		case err != nil:
			x.noteInvalid(e, err)
			b.Delete(e.Key())
		default:
			b.Put(s)
		}
	})
	if err != nil {
		return err
	}
	ix := b.Index()
	x.snap.Store(ix)
	// A reload after the stream was recreated starts the revisions afresh.
	x.lastRev.Store(0)
	if newest != nil {
		x.noteApplied(newest)
	}
	x.m.revision.Set(float64(x.lastRev.Load()))
	x.caughtUp.Store(len(updates) == 0)
	x.syncedAt.Store(x.now().UnixNano())
	x.m.fullLoads.Inc()
	x.m.applied.Add(float64(n))
	x.m.swaps.Inc()
	x.m.sessions.Set(float64(ix.Len()))
	x.readyOnce.Do(func() {
		x.m.ready.Set(1)
		close(x.ready)
	})
	x.log.Info("sessions loaded", "sessions", ix.Len(), "entries", n, "revision", x.lastRev.Load(),
		"took", x.now().Sub(start).Round(time.Millisecond))
	return nil
}

// applyBurst applies a run of watch entries as one snapshot. Several entries
// for one key collapse to the last. A nil entry (the end-of-initial-values
// marker of a resumed watch) only says the backlog is delivered.
func (x *Index) applyBurst(burst []jetstream.KeyValueEntry, drained bool) {
	start := time.Now()
	last := make(map[string]int, len(burst))
	var tail jetstream.KeyValueEntry
	for i, e := range burst {
		if e != nil {
			last[e.Key()] = i
			tail = e
		}
	}
	var ups []*session.Session
	var dels []string
	for i, e := range burst {
		if e == nil || last[e.Key()] != i {
			continue
		}
		if e.Operation() != jetstream.KeyValuePut {
			dels = append(dels, e.Key())
			continue
		}
		s, err := x.decode(e)
		if err != nil {
			// The bucket no longer holds a usable session for this key; a
			// stale one must not keep answering for it.
			dels = append(dels, e.Key())
			continue
		}
		ups = append(ups, s)
	}
	if tail == nil {
		// Only markers: the resumed watch has delivered its backlog.
		x.caughtUp.Store(drained)
		if drained {
			x.syncedAt.Store(x.now().UnixNano())
		}
		return
	}
	ix := x.snap.Load().Apply(ups, dels)
	x.snap.Store(ix)
	x.noteApplied(tail)
	upToDate := drained && tail.Delta() == 0
	if burst[len(burst)-1] == nil {
		upToDate = drained
	}
	x.caughtUp.Store(upToDate)
	if upToDate {
		x.syncedAt.Store(x.now().UnixNano())
	}
	x.m.applied.Add(float64(len(burst) - countNil(burst)))
	x.m.swaps.Inc()
	x.m.sessions.Set(float64(ix.Len()))
	x.m.applySeconds.Observe(time.Since(start).Seconds())
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

func (x *Index) noteApplied(e jetstream.KeyValueEntry) {
	if r := e.Revision(); r > x.lastRev.Load() {
		x.lastRev.Store(r)
		x.m.revision.Set(float64(r))
	}
	x.lastCreated.Store(e.Created().UnixNano())
}

// reconcile removes sessions whose keys are no longer live in the bucket.
// A resumed watch replays every change after the last applied revision that
// the stream still holds, but a delete marker removed while this node was
// away (PurgeDeletes, a TTL) leaves nothing to replay. The live-key list is
// taken after everything applied so far (the caller stops applying while it
// runs), so a session absent from it is gone as of the listing, and any
// later put of it has a higher revision and is applied after.
func (x *Index) reconcile(ctx context.Context, kv jetstream.KeyValue) error {
	start := x.now()
	lw, err := kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("reconcile: list keys: %w", err)
	}
	defer func() { _ = lw.Stop() }()
	live := make(map[string]struct{}, x.snap.Load().Len())
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
	cur := x.snap.Load()
	var gone []string
	for e := range cur.All {
		if _, ok := live[e.ID()]; !ok {
			gone = append(gone, e.ID())
		}
	}
	if len(gone) > 0 {
		ix := cur.Apply(nil, gone)
		x.snap.Store(ix)
		x.m.sessions.Set(float64(ix.Len()))
		x.m.swaps.Inc()
	}
	x.m.reconcileRemoved.Add(float64(len(gone)))
	x.log.Info("reconciled with the bucket's live keys", "keys", len(live), "removed", len(gone),
		"took", x.now().Sub(start).Round(time.Millisecond))
	return nil
}

// decode turns a watch entry into a session, counting and logging values
// that are not one.
func (x *Index) decode(e jetstream.KeyValueEntry) (*session.Session, error) {
	s, err := session.Decode(e.Key(), e.Value())
	if err != nil {
		x.noteInvalid(e, err)
	}
	return s, err
}

func (x *Index) noteInvalid(e jetstream.KeyValueEntry, err error) {
	x.m.decodeErrors.Inc()
	if sec := time.Now().Unix(); sec != x.logSecond {
		x.logSecond, x.logCount = sec, 0
	}
	if x.logCount++; x.logCount <= logBurst {
		x.log.Warn("skipping an invalid session value", "key", e.Key(), "revision", e.Revision(), "err", err)
	}
}

// loadBatch is a run of initial entries decoded by one worker.
type loadBatch struct {
	es   []jetstream.KeyValueEntry
	ss   []*session.Session
	errs []error
	done chan struct{}
}

// decodeParallel reads the initial values up to the watcher's
// end-of-snapshot marker, decodes them on every core (JSON decoding is most
// of a cold load), and hands them to use in delivery order, on the calling
// goroutine: the order matters when one key appears twice.
func decodeParallel(ctx context.Context, updates <-chan jetstream.KeyValueEntry,
	use func(jetstream.KeyValueEntry, *session.Session, error)) error {
	const batchSize = 256
	workers := max(runtime.GOMAXPROCS(0), 1)
	work := make(chan *loadBatch, workers)
	ordered := make(chan *loadBatch, 2*workers)
	var readErr error
	go func() { // reader
		defer close(work)
		defer close(ordered)
		cur := &loadBatch{done: make(chan struct{})}
		flush := func() bool {
			if len(cur.es) == 0 {
				return true
			}
			select {
			case ordered <- cur:
			case <-ctx.Done():
				return false
			}
			work <- cur // workers drain work until it is closed
			cur = &loadBatch{done: make(chan struct{})}
			return true
		}
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
				readErr = ctx.Err()
				return
			case e, ok = <-updates:
			}
			switch {
			case !ok:
				readErr = errors.New("watcher closed during the initial load")
				return
			case e == nil:
				if !flush() {
					readErr = ctx.Err()
				}
				return
			}
			cur.es = append(cur.es, e)
			if len(cur.es) == batchSize && !flush() {
				readErr = ctx.Err()
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lb := range work {
				lb.ss = make([]*session.Session, len(lb.es))
				lb.errs = make([]error, len(lb.es))
				for i, e := range lb.es {
					if e.Operation() == jetstream.KeyValuePut {
						lb.ss[i], lb.errs[i] = session.Decode(e.Key(), e.Value())
					}
				}
				close(lb.done)
			}
		}()
	}
	for lb := range ordered {
		<-lb.done
		for i, e := range lb.es {
			use(e, lb.ss[i], lb.errs[i])
		}
	}
	wg.Wait() // ordered is closed only after the reader's last send to work
	return readErr
}

// DecodeSession is session.Decode, kept for this package's tests until they
// move with it.
func DecodeSession(key string, value []byte) (*session.Session, error) {
	return session.Decode(key, value)
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
