package radius

import (
	"container/list"
	"net/netip"
	"sync"
)

// stateCache remembers, for the most recently seen sessions, the newest
// event written: what makes "newest event wins" hold when a NAS's packets
// arrive out of order (a late Interim-Update must not bring back a stopped
// session, nor overwrite a newer one). It is bounded (least recently used
// out) and lives in memory: after an eviction or a restart a session's
// history starts again from the next event; docs/radius.md says what that
// allows.
type stateCache struct {
	mu  sync.Mutex
	max int
	m   map[string]*list.Element // of *stateEntry
	l   *list.List               // front: most recent
	seq uint64
}

type stateEntry struct {
	id      string
	nas     string
	order   order
	stopped bool
	org     string // of the last Start or Interim written
	// seq orders admissions: Accounting-On/Off spares the sessions
	// admitted after it arrived.
	seq uint64
}

func newStateCache(max int) *stateCache {
	return &stateCache{max: max, m: make(map[string]*list.Element), l: list.New()}
}

// admit decides whether ev (Start, Interim or Stop) is to be written, and
// if so records it as its session's newest event. An event without
// User-Name takes the organisation the session was written with, since
// only the realm could have said another. A Stop is always
// written (removing twice is harmless, and a Stop whose write failed must
// work when the NAS sends it again); Start and Interim are not when the
// session was stopped or a newer event was written.
func (c *stateCache) admit(ev *event) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	stop := ev.status == statusStop
	if el, ok := c.m[ev.id]; ok {
		e := el.Value.(*stateEntry)
		if !stop && (e.stopped || ev.order.olderThan(e.order)) {
			c.l.MoveToFront(el)
			return false
		}
		if ev.orgGuessed && e.org != "" {
			ev.sess.Org = e.org
		}
		c.seq++
		e.order, e.stopped, e.seq = ev.order, stop, c.seq
		if !stop {
			e.org = ev.sess.Org
		}
		c.l.MoveToFront(el)
		return true
	}
	c.seq++
	c.insert(&stateEntry{id: ev.id, nas: ev.nas, order: ev.order, stopped: stop, seq: c.seq, org: ev.sess.Org})
	return true
}

func (c *stateCache) insert(e *stateEntry) {
	c.m[e.id] = c.l.PushFront(e)
	for c.l.Len() > c.max {
		old := c.l.Back()
		c.l.Remove(old)
		delete(c.m, old.Value.(*stateEntry).id)
	}
}

// now is the admission sequence so far.
func (c *stateCache) now() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// admittedAfter reports whether id's newest event is a Start or Interim
// admitted after seq: a session begun after an Accounting-On arrived.
func (c *stateCache) admittedAfter(id string, seq uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[id]
	if !ok {
		return false
	}
	e := el.Value.(*stateEntry)
	return !e.stopped && e.seq > seq
}

// stopNAS marks ids (sessions of nas that an Accounting-On/Off removed)
// stopped, so that a late Interim of the NAS's previous life does not
// bring one back, and forgets nothing else.
func (c *stateCache) stopNAS(nas string, ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if el, ok := c.m[id]; ok {
			e := el.Value.(*stateEntry)
			e.stopped = true
			c.l.MoveToFront(el)
			continue
		}
		c.seq++
		c.insert(&stateEntry{id: id, nas: nas, order: order{rank: 2}, stopped: true, seq: c.seq})
	}
}

// len is the number of sessions remembered.
func (c *stateCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.l.Len()
}

// dupKey identifies a transmission: a retransmission repeats the source,
// the Identifier and (its content being the same) the Request
// Authenticator, which is a keyed hash of the whole packet.
type dupKey struct {
	src   netip.AddrPort
	ident byte
	auth  [16]byte
}

// dupCache remembers the answers of the most recent requests, so that a
// retransmission is answered again without a second write, and which
// requests are still being written, so that their retransmissions are not
// written twice either. Bounded, oldest out.
type dupCache struct {
	mu   sync.Mutex
	m    map[dupKey]*dupEntry
	ring []dupKey
	gens []uint64
	next int
	gen  uint64
}

type dupEntry struct {
	gen   uint64
	reply []byte // nil while the write is under way
	label string // status_type of the request
}

func newDupCache(size int) *dupCache {
	return &dupCache{m: make(map[dupKey]*dupEntry, size), ring: make([]dupKey, size), gens: make([]uint64, size)}
}

// dupState is what check found.
type dupState int

const (
	dupNew     dupState = iota // first sight: now recorded as pending
	dupPending                 // the first copy is still being written
	dupReplied                 // answered: the reply is returned
)

// check records k as pending when it is new.
func (c *dupCache) check(k dupKey, label string) (dupState, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		if e.reply == nil {
			return dupPending, nil
		}
		return dupReplied, e.reply
	}
	c.gen++
	// Evict the slot's previous key unless it has been re-recorded since.
	if old := c.ring[c.next]; c.gens[c.next] != 0 {
		if e, ok := c.m[old]; ok && e.gen == c.gens[c.next] {
			delete(c.m, old)
		}
	}
	c.ring[c.next], c.gens[c.next] = k, c.gen
	c.next = (c.next + 1) % len(c.ring)
	c.m[k] = &dupEntry{gen: c.gen, label: label}
	return dupNew, nil
}

// done records the reply of k.
func (c *dupCache) done(k dupKey, reply []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		e.reply = reply
	}
}

// fail forgets k: its retransmission is a new attempt.
func (c *dupCache) fail(k dupKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}
