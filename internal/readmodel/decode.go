package readmodel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// loadBatch is a run of initial entries decoded by one worker.
type loadBatch[V any] struct {
	es   []jetstream.KeyValueEntry
	vs   []V
	errs []error
	done chan struct{}
}

// decodeParallel reads the initial values from next until it reports their
// end (the watcher's end-of-snapshot marker), decodes them on every core (decoding is most of a
// cold load), and hands them to use in delivery order, on the calling
// goroutine: the order matters when one key appears twice.
func decodeParallel[V any](ctx context.Context, next func() (e jetstream.KeyValueEntry, end bool, err error),
	decode func(string, []byte) (V, error), use func(jetstream.KeyValueEntry, V, error)) error {
	const batchSize = 256
	workers := max(runtime.GOMAXPROCS(0), 1)
	work := make(chan *loadBatch[V], workers)
	ordered := make(chan *loadBatch[V], 2*workers)
	var readErr error
	go func() { // reader
		defer close(work)
		defer close(ordered)
		cur := &loadBatch[V]{done: make(chan struct{})}
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
			cur = &loadBatch[V]{done: make(chan struct{})}
			return true
		}
		for {
			e, end, err := next()
			switch {
			case err != nil:
				readErr = err
				return
			case end:
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
				lb.vs = make([]V, len(lb.es))
				lb.errs = make([]error, len(lb.es))
				for i, e := range lb.es {
					if e.Operation() == jetstream.KeyValuePut {
						lb.vs[i], lb.errs[i] = decode(e.Key(), e.Value())
					}
				}
				close(lb.done)
			}
		}()
	}
	for lb := range ordered {
		<-lb.done
		for i, e := range lb.es {
			use(e, lb.vs[i], lb.errs[i])
		}
	}
	wg.Wait() // ordered is closed only after the reader's last send to work
	return readErr
}

// watchSource reads initial values from a watcher's updates: the end is its
// nil marker.
func watchSource(ctx context.Context, updates <-chan jetstream.KeyValueEntry) func() (jetstream.KeyValueEntry, bool, error) {
	return func() (jetstream.KeyValueEntry, bool, error) {
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case e, ok := <-updates:
			switch {
			case !ok:
				return nil, false, errors.New("watcher closed during the initial load")
			case e == nil:
				return nil, true, nil
			}
			return e, false, nil
		}
	}
}

// seedSource reads a seed's records, then the watcher's: the changes after
// the seed's sequence, which the watcher delivers from the next one.
func seedSource(ctx context.Context, bucket string, seed *Seed, updates <-chan jetstream.KeyValueEntry) func() (jetstream.KeyValueEntry, bool, error) {
	tail := watchSource(ctx, updates)
	seeding := true
	return func() (jetstream.KeyValueEntry, bool, error) {
		if seeding {
			k, v, err := seed.Next()
			if err == nil {
				return &seedEntry{bucket: bucket, key: k, value: v, seq: seed.Sequence, taken: seed.Taken}, false, nil
			}
			if !errors.Is(err, io.EOF) {
				return nil, false, fmt.Errorf("%w: %w", errSeed, err)
			}
			seeding = false
		}
		return tail()
	}
}

// errSeed wraps a failure to read a seed: the next load replays the
// stream instead.
var errSeed = errors.New("read the snapshot")

// seedEntry is a seed's record as a watch entry: a put as of the seed's
// sequence.
type seedEntry struct {
	bucket, key string
	value       []byte
	seq         uint64
	taken       time.Time
}

func (e *seedEntry) Bucket() string                  { return e.bucket }
func (e *seedEntry) Key() string                     { return e.key }
func (e *seedEntry) Value() []byte                   { return e.value }
func (e *seedEntry) Revision() uint64                { return e.seq }
func (e *seedEntry) Created() time.Time              { return e.taken }
func (e *seedEntry) Delta() uint64                   { return 0 }
func (e *seedEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }
