package ipmapper

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
)

// retryUncertain reads back, before a command acts on the table and at
// every sweep, the keys whose write failed and that the reconcile could
// not read or undo then (the bus was away, or the calls ran out of time).
// Such a write may have landed all the same: over a NATS cluster the
// server this IP Mapper was connected to can forward a write to the
// stream's leader and die before the ack comes back. Every node then
// serves the session while the table lacks it, and a clean by organisation
// or revision, which selects from the table, would leave it in the bucket
// for good (TestNATSClusterNodeLossDuringWrites in internal/app found
// that: a deleted organisation's sessions stayed on every node). Called
// with mu held. Without a connection it does nothing (every read would
// fail); a key that stays uncertain is read again before the next command
// and at the next sweep.
func (s *Service) retryUncertain() {
	if s.store == nil || len(s.store.uncertain) == 0 || !s.cfg.Conn.IsConnected() {
		return
	}
	s.reconcile(slices.Sorted(maps.Keys(s.store.uncertain)))
}

// markUncertain records keys the reconcile could not read. Called with
// Service.mu held.
func (st *store) markUncertain(ids []string) {
	if st.uncertain == nil {
		st.uncertain = make(map[string]struct{}, len(ids))
	}
	for _, id := range ids {
		st.uncertain[id] = struct{}{}
	}
}

// readBackWorkers bounds the concurrent reads of readBack: thousands of
// keys of a failed batch cost a few round trips of waiting, not one each,
// while mu is held.
const readBackWorkers = 16

// readBack reads each id's entry from the bucket (entries[i] with errs[i]
// nil, or errs[i] jetstream.ErrKeyNotFound, or the read's failure); ids
// not reached before ctx ends get ctx's error.
func (s *Service) readBack(ctx context.Context, ids []string) ([]jetstream.KeyValueEntry, []error) {
	entries := make([]jetstream.KeyValueEntry, len(ids))
	errs := make([]error, len(ids))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(ids), readBackWorkers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ids) {
					return
				}
				if err := ctx.Err(); err != nil {
					errs[i] = err
					continue
				}
				entries[i], errs[i] = s.store.kv.Get(ctx, ids[i])
			}
		})
	}
	wg.Wait()
	return entries, errs
}
