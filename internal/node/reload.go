package node

import (
	"context"
	"sync"

	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

// rpzRun is the running RPZ Set's stop, so that a swap can end its
// polling and start the next Set's.
type rpzRun struct {
	mu     sync.Mutex
	cancel context.CancelFunc // nil before Run
}

// PrepareRPZ builds the Set for a new `rpz:` list (a reload), loading
// every zone's file, and returns the commit that swaps it in: decisions
// from then on see the new zones (Generation changes, so the resolver's
// packet cache empties), the old Set stops polling and the new one
// starts. An invalid list is an error and changes nothing; the node
// keeps its zones until commit.
func (n *Node) PrepareRPZ(zones []rpz.ZoneConfig) (commit func(), err error) {
	old := n.rpz.Load()
	next, err := old.Reconfigure(zones)
	if err != nil {
		return nil, err
	}
	return func() {
		n.rpzRun.mu.Lock()
		defer n.rpzRun.mu.Unlock()
		n.rpz.Store(next)
		if n.rpzRun.cancel != nil {
			n.rpzRun.cancel() // runRPZ then runs next
		}
		old.Retire(next)
	}, nil
}

// runRPZ runs the current RPZ Set until ctx ends, and the Set a commit
// of PrepareRPZ swaps in after it.
func (n *Node) runRPZ(ctx context.Context) error {
	for {
		n.rpzRun.mu.Lock()
		s := n.rpz.Load()
		sctx, cancel := context.WithCancel(ctx)
		n.rpzRun.cancel = cancel
		n.rpzRun.mu.Unlock()
		err := s.Run(sctx)
		if err == nil {
			<-sctx.Done() // a Set without zones returns at once
		}
		cancel()
		if err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// PrepareFeeds validates a new `feeds:` list (a reload) and returns the
// commit that puts it in force: unchanged feeds keep their loaded
// versions, new or changed ones load as at start (Ready names them until
// they have), removed ones stop. An invalid list is an error and changes
// nothing.
func (n *Node) PrepareFeeds(list []feeds.FeedConfig) (commit func(), err error) {
	return n.feeds.Reconfigure(list)
}
