package luapool

import (
	"context"
	"sync/atomic"
	"time"
)

// callContext is the context a worker's calls run under, one per worker and
// reused from call to call: a context.WithTimeout per call cost a timer, a
// cancel context registered with the caller's (its children map) and two
// Done channels, ≈ 0.5–0.9 KB of the bytes a simulate allocates. The
// goroutine waiting for the call's answer (Pool.run) stops it — when the
// caller's context ends or the call's time is up — which is what
// WithTimeout's propagation did. Values and the deadline are the caller's
// (the deadline bounded by the call timeout). It is valid for the call only:
// a built-in must not keep it (the next call reuses it).
type callContext struct {
	parent   context.Context // the caller's; set before the call is handed over
	deadline time.Time
	done     atomic.Pointer[chan struct{}] // closed when stopped; a fresh one after that
	err      atomic.Pointer[error]         // set before done is closed
	stopped  bool                          // done is closed (owned by Pool.run)
}

func newCallContext() *callContext {
	c := &callContext{parent: context.Background()}
	ch := make(chan struct{})
	c.done.Store(&ch)
	return c
}

// start readies c for a call under parent, with the call's own deadline.
// Only the goroutine that runs the call (Pool.run) calls start and stop,
// and never while the worker runs a call with c.
func (c *callContext) start(parent context.Context, deadline time.Time) {
	if c.stopped { // the previous call was stopped: a new channel, no error
		ch := make(chan struct{})
		c.done.Store(&ch)
		c.err.Store(nil)
		c.stopped = false
	}
	c.parent = parent
	if d, ok := parent.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.deadline = deadline
}

// stop ends the call: Err returns err from now on and Done is closed.
func (c *callContext) stop(err error) {
	if c.stopped {
		return
	}
	c.err.Store(&err)
	close(*c.done.Load())
	c.stopped = true
}

func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *callContext) Done() <-chan struct{}       { return *c.done.Load() }
func (c *callContext) Value(key any) any           { return c.parent.Value(key) }

func (c *callContext) Err() error {
	if e := c.err.Load(); e != nil {
		return *e
	}
	return nil
}
