package natsbus

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KV is a JetStream key-value bucket for a writer that must start while
// NATS is away (the orgmanager's deploy): the bucket is opened, and
// created when missing, on first use and again after a failed call, so a
// write made during an outage fails (and is retried by its caller) instead
// of failing the start.
//
// While NATS is not connected every call fails at once with "NATS
// unreachable: not connected to NATS at <servers> (<state>)" (NotConnected)
// instead of nats.go's symptom of the moment.
type KV struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg jetstream.KeyValueConfig

	mu sync.Mutex
	kv jetstream.KeyValue
}

// NewKV returns the bucket cfg.Bucket (created with cfg when missing) over nc.
func NewKV(nc *nats.Conn, cfg jetstream.KeyValueConfig) (*KV, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("natsbus: KV needs a bucket name")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &KV{nc: nc, js: js, cfg: cfg}, nil
}

// OpenKV binds the bucket cfg.Bucket, creating it with cfg when it is
// missing. Several processes may race to create it (IP Mappers, a
// watching node, the orgmanager): one that finds it created meanwhile
// binds the winner's. An existing bucket is bound as it is, whatever its
// configuration; a caller that depends on a setting checks its Status.
func OpenKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	return kv, err
}

// bucket is the open bucket, opened (or created) now if it is not; an
// error when NATS is not connected.
func (k *KV) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	if err := NotConnected(k.nc); err != nil {
		return nil, fmt.Errorf("NATS unreachable: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kv != nil {
		return k.kv, nil
	}
	kv, err := OpenKV(ctx, k.js, k.cfg)
	if err != nil {
		return nil, fmt.Errorf("open KV bucket %s: %w", k.cfg.Bucket, err)
	}
	k.kv = kv
	return kv, nil
}

// forget drops the open bucket after a failure, so the next call opens it
// again (the bucket may have been deleted and created anew).
func (k *KV) forget() {
	k.mu.Lock()
	k.kv = nil
	k.mu.Unlock()
}

// Put stores value under key.
func (k *KV) Put(ctx context.Context, key string, value []byte) error {
	kv, err := k.bucket(ctx)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, key, value); err != nil {
		k.forget()
		return fmt.Errorf("put %s/%s: %w", k.cfg.Bucket, key, err)
	}
	return nil
}

// Delete removes key (a delete marker; deleting an absent key is fine).
func (k *KV) Delete(ctx context.Context, key string) error {
	kv, err := k.bucket(ctx)
	if err != nil {
		return err
	}
	if err := kv.Delete(ctx, key); err != nil {
		k.forget()
		return fmt.Errorf("delete %s/%s: %w", k.cfg.Bucket, key, err)
	}
	return nil
}

// Keys lists the live keys matching the subject filter. It fails rather
// than answer a partial list: a caller deletes what it does not find.
func (k *KV) Keys(ctx context.Context, filter string) ([]string, error) {
	kv, err := k.bucket(ctx)
	if err != nil {
		return nil, err
	}
	kl, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		k.forget()
		return nil, fmt.Errorf("list %s keys %s: %w", k.cfg.Bucket, filter, err)
	}
	defer func() { _ = kl.Stop() }()
	var keys []string
	for key := range kl.Keys() {
		keys = append(keys, key)
	}
	// The lister closes its channel on the end of the list and on ctx's end
	// alike: only the first is a complete list.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %s keys %s: %w", k.cfg.Bucket, filter, err)
	}
	return keys, nil
}
