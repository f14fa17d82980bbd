package ipmapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/session"
)

// store persists sessions in the KV bucket. Writes go straight to the
// bucket's subjects as asynchronous JetStream publishes so that a batch of
// thousands costs one round trip of waiting, not thousands; the KV API's Put
// and Delete are synchronous per key.
type store struct {
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	subject string // "$KV.<bucket>."
	timeout time.Duration
	log     *slog.Logger
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

func openStore(ctx context.Context, nc *nats.Conn, bucket string, replicas int, timeout time.Duration, log *slog.Logger) (*store, error) {
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxPendingAcks),
		// Without a timeout an ack lost in a disconnect would never resolve.
		jetstream.WithPublishAsyncTimeout(timeout),
	)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      bucket,
			Description: "svc-pf sessions, written by the IP Mapper",
			History:     1,
			Replicas:    replicas,
			Storage:     jetstream.FileStorage,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			// Created by someone else (a watching node) in between.
			kv, err = js.KeyValue(ctx, bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bind KV bucket %q: %w", bucket, err)
	}
	return &store{
		js:      js,
		kv:      kv,
		subject: "$KV." + bucket + ".",
		timeout: timeout,
		log:     log,
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
		msg := &nats.Msg{Subject: st.subject + w.ID, Data: w.Value}
		if w.Value == nil {
			msg.Header = nats.Header{kvOperationHeader: []string{kvOperationDelete}}
		}
		f, err := st.js.PublishMsgAsync(msg, jetstream.WithStallWait(st.timeout))
		if err != nil {
			errs[i] = err
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
			errs[i] = err
		case <-ctx.Done():
			errs[i] = ctx.Err()
		}
	}
	return errs
}

// load reads every stored session. Entries that do not decode, or whose id
// does not match their key, are logged and skipped, never deleted: the
// bucket keeps them for an operator to inspect.
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
			var s session.Session
			if err := json.Unmarshal(e.Value(), &s); err != nil {
				st.log.Warn("skipping undecodable session in KV", "key", e.Key(), "err", err)
				skipped++
				continue
			}
			if s.ID != e.Key() {
				st.log.Warn("skipping session whose id differs from its KV key", "key", e.Key(), "id", s.ID)
				skipped++
				continue
			}
			put(&s)
			loaded++
		}
	}
}
