// Package cache holds the resolver's two caches.
//
// Place in the data flow:
//
//	UDP socket → (*dnswire.Query).Parse → client address → policy fingerprint
//	  → Packet.Get ── hit → dnswire.PatchHeader → write          (the fast path)
//	       └ miss → pipeline: Record.Get ── miss → upstream → Record.Put
//	                          → policy applied to the records → reply → Packet.Put
//
// The packet cache (Packet) answers most queries: the finished reply as wire
// bytes, keyed by the question, the EDNS/DO/CD bits and the fingerprint of
// the policy class the decision engine assigned (a hash of the effective
// settings, never the subscriber), so every subscriber with the same
// settings shares one entry and a blocked name is blocked from the cache.
// A hit is a lookup without locks, a copy, and TTL and 0x20 patches in
// place: no allocation, no dns.Msg, and through a per-worker PacketReader no
// write to memory another core reads.
//
// The record cache (Record) holds what the upstream answered, once for all
// policy classes, so that a query for a name another class already asked
// for runs the policy over cached records instead of asking upstream again.
// It also holds RFC 2308 negative entries (NXDOMAIN for a name, NODATA for
// a name and type).
//
// Both take the time as an argument (now) rather than reading a clock, so a
// server reads it once per batch and tests move it at will.
package cache
