package ipmapper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/svc-pf/svc-pf/internal/sessionindex"
	"github.com/svc-pf/svc-pf/internal/sessionsnap"
)

// defaultSnapshotInterval is Config.SnapshotInterval's default: a node's
// cold start replays at most this much of the stream after the snapshot.
const defaultSnapshotInterval = 10 * time.Minute

// snapshotGCEvery is how many records a snapshot writes between forced
// collections (see WriteSnapshot): about 50 MB of garbage, and at 10M
// sessions 100 collections of a heap the collector marks in tens of
// milliseconds (the table's chunks hold no pointers).
const snapshotGCEvery = 100_000

// snapshotTick writes a snapshot, logging the outcome.
func (s *Service) snapshotTick(ctx context.Context) {
	if _, err := s.WriteSnapshot(ctx); err != nil {
		s.metrics.snapshotErrors.Inc()
		s.log.Warn("write the sessions snapshot", "err", err)
	}
}

// WriteSnapshot writes the table into the snapshot object nodes start
// from (sessionsnap), with the bucket's stream sequence it covers, and
// returns that sequence. The table is taken together with the stream's
// last sequence under mu: every write holds mu until it is acknowledged
// and committed to the table, so no write is in flight then, and the table
// is the bucket as of that sequence. It refuses while keys are uncertain
// (a write whose outcome the table does not know). The records are the
// values as the bucket stores them (json.Marshal of the session, which
// the table returns unchanged), in an order that keeps, for every prefix
// several sessions hold, the order in which they were written.
func (s *Service) WriteSnapshot(ctx context.Context) (uint64, error) {
	began := time.Now()
	s.mu.Lock()
	if err := s.fence(); err != nil {
		s.mu.Unlock()
		return 0, err
	}
	st := s.store
	if n := len(st.uncertain); n > 0 {
		s.mu.Unlock()
		return 0, fmt.Errorf("%d keys of the bucket are uncertain; the next snapshot is taken once they are read back", n)
	}
	ix := s.idx.Load()
	ictx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	stream, err := st.js.Stream(ictx, st.stream)
	var seq uint64
	var created time.Time
	if err == nil {
		info := stream.CachedInfo()
		seq, created = info.State.LastSeq, info.Created
	}
	cancel()
	s.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("bucket stream: %w", err)
	}
	validFor := s.cfg.PurgeDeletesAfter
	if validFor < 0 {
		validFor = 100 * 365 * 24 * time.Hour // markers are never purged
	}
	meta := sessionsnap.Meta{Sequence: seq, StreamCreated: created, Taken: time.Now(), ValidFor: validFor}
	var n uint64
	info, err := sessionsnap.Put(ctx, st.js, s.cfg.Bucket, s.cfg.Replicas, meta, func(w *sessionsnap.Writer) error {
		var werr error
		// One buffer for every value: Encode writes what json.Marshal
		// returns, and a newline.
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		ordered := ix.InOrder(func(e sessionindex.Entry) bool {
			buf.Reset()
			err := enc.Encode(e.Session())
			if err == nil {
				err = w.Add(e.ID(), bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
			}
			if w.Count()%snapshotGCEvery == 0 {
				// The table is most of the heap, close to GOMEMLIMIT at
				// millions of sessions, and each record leaves a few
				// hundred bytes of garbage: at full speed the collector,
				// capped at half the CPU, fell behind and the process
				// grew 280 MiB past the limit (10M sessions: peak RSS
				// 2 514 MiB). A collection every snapshotGCEvery records
				// bounds the garbage and paces the writer.
				runtime.GC()
			}
			werr = err
			return err == nil
		})
		if !ordered {
			return errors.New("the holders of shared prefixes cannot be ordered")
		}
		n = w.Count()
		return werr
	})
	if err != nil {
		return 0, err
	}
	s.metrics.snapshotSequence.Set(float64(seq))
	s.log.Info("sessions snapshot written", "sessions", n, "sequence", seq, "bytes", info.Size,
		"took", time.Since(began).Round(time.Millisecond))
	return seq, nil
}
