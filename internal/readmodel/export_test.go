package readmodel

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// Reconcile runs one reconcile for the benchmarks of the external test
// package.
func (f *Follower[V]) Reconcile(ctx context.Context, kv jetstream.KeyValue) error {
	return f.reconcile(ctx, kv)
}
