// Package upstream is the resolver's client for its forwarders: the
// recursive resolvers named by the `forwarders` config key.
//
// Place in the data flow: a client's query that neither cache can answer
// goes out through Client.Exchange; the answer fills the record cache, and
// the subscriber's policy is applied to it after that, as to any cached
// answer:
//
//	client query → packet cache miss → record cache miss → upstream.Exchange
//	             → record cache → policy on the answer → reply to the client
//
// Exchange answers within a bound (Config.MaxTime) or returns an error that
// Is ErrAllFailed, so that the resolver answers SERVFAIL in bounded time
// when every forwarder is down, slow or answering rubbish. Along the way it
// counts what PowerDNS Recursor counts for its outgoing queries (Metrics).
//
// The package keeps miekg/dns types inside the resolver's packages, as the
// design asks, and holds no package-level mutable state: everything lives in
// a Client.
package upstream
