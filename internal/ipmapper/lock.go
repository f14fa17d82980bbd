package ipmapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/natsbus"
)

// ErrConflict marks a start the IP Mapper refuses because of how it is
// deployed, not because of a passing failure: retrying will not help (a lock
// bucket whose TTL differs from this instance's, another IP Mapper serving
// the same bucket without sharing its lock). The app stops on it.
var ErrConflict = errors.New("ipmapper: conflict")

// Holder is the value of a lock key: who holds the lock. Token is random
// per Service, so that an instance recognises its own lock after a NATS
// restart and no two instances can mistake each other's lock for theirs,
// even with the same configured instance name.
type Holder struct {
	Instance string    `json:"instance"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Bucket   string    `json:"bucket"`
	Token    string    `json:"token"`
	Since    time.Time `json:"since"`
}

// lease is the active/passive lock of one sessions bucket: the key named
// after the bucket in the lock bucket, whose bucket-wide TTL (MaxAge)
// expires it unless its holder rewrites it. Every refresh is a new
// revision, so the TTL counts from the last refresh: a holder that dies
// loses the lock TTL after its last refresh, with nobody to release it.
//
// Validity is measured on this process's monotonic clock from the moment
// the acquiring or refreshing write was sent, which precedes the moment the
// server stored it (from which the server counts the TTL); with the margin
// taken off, this instance stops writing before any other can hold the key.
type lease struct {
	kv    jetstream.KeyValue
	key   string
	ttl   time.Duration
	me    Holder
	base  time.Time // monotonic origin of validUntil
	value []byte

	rev        atomic.Uint64 // revision of our key while held
	validUntil atomic.Int64  // since base; 0 when not held
}

// leaseMargin is the part of the TTL a holder gives up: it stops writing
// at 5/6 of the TTL after its last successful refresh, before the server
// could have expired the key for a standby to take.
func leaseMargin(ttl time.Duration) time.Duration { return ttl / 6 }

// openLockBucket binds (or creates) the lock bucket. An existing bucket's
// TTL must equal ttl: the TTL is the bucket's, shared by every IP Mapper
// that uses it, and a holder that believes in a longer TTL than the
// bucket's would keep writing after a standby took over.
func openLockBucket(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration, replicas int) (jetstream.KeyValue, error) {
	kv, err := natsbus.OpenKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "svc-pf IP Mapper active/passive locks, one key per sessions bucket",
		History:     1,
		TTL:         ttl,
		Replicas:    replicas,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("bind lock bucket %q: %w", bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock bucket %q status: %w", bucket, err)
	}
	if st.TTL() != ttl {
		return nil, fmt.Errorf("%w: lock bucket %q expires locks after %s but this IP Mapper is configured with lock TTL %s: every IP Mapper sharing a lock bucket must use the same TTL (change the setting, or delete the bucket while no IP Mapper runs)",
			ErrConflict, bucket, st.TTL(), ttl)
	}
	return kv, nil
}

func newLease(kv jetstream.KeyValue, key string, ttl time.Duration, me Holder) (*lease, error) {
	value, err := json.Marshal(me)
	if err != nil {
		return nil, err
	}
	return &lease{kv: kv, key: key, ttl: ttl, me: me, base: time.Now(), value: value}, nil
}

// valid reports whether this instance holds the lock now and may write.
func (l *lease) valid() bool {
	until := l.validUntil.Load()
	return until != 0 && int64(time.Since(l.base)) < until
}

// remaining is how long the lease stays valid without a refresh.
func (l *lease) remaining() time.Duration {
	until := l.validUntil.Load()
	if until == 0 {
		return 0
	}
	return time.Duration(until - int64(time.Since(l.base)))
}

func (l *lease) held(sent time.Duration, rev uint64) {
	l.rev.Store(rev)
	l.validUntil.Store(int64(sent + l.ttl - leaseMargin(l.ttl)))
}

// drop forgets the lock at once: writes stop before anything else happens.
func (l *lease) drop() { l.validUntil.Store(0) }

// acquire tries once to take the lock. It reports whether it holds it and,
// when another instance does, who (as far as its value says).
func (l *lease) acquire(ctx context.Context) (bool, *Holder, error) {
	sent := time.Since(l.base)
	rev, err := l.kv.Create(ctx, l.key, l.value)
	if err == nil {
		l.held(sent, rev)
		return true, nil, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil, fmt.Errorf("acquire lock %s: %w", l.key, err)
	}
	e, err := l.kv.Get(ctx, l.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil, nil // expired in between; the next attempt takes it
	}
	if err != nil {
		return false, nil, fmt.Errorf("read lock %s: %w", l.key, err)
	}
	var h Holder
	if json.Unmarshal(e.Value(), &h) != nil {
		h = Holder{Instance: fmt.Sprintf("unreadable lock value %q", truncateBytes(e.Value(), 80))}
	}
	if h.Token == l.me.Token {
		// Our own key, from before a NATS restart or a refresh whose reply
		// was lost: take it back by its revision (which fails if anyone
		// else wrote it since) instead of waiting for it to expire.
		if l.reclaim(ctx) {
			return true, nil, nil
		}
		return false, &h, nil
	}
	return false, &h, nil
}

// errLockTaken: the key no longer has our revision, so someone else (or an
// operator forcing a fail-over by deleting it) changed it.
var errLockTaken = errors.New("the lock key was changed by someone else")

// refresh rewrites the key at our revision, extending the lease. A lost
// race (the key changed) drops the lease at once; any other failure leaves
// it to run out.
func (l *lease) refresh(ctx context.Context) error {
	sent := time.Since(l.base)
	rev, err := l.kv.Update(ctx, l.key, l.value, l.rev.Load())
	if err == nil {
		l.held(sent, rev)
		return nil
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		// Our own earlier refresh may have landed with its reply lost
		// (a timeout): the key then holds our token at a newer revision,
		// and nobody else can have written it. Take it back at that
		// revision; anything else means the lock is gone.
		if l.reclaim(ctx) {
			return nil
		}
		l.drop()
		return errLockTaken
	}
	return err
}

// reclaim rewrites the key at its current revision if it holds our token.
func (l *lease) reclaim(ctx context.Context) bool {
	e, err := l.kv.Get(ctx, l.key)
	if err != nil {
		return false
	}
	var h Holder
	if json.Unmarshal(e.Value(), &h) != nil || h.Token != l.me.Token {
		return false
	}
	sent := time.Since(l.base)
	rev, err := l.kv.Update(ctx, l.key, l.value, e.Revision())
	if err != nil {
		return false
	}
	l.held(sent, rev)
	return true
}

// release deletes the key at our revision, so that a standby takes over at
// its next attempt rather than after the TTL. A key someone else wrote
// meanwhile is left alone.
func (l *lease) release(ctx context.Context) error {
	rev := l.rev.Load()
	l.drop()
	if rev == 0 {
		return nil
	}
	l.rev.Store(0)
	return l.kv.Delete(ctx, l.key, jetstream.LastRevision(rev))
}

func truncateBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
