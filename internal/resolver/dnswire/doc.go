// Package dnswire reads and patches DNS messages as raw wire bytes, without
// building a dns.Msg, for the resolver's packet-cache fast path.
//
// Place in the data flow:
//
//	UDP socket (batched reads) → (*dnswire.Query).Parse → client address →
//	policy fingerprint → cache.Packet.Get → dnswire.PatchHeader → write
//	                                         └ miss → the resolver pipeline
//	                                           (miekg/dns, policy, upstream),
//	                                           whose answer cache.Packet.Put stores
//
// A Go DNS server that unpacks every packet into a fresh dns.Msg and a
// goroutine spends most of a cache hit on allocation and garbage collection;
// the fast path instead parses only what the cache key and the reply need
// (header, the one question, the OPT record), copies the stored answer, and
// patches the id and the question's letter case (0x20) in place; ScanAnswer
// finds the TTLs, which the packet cache clamps (ClampTTLs) when it stores an
// answer and ages (on its own copy of the offsets) when it hands one out.
// Every function here works on caller-owned buffers and allocates nothing.
//
// What is a FORMERR and what is dropped is decided in ParseError; see
// README.md beside this file for the full table.
package dnswire
