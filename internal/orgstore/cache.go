package orgstore

import (
	"net/netip"
	"sync"
)

// overrideCache keeps single-override reads (GET /org/{org}/overrides?cidr=)
// in memory. It is only enabled when this process is provably the
// database's only writer — SQLite with the lock file held — because only
// then does the store see every write and can drop what a write changes.
// PostgreSQL, where several orgmanager instances may write, always reads.
type overrideCache struct {
	mu sync.Mutex
	// gen counts committed writes. A read only fills the cache if no write
	// committed while it ran, so a slow read can never store a state that a
	// concurrent write has already replaced.
	gen     uint64
	entries map[string]map[netip.Prefix]View
	size    int
	max     int
}

func newOverrideCache(max int) *overrideCache {
	return &overrideCache{entries: map[string]map[netip.Prefix]View{}, max: max}
}

// get returns the cached view, or the generation to pass to put.
func (c *overrideCache) get(org string, cidr netip.Prefix) (View, bool, uint64) {
	if c == nil {
		return View{}, false, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.entries[org][cidr]
	return v, ok, c.gen
}

// put stores a view read from the database, unless a write committed since
// gen was taken. The view is shared with later readers: it must not change.
func (c *overrideCache) put(org string, cidr netip.Prefix, v View, gen uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.size >= c.max {
		// Crude but bounded: start over rather than track recency on the
		// read path.
		c.entries, c.size = map[string]map[netip.Prefix]View{}, 0
	}
	m := c.entries[org]
	if m == nil {
		m = map[netip.Prefix]View{}
		c.entries[org] = m
	}
	if _, dup := m[cidr]; !dup {
		c.size++
	}
	m[cidr] = v
}

// invalidate drops the organisation's entries after a write to it
// committed (or failed: dropping is always safe).
func (c *overrideCache) invalidate(org string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.size -= len(c.entries[org])
	delete(c.entries, org)
}
