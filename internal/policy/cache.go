package policy

import (
	"hash/maphash"
	"sync"

	"github.com/svc-pf/svc-pf/internal/settings"
)

// Key identifies a compiled policy by the documents merged into it: the
// layers that have a document, least specific first (settings.Stack's
// AppendLayers), as document pointers. Documents are immutable once
// parsed and a changed document is a new pointer, so equal keys merge to
// equal policies, and a key never needs a version: every session whose
// layers are the same documents (all of an organisation's subscribers
// without documents of their own, say) shares one compiled policy. A
// cache keyed by session would compile it once per session instead, and
// miss on every new subscriber.
type Key [settings.MaxLayers]*settings.Document

// KeyOf returns the key of layers (at most settings.MaxLayers of them).
func KeyOf(layers []settings.Layer) (k Key) {
	for i, l := range layers {
		if i == len(k) {
			break
		}
		k[i] = l.Doc
	}
	return k
}

// Cache holds compiled policies by Key. It is bounded: a shard at its
// bound drops an arbitrary entry to make room. Safe for concurrent use;
// Get does not allocate.
type Cache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
	per    int // entries per shard
}

const cacheShards = 64

type cacheShard struct {
	mu sync.RWMutex
	m  map[Key]*Policy
}

// NewCache returns a cache holding about size policies (at least one per
// shard).
func NewCache(size int) *Cache {
	c := &Cache{seed: maphash.MakeSeed(), per: max(1, (size+cacheShards-1)/cacheShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[Key]*Policy)
	}
	return c
}

func (c *Cache) shard(k *Key) *cacheShard {
	return &c.shards[maphash.Comparable(c.seed, *k)%cacheShards]
}

// Get returns the policy compiled from the documents of k.
func (c *Cache) Get(k *Key) (*Policy, bool) {
	s := c.shard(k)
	s.mu.RLock()
	p, ok := s.m[*k]
	s.mu.RUnlock()
	return p, ok
}

// Put stores the policy compiled from the documents of k.
func (c *Cache) Put(k *Key, p *Policy) {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[*k]; !ok && len(s.m) >= c.per {
		for old := range s.m { // an arbitrary entry
			delete(s.m, old)
			break
		}
	}
	s.m[*k] = p
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
