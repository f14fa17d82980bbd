package access

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// FailureLimit slows down clients whose tokens fail. A client is an IPv4
// address, or an IPv6 /64 (one subscriber's or host's usual allocation, so
// that walking the addresses of a /64 does not escape the count). After Max
// failed authentications within Window, counted from the first, every
// request of that client is answered 429 with Retry-After until the window
// ends, before its token is even looked at: a valid token from the same
// address waits too, which is the price of giving a guesser no answer at
// all.
type FailureLimit struct {
	Max    int           // default 10
	Window time.Duration // default 1m
	// Clients bounds the memory: at most this many clients are tracked
	// (default 10000). When full, expired entries go first; if none has
	// expired an arbitrary one is forgotten, so a flood of addresses
	// costs memory no longer than this bound, and only weakens the limit.
	Clients int
}

type limiter struct {
	max     int
	window  time.Duration
	clients int
	now     func() time.Time

	mu   sync.Mutex
	seen map[netip.Prefix]*failures
	// n is len(seen), read without the lock by tracking.
	n atomic.Int64
}

type failures struct {
	count int
	until time.Time // the end of the window that started with the first failure
}

func newLimiter(cfg FailureLimit, now func() time.Time) (*limiter, error) {
	if cfg.Max < 0 || cfg.Window < 0 || cfg.Clients < 0 {
		return nil, errors.New("access: FailureLimit values must not be negative")
	}
	l := &limiter{max: cfg.Max, window: cfg.Window, clients: cfg.Clients, now: now, seen: map[netip.Prefix]*failures{}}
	if l.max == 0 {
		l.max = 10
	}
	if l.window == 0 {
		l.window = time.Minute
	}
	if l.clients == 0 {
		l.clients = 10000
	}
	return l, nil
}

// clientKey is the client of a request's RemoteAddr; false when it is not
// an address and port (a unix socket): such a request is not limited.
func clientKey(remote string) (netip.Prefix, bool) {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Prefix{}, false
	}
	a := ap.Addr().Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p, true
}

// tracking reports whether any client is being counted; while none is,
// no request needs to look itself up.
func (l *limiter) tracking() bool { return l.n.Load() > 0 }

// blocked returns how long the client must still wait, 0 when it may try.
func (l *limiter) blocked(c netip.Prefix) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.seen[c]
	if f == nil {
		return 0
	}
	now := l.now()
	if !now.Before(f.until) {
		delete(l.seen, c)
		l.n.Store(int64(len(l.seen)))
		return 0
	}
	if f.count < l.max {
		return 0
	}
	return f.until.Sub(now)
}

// fail counts a failed authentication of the client.
func (l *limiter) fail(c netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	f := l.seen[c]
	if f != nil && !now.Before(f.until) {
		f = nil
	}
	if f == nil {
		if _, ok := l.seen[c]; !ok && len(l.seen) >= l.clients {
			l.evict(now)
		}
		f = &failures{until: now.Add(l.window)}
		l.seen[c] = f
		l.n.Store(int64(len(l.seen)))
	}
	f.count++
}

// evict makes room for one client: every expired entry goes, else one
// arbitrary entry.
func (l *limiter) evict(now time.Time) {
	for k, f := range l.seen {
		if !now.Before(f.until) {
			delete(l.seen, k)
		}
	}
	if len(l.seen) < l.clients {
		return
	}
	for k := range l.seen {
		delete(l.seen, k)
		break
	}
}

// size is the number of tracked clients, for tests.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}
