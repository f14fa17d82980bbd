package ipmapper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/session"
)

// store persists sessions in the KV bucket. Writes go straight to the
// bucket's subjects as asynchronous JetStream publishes so that a batch of
// thousands costs one round trip of waiting, not thousands; the KV API's Put
// and Delete are synchronous per key.
type store struct {
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	bucket  string
	subject string // "$KV.<bucket>."
	stream  string // "KV_<bucket>": the stream behind the bucket
	timeout time.Duration
	log     *slog.Logger
	// fence is checked before every write: nil while this instance holds
	// the bucket's lock, an error otherwise (see Service.fence).
	fence func() error

	// uncertain are keys whose write failed and whose value the reconcile
	// could not read back (see retryUncertain); guarded by Service.mu.
	uncertain map[string]struct{}

	// failing is set while the bucket fails writes (see noteWrites); nil
	// when the last write went through.
	failing atomic.Pointer[writeFailure]
}

// writeFailure is a run of failed writes: the latest error and when the
// run began.
type writeFailure struct {
	err   error
	since time.Time
}

// The KV wire protocol: a delete is an empty message with this header.
// Deletes rather than purges: with one value of history per key both keep a
// single marker per removed key, and watchers see either as a removal.
const (
	kvOperationHeader = "KV-Operation"
	kvOperationDelete = "DEL"
)

// maxPendingAcks bounds in-flight asynchronous publishes; a larger batch
// waits for acks to come back before publishing more.
const maxPendingAcks = 8192

func openStore(ctx context.Context, nc *nats.Conn, bucket string, replicas int, timeout time.Duration, log *slog.Logger, fence func() error) (*store, error) {
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxPendingAcks),
		// Without a timeout an ack lost in a disconnect would never resolve.
		jetstream.WithPublishAsyncTimeout(timeout),
	)
	if err != nil {
		return nil, err
	}
	kv, err := natsbus.OpenKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "svc-pf sessions, written by the IP Mapper",
		History:     1,
		Replicas:    replicas,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("bind KV bucket %q: %w", bucket, err)
	}
	return &store{
		js:      js,
		kv:      kv,
		bucket:  bucket,
		subject: "$KV." + bucket + ".",
		stream:  "KV_" + bucket,
		timeout: timeout,
		log:     log,
		fence:   fence,
	}, nil
}

// write is one KV operation: a put of Value, or a delete when Value is nil.
type write struct {
	ID    string
	Value []byte
}

// apply publishes the writes and waits for every ack. It returns, per write,
// nil when the bucket acknowledged it, or the error. The same connection
// carries them in order, so two writes of one key land in order.
func (st *store) apply(ctx context.Context, writes []write) []error {
	errs := make([]error, len(writes))
	futures := make([]jetstream.PubAckFuture, len(writes))
	for i, w := range writes {
		// Checked per message, not per batch: a lease that runs out in the
		// middle of a large batch stops it there.
		if err := st.fence(); err != nil {
			errs[i] = err
			continue
		}
		msg := &nats.Msg{Subject: st.subject + w.ID, Data: w.Value}
		if w.Value == nil {
			msg.Header = nats.Header{kvOperationHeader: []string{kvOperationDelete}}
		}
		f, err := st.js.PublishMsgAsync(msg, jetstream.WithStallWait(st.timeout))
		if err != nil {
			errs[i] = st.unreachable(err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = st.unreachable(err)
		case <-ctx.Done():
			errs[i] = ctx.Err()
		}
	}
	st.noteWrites(errs)
	return errs
}

// unreachable names the NATS servers in a write's error when it failed for
// want of a connection.
func (st *store) unreachable(err error) error {
	return natsbus.Unreachable(st.js.Conn(), err, "publish writes to bucket "+st.bucket)
}

// deleteKeys deletes ids in the bucket (apply's delete writes), one error
// per id.
func (st *store) deleteKeys(ctx context.Context, ids []string) []error {
	writes := make([]write, len(ids))
	for i, id := range ids {
		writes[i] = write{ID: id}
	}
	return st.apply(ctx, writes)
}

// noteWrites records whether the bucket takes writes, for /health: an
// operator must see that the IP Mapper answers but cannot store (a full
// disk, JetStream down) before the orgmanager's deploys pile up. A failure
// of the store marks the bucket failing; any acknowledged write clears it.
// Errors about one message (too large for the bucket or for NATS) say
// nothing of the store and are left out, so one bad session does not turn
// the service red.
func (st *store) noteWrites(errs []error) {
	var failed error
	ok := false
	for _, err := range errs {
		switch {
		case err == nil:
			ok = true
		case errors.Is(err, errNotActive):
			// Not a failure of the store: this instance may not write.
		case failed == nil && !perMessageError(err):
			failed = err
		}
	}
	switch {
	case failed != nil:
		since := time.Now()
		if prev := st.failing.Load(); prev != nil {
			since = prev.since
		}
		st.failing.Store(&writeFailure{err: failed, since: since})
	case ok:
		if st.failing.Swap(nil) != nil {
			st.log.Info("KV writes succeed again")
		}
	}
}

// perMessageError reports whether err is about the one message written
// rather than about the bucket.
func perMessageError(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return true
	}
	return errors.Is(err, nats.ErrMaxPayload)
}

