package policy

import (
	"hash/maphash"
	"sync"
)

// Cache holds compiled policies by session id, each under the settings
// version it was compiled at (docs/settings-readmodel.md "Versions and the
// policy cache"): Get hits only for the same version, so an entry of an
// older version is never used again and is replaced by the next Put. It is
// bounded: a shard at its bound drops an arbitrary entry to make room.
// Safe for concurrent use; Get does not allocate.
type Cache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
	per    int // entries per shard
}

const cacheShards = 64

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]cacheEntry
}

type cacheEntry struct {
	version uint64
	p       *Policy
}

// NewCache returns a cache holding about size policies (at least one per
// shard).
func NewCache(size int) *Cache {
	c := &Cache{seed: maphash.MakeSeed(), per: max(1, (size+cacheShards-1)/cacheShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]cacheEntry)
	}
	return c
}

func (c *Cache) shard(id string) *cacheShard {
	return &c.shards[maphash.String(c.seed, id)%cacheShards]
}

// Get returns the policy of session id compiled at settings version v.
func (c *Cache) Get(id string, v uint64) (*Policy, bool) {
	s := c.shard(id)
	s.mu.RLock()
	e, ok := s.m[id]
	s.mu.RUnlock()
	if !ok || e.version != v {
		return nil, false
	}
	return e.p, true
}

// Put stores the policy of session id compiled at settings version v.
func (c *Cache) Put(id string, v uint64, p *Policy) {
	s := c.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[id]; !ok && len(s.m) >= c.per {
		for k := range s.m { // an arbitrary entry
			delete(s.m, k)
			break
		}
	}
	s.m[id] = cacheEntry{version: v, p: p}
}

// Delete drops the policy of session id (a session that ended).
func (c *Cache) Delete(id string) {
	s := c.shard(id)
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

// Len returns how many policies the cache holds.
func (c *Cache) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
