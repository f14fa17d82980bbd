// Package recursor resolves names iteratively from the root hints, asking
// authoritative servers (port 53) instead of forwarders.
//
// Place in the data flow: it takes upstream's place for a client's query
// that neither cache can answer, with the same contract — an answer within
// a bound, or an error that Is ErrAllFailed saying why, so that the
// resolver answers SERVFAIL in bounded time:
//
//	client query → packet cache miss → record cache miss → recursor.Exchange
//	             → record cache → policy on the answer → reply to the client
//
// One Exchange starts at the closest delegation the recursor knows (its
// infrastructure cache of zones' nameservers and of those nameservers'
// addresses, filled by earlier answers and referrals; the root hints
// otherwise), follows referrals down, resolves nameserver names that came
// without glue, follows CNAME chains (at most Config.MaxCNAME links), and
// returns the answer, NXDOMAIN or NODATA (with the zone's SOA). Records a
// server sends outside its own zone (its bailiwick) are never used: a
// server can speak only for the zone it was asked as the authority of.
//
// Every query to an authoritative server has a fresh random id, its own UDP
// socket on a kernel-chosen random port, and 0x20 letter-case
// randomisation of the name; the reply must echo all three. A truncated
// reply is asked again over TCP. A server that rejects EDNS (FORMERR,
// NOTIMP) is asked again without it and remembered as such.
//
// The work of one Exchange is bounded: queries sent (Config.MaxQueries),
// depth of nested nameserver-address resolutions (Config.MaxDepth), and
// time (Config.MaxTime). Nameservers are chosen by their smoothed round-trip
// time, which decays while unmeasured so that slower servers are measured
// again; servers that fail are throttled for a while, and servers that
// answer for a zone they do not serve (lame) are not asked for that zone
// again until the mark expires.
//
// With Config.DNSSEC on, queries carry the DO bit and each part of an
// answer (what each zone on the way said) is validated with the keys of its
// zone, whose chain of trust is built from the trust anchors down (DS at the
// parent, then the DNSKEY set) with internal/resolver/dnssec's functions
// and cached; a bogus answer is a *ValidationError carrying the RFC 8914
// code, a secure one gets the AD bit for clients that ask (DO or AD). A
// client that sets CD gets bogus data rather than the error, without AD.
//
// Config.ForwardZones send the names at and below chosen zones to chosen
// servers (the zone's authorities, or recursive resolvers asked with RD)
// instead of iterating down to them; what they say is held to the zone's
// bailiwick and validated by the zone's chain of trust like anything else.
//
// The package holds no package-level mutable state: everything lives in a
// Recursor.
package recursor
