// Package dnssec is the DNSSEC validator's arithmetic: pure functions that
// say whether an RRset's signatures hold under a zone's keys, whether a
// DNSKEY set is the one a parent's DS (or a trust anchor) names, and whether
// NSEC/NSEC3 records prove a name's, a type's or a DS record's absence.
//
// Place in the data flow: the recursor (internal/resolver/recursor) asks
// authoritative servers with the DO bit, collects records, signatures and
// denial proofs per zone, builds the chain of trust from a trust anchor down
// to each zone it meets, and calls these functions on each piece; their
// Result (secure, insecure, bogus with the RFC 8914 code that says why,
// indeterminate) decides the answer's AD bit or its SERVFAIL. Nothing here
// does I/O or keeps state: the clock is a parameter.
package dnssec
