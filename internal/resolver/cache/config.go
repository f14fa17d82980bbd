package cache

import (
	"errors"
	"fmt"
	"time"
)

// Config is the resolver's cache section. Its two keys sit at the top level
// of the resolver's YAML file (embed it with `yaml:",inline"`):
//
//	packet_cache:
//	  entries: 500000     # answers kept, rounded up to a multiple of 8×shards
//	  max_bytes: 536870912 # memory bound over answers and keys (0: none)
//	  max_ttl: 24h        # longest life of a positive answer, and the largest TTL served
//	  negative_ttl: 60s   # longest life of an NXDOMAIN/NODATA answer (0: not cached)
//	  servfail_ttl: 0s    # life of a SERVFAIL (0: not cached)
//	record_cache:
//	  entries: 1000000    # RRsets and negative entries kept
//	  min_ttl: 1s         # TTLs below this are raised to it
//	  max_ttl: 24h        # TTLs above this are lowered to it
//	  negative_ttl: 1h    # longest life of a negative entry (0: not cached)
//	  serve_stale: 24h    # how long past expiry an entry may still be served when the forwarders fail (0: off)
//	  prefetch: 2         # hits in the last tenth of an entry's TTL that refresh it in the background (0: off)
//
// Defaults follow PowerDNS Recursor 4.8 where it has the same setting
// (max-packetcache-entries, packetcache-ttl, packetcache-negative-ttl,
// max-cache-entries, minimum-ttl-override, max-cache-ttl, max-negative-ttl);
// servfail_ttl differs, see PacketConfig.
type Config struct {
	Packet PacketConfig `yaml:"packet_cache"`
	Record RecordConfig `yaml:"record_cache"`
}

// DefaultConfig returns the defaults of both caches.
func DefaultConfig() Config {
	return Config{Packet: DefaultPacketConfig(), Record: DefaultRecordConfig()}
}

// Validate checks both sections, naming the key at fault.
func (c Config) Validate() error {
	return errors.Join(c.Packet.Validate(), c.Record.Validate())
}

// PacketConfig sizes the packet cache. TTLs are durations in whole seconds,
// as DNS TTLs are; a fraction of a second is an error rather than a silent
// rounding.
type PacketConfig struct {
	// Entries bounds the number of answers. It is rounded up to a multiple
	// of 8 × the shard count (the cache is 8-way set-associative).
	Entries int `yaml:"entries"`
	// MaxBytes bounds the answers' and keys' bytes plus a fixed overhead per
	// entry; 0 means the entry bound alone. A TCP answer can be 64 KiB, so
	// the entry count alone does not bound memory.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxTTL caps how long a positive answer is kept and every TTL in it.
	MaxTTL time.Duration `yaml:"max_ttl"`
	// NegativeTTL caps how long an NXDOMAIN or NODATA answer is kept; its
	// own lifetime is RFC 2308's (the smaller of the SOA TTL and MINIMUM).
	// 0 keeps negative answers out of the packet cache.
	NegativeTTL time.Duration `yaml:"negative_ttl"`
	// ServfailTTL keeps a SERVFAIL that long. The default, 0, does not keep
	// it (PowerDNS keeps one 60 s): a SERVFAIL usually reports a passing
	// upstream failure, and replaying it from the cache stretches a short
	// outage for every subscriber of the policy class; shielding the
	// upstream from retries is the record cache's and the upstream's job.
	ServfailTTL time.Duration `yaml:"servfail_ttl"`
	// Shards is the number of writer locks, rounded up to a power of two;
	// 0 picks 8 × GOMAXPROCS. Readers take no lock at all.
	Shards int `yaml:"shards"`
	// Prefetch is RecordConfig.Prefetch, which the resolver copies here:
	// a packet-cache hit in the last tenth of its entry's life counts
	// towards the refresh of the name's record (see Prefetch there). It is
	// not a key of its own in the file.
	Prefetch int `yaml:"-"`
}

// DefaultPacketConfig returns PowerDNS-like defaults, with a memory bound.
func DefaultPacketConfig() PacketConfig {
	return PacketConfig{
		Entries:     500_000,
		MaxBytes:    512 << 20,
		MaxTTL:      24 * time.Hour,
		NegativeTTL: 60 * time.Second,
	}
}

// Validate reports the keys at fault.
func (c PacketConfig) Validate() error {
	switch {
	case c.Entries <= 0:
		return fmt.Errorf("packet_cache.entries: must be positive, got %d (leave the packet cache out of the server instead)", c.Entries)
	case c.MaxBytes < 0:
		return fmt.Errorf("packet_cache.max_bytes: must not be negative, got %d", c.MaxBytes)
	case c.Shards < 0 || c.Shards > 1<<16:
		return fmt.Errorf("packet_cache.shards: must be 0 to 65536, got %d", c.Shards)
	}
	return errors.Join(
		checkTTL("packet_cache.max_ttl", c.MaxTTL, true),
		checkTTL("packet_cache.negative_ttl", c.NegativeTTL, false),
		checkTTL("packet_cache.servfail_ttl", c.ServfailTTL, false),
	)
}

