package ipmapper

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/session"
)

// reconcile re-reads the keys whose write failed and makes the table match
// the bucket for them. A write can fail from here yet be stored (the ack
// lost in a disconnect, or late past the timeout), and a table that drifted
// from the bucket would merge and clean against a state no node has. The
// reads run in parallel within one WriteTimeout (readBack); the keys it
// could not read are kept uncertain and read again before the next command
// (see retryUncertain). Called with mu held.
func (s *Service) reconcile(ids []string) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.WriteTimeout)
	defer cancel()
	entries, errs := s.readBack(ctx, ids)
	ix := s.idx.Load()
	var upserts []*session.Session
	var deletes, undo []string
	unread := 0
	var firstErr error
	for i, id := range ids {
		e, err := entries[i], errs[i]
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			// Kept, and read again before the next command acts on the
			// table (retryUncertain).
			s.store.markUncertain(ids[i : i+1])
			unread++
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		delete(s.store.uncertain, id)
		if err != nil { // not found
			if _, ok := ix.Get(id); ok {
				deletes = append(deletes, id)
			} else {
				undo = append(undo, id)
			}
			continue
		}
		stored, err := session.Decode(id, e.Value())
		if err != nil {
			// Every node drops a key whose value it cannot use as a
			// session; so does the table.
			if _, ok := ix.Get(id); ok {
				deletes = append(deletes, id)
			}
			continue
		}
		if cur, ok := ix.Get(id); !ok || !sameContent(cur.Session(), stored) || !cur.UpdatedAt().Equal(stored.UpdatedAt) {
			upserts = append(upserts, stored)
		}
	}
	if unread > 0 {
		s.log.Warn("cannot re-read sessions after failed writes; read again before the next command", "ids", unread, "err", firstErr)
	}
	if len(upserts)+len(deletes) > 0 {
		s.log.Warn("table reconciled with the bucket after failed writes that did land", "updated", len(upserts), "removed", len(deletes))
		s.commit(upserts, deletes)
	}
	s.undoWrites(ctx, undo)
}

// undoWrites deletes, in the bucket, keys the table does not hold whose
// write failed and that a read then did not find. "Not found" right after
// a failure is no proof that the write will never land: over a NATS
// cluster a write the dying server had handed to the stream's leader can
// be committed by the next leader after the read, and a read served by a
// replica that lags can miss one already committed. Such a write, landing
// unseen, would be a session every node serves and no clean selects from
// the table (TestNATSClusterNodeLossDuringWrites: a deleted organisation's
// session stayed on every node). A delete goes through the stream's
// leader after whatever it holds of the failed write, so the bucket ends
// as the table says. The caller was told the write failed and retries it.
// A delete that fails keeps the key uncertain: read, and undone if still
// absent, before the next command and at the next sweep.
func (s *Service) undoWrites(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	var failed []string
	for i, err := range s.store.deleteKeys(ctx, ids) {
		if err != nil {
			s.metrics.kvWriteErrors.Inc()
			failed = append(failed, ids[i])
		}
	}
	if len(failed) > 0 {
		s.store.markUncertain(failed)
		s.log.Warn("cannot undo failed writes the bucket does not show; tried again later", "ids", len(failed))
	}
}

// every runs fn every interval until ctx (the active term) ends.
func (s *Service) every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

func (s *Service) sweepTick() {
	s.mu.Lock()
	s.retryUncertain()
	s.mu.Unlock()
	if n, err := s.sweep(); err != nil {
		s.log.Warn("sweep expired sessions", "removed", n, "err", err)
	} else if n > 0 {
		s.log.Debug("swept expired sessions", "removed", n)
	}
}

// sweep removes every session whose expiry has passed. A failed delete is
// retried on the next sweep.
func (s *Service) sweep() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var ids []string
	for id, exp := range s.expiring {
		if !exp.After(now) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	slices.Sort(ids)
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.WriteTimeout)
	defer cancel()
	removed, err := s.remove(ctx, ids)
	s.metrics.removedExpired.Add(float64(len(removed)))
	return len(removed), err
}

// purgeTimeout bounds one purge run: listing the bucket's keys (headers
// only) and one purge request per old marker.
const purgeTimeout = 5 * time.Minute

func (s *Service) purgeTick() {
	// Markers carry the server's timestamp, so their age is measured on
	// the wall clock, not on Config.Clock.
	n, err := s.purgeDeletes(time.Now().Add(-s.cfg.PurgeDeletesAfter))
	switch {
	case err != nil:
		s.log.Warn("purge old delete markers", "purged", n, "err", err)
	case n > 0:
		s.log.Info("purged old delete markers", "purged", n)
	}
}

// purgeDeletes removes from the bucket the delete markers created before
// cutoff. It does not take mu: each purge is bounded by its marker's
// sequence (see store.purgeMarkers), so a write of the same key made
// meanwhile is never lost, and the table, which holds no removed ids, is
// not involved.
func (s *Service) purgeDeletes(cutoff time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(s.ctx, purgeTimeout)
	defer cancel()
	markers, err := s.store.deleteMarkers(ctx, cutoff)
	if err != nil {
		return 0, err
	}
	n, err := s.store.purgeMarkers(ctx, markers)
	s.metrics.markersPurged.Add(float64(n))
	return n, err
}
