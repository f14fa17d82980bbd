package readmodel

import (
	"context"
	"errors"
	"runtime"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// loadBatch is a run of initial entries decoded by one worker.
type loadBatch[V any] struct {
	es   []jetstream.KeyValueEntry
	vs   []V
	errs []error
	done chan struct{}
}

// decodeParallel reads the initial values up to the watcher's
// end-of-snapshot marker, decodes them on every core (decoding is most of a
// cold load), and hands them to use in delivery order, on the calling
// goroutine: the order matters when one key appears twice.
func decodeParallel[V any](ctx context.Context, updates <-chan jetstream.KeyValueEntry,
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