// RecordConfig sizes the record cache and its negative entries.
type RecordConfig struct {
	// Entries bounds positive and negative entries together.
	Entries int `yaml:"entries"`
	// MinTTL raises shorter TTLs of positive answers (PowerDNS
	// minimum-ttl-override), so that a TTL of 0 still shields the upstream
	// for a moment. Negative entries are not raised.
	MinTTL time.Duration `yaml:"min_ttl"`
	// MaxTTL lowers longer TTLs.
	MaxTTL time.Duration `yaml:"max_ttl"`
	// NegativeTTL caps the RFC 2308 lifetime of NXDOMAIN and NODATA
	// entries; 0 keeps no negative entries.
	NegativeTTL time.Duration `yaml:"negative_ttl"`
	// Shards is the number of locks, rounded up to a power of two; 0 picks
	// 8 × GOMAXPROCS.
	Shards int `yaml:"shards"`
	// ServeStale is how long past its expiry an entry may still be served
	// when the forwarders cannot answer (RFC 8767's maximum stale timer);
	// 0 turns serve-stale off. Such an answer carries TTL StaleTTL. The
	// default, one day, is the low end of RFC 8767's suggested one to
	// three days: it carries a subscriber through an outage of the
	// forwarders lasting a night, while an answer much older than that is
	// more likely to have moved than to help. It costs no memory bound:
	// expired entries still count in entries and are the first evicted
	// when a shard is full, so a stale entry never pushes out a fresh one.
	ServeStale time.Duration `yaml:"serve_stale"`
	// Prefetch is how many hits an entry must get in the last tenth of its
	// TTL (its own or, through the packet cache, its answers') for the
	// resolver to ask the forwarders again in the background before it
	// expires: a name asked that often is likely to be asked right after,
	// and would otherwise make a client wait for the forwarders once per
	// TTL. Hits are counted only in that last tenth, so the cache-hit path
	// writes nothing the rest of the time. 0 turns prefetch off.
	Prefetch int `yaml:"prefetch"`
}

// StaleTTL is the TTL of every record of a stale answer (RFC 8767 §4
// recommends 30 s): short, so that clients come back for fresh data soon
// after the forwarders do.
const StaleTTL = 30

// StaleRecheck is RFC 8767's failure recheck timer: after the forwarders
// failed to refresh an entry, its stale data is served at once, without
// asking them again, for this long.
const StaleRecheck = 30 * time.Second

// MaxServeStale bounds serve_stale: RFC 8767 suggests one to three days,
// and an answer a week past its expiry is more likely wrong than useful.
const MaxServeStale = 7 * 24 * time.Hour

// MaxPrefetch bounds prefetch (the hit counter's width).
const MaxPrefetch = 1 << 20

// DefaultRecordConfig returns PowerDNS Recursor's defaults.
func DefaultRecordConfig() RecordConfig {
	return RecordConfig{
		Entries:     1_000_000,
		MinTTL:      time.Second,
		MaxTTL:      24 * time.Hour,
		NegativeTTL: time.Hour,
		ServeStale:  24 * time.Hour,
		Prefetch:    2,
	}
}

// Validate reports the keys at fault.
func (c RecordConfig) Validate() error {
	switch {
	case c.Entries <= 0:
		return fmt.Errorf("record_cache.entries: must be positive, got %d", c.Entries)
	case c.Shards < 0 || c.Shards > 1<<16:
		return fmt.Errorf("record_cache.shards: must be 0 to 65536, got %d", c.Shards)
	case c.MinTTL > c.MaxTTL:
		return fmt.Errorf("record_cache.min_ttl: %v is above max_ttl %v", c.MinTTL, c.MaxTTL)
	case c.ServeStale > MaxServeStale:
		return fmt.Errorf("record_cache.serve_stale: at most %v, got %v (0 turns serve-stale off)", MaxServeStale, c.ServeStale)
	case c.Prefetch < 0 || c.Prefetch > MaxPrefetch:
		return fmt.Errorf("record_cache.prefetch: must be 0 (off) to %d hits, got %d", MaxPrefetch, c.Prefetch)
	}
	return errors.Join(
		checkTTL("record_cache.min_ttl", c.MinTTL, false),
		checkTTL("record_cache.max_ttl", c.MaxTTL, true),
		checkTTL("record_cache.negative_ttl", c.NegativeTTL, false),
		checkTTL("record_cache.serve_stale", c.ServeStale, false),
	)
}

// largestTTL is the largest TTL RFC 2181 §8 allows.
const largestTTL = (1<<31 - 1) * time.Second

func checkTTL(key string, d time.Duration, positive bool) error {
	switch {
	case d < 0 || (positive && d == 0):
		return fmt.Errorf("%s: must be positive, got %v", key, d)
	case d%time.Second != 0:
		return fmt.Errorf("%s: must be whole seconds, got %v", key, d)
	case d > largestTTL:
		return fmt.Errorf("%s: above the largest DNS TTL (2^31-1 s), got %v", key, d)
	}
	return nil
}

func seconds(d time.Duration) uint32 { return uint32(d / time.Second) }