// load reads every stored session. Entries that do not decode, whose id
// does not match their key, or that session.Validate refuses are logged and
// skipped, never deleted: the bucket keeps them for an operator to inspect.
// Every node's subscriber index skips exactly the same values, so the table
// holds what the nodes hold.
func (st *store) load(ctx context.Context, put func(*session.Session)) (loaded, skipped int, err error) {
	w, err := st.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return 0, 0, fmt.Errorf("watch KV bucket: %w", err)
	}
	defer func() {
		if stopErr := w.Stop(); stopErr != nil && err == nil {
			st.log.Debug("stop load watcher", "err", stopErr)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return loaded, skipped, fmt.Errorf("load sessions: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return loaded, skipped, errors.New("load sessions: watcher closed")
			}
			if e == nil {
				// The watcher's marker: every stored value has been delivered.
				return loaded, skipped, nil
			}
			s, err := session.Decode(e.Key(), e.Value())
			if err != nil {
				st.log.Warn("skipping invalid session in KV", "key", e.Key(), "err", err)
				skipped++
				continue
			}
			put(s)
			loaded++
		}
	}
}

// holds reports whether the bucket has a value under id that the caller
// may remove (see Service.strayKeys): a session of producer and, with org
// set, of org, by the rule every node reads the bucket with; without org,
// also a value that is no session (no node serves it, no producer owns
// it). With org set, a value no node serves is not org's session.
func (st *store) holds(ctx context.Context, id, org, producer string) (bool, error) {
	e, err := st.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s, err := session.Decode(id, e.Value())
	if err != nil && org == "" {
		// Not a session: no node serves it, and no producer owns it.
		return true, nil
	}
	if err != nil || org != "" && s.Org != org || s.Producer != producer {
		st.log.Warn("clean-sessions: leaving a value the table does not hold and that is not a session of the org and producer named",
			"key", id, "org", org, "producer", producer)
		return false, nil
	}
	return true, nil
}

// marker is a delete marker in the bucket: its key, and its stream sequence
// (what nats.go calls the KV entry's revision).
type marker struct {
	key string
	seq uint64
}

// deleteMarkers lists the keys whose latest entry is a delete (or purge)
// marker created before cutoff. It reads headers only.
func (st *store) deleteMarkers(ctx context.Context, cutoff time.Time) ([]marker, error) {
	w, err := st.kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("list delete markers: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []marker
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("list delete markers: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("list delete markers: watcher closed")
			}
			if e == nil {
				return out, nil
			}
			if op := e.Operation(); (op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge) && e.Created().Before(cutoff) {
				out = append(out, marker{key: e.Key(), seq: e.Revision()})
			}
		}
	}
}

// purgeMarkers removes each marker from the stream, with anything older
// under its key, and returns how many it removed.
//
// Not KeyValue.PurgeDeletes: that reads every value of the bucket to find
// the markers, and then purges each marker's key whole, so a put of the key
// that lands between its listing and its purge is lost from the bucket
// (while every node, which saw the put, keeps it). Here each purge stops
// below the sequence after the marker (WithPurgeSequence is exclusive), so
// the server itself keeps anything written after it.
func (st *store) purgeMarkers(ctx context.Context, markers []marker) (int, error) {
	if len(markers) == 0 {
		return 0, nil
	}
	stream, err := st.js.Stream(ctx, st.stream)
	if err != nil {
		return 0, fmt.Errorf("purge delete markers: %w", err)
	}
	for i, m := range markers {
		if err := st.fence(); err != nil {
			return i, err
		}
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(st.subject+m.key), jetstream.WithPurgeSequence(m.seq+1)); err != nil {
			return i, fmt.Errorf("purge delete marker of %s: %w", m.key, err)
		}
	}
	return len(markers), nil
}
