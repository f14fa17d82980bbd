package resolver

import (
	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
)

// What UDP and TCP share between a packet and the pipeline (steps 1–2 of
// pipeline.go), besides inFlight.

// countParseError counts a packet dnswire refused as PowerDNS does: a
// response or an opcode other than QUERY is not a query at all
// (ignored-packets), anything else a query that does not parse
// (client-parse-errors).
func countParseError(sh *stats.Shard, pe dnswire.ParseError) {
	if pe == dnswire.ErrNotQuery || pe == dnswire.ErrOpcode {
		sh.Inc(stats.IgnoredPackets)
		return
	}
	sh.Inc(stats.ClientParseErrors)
}

// unpackQuery unpacks, for the pipeline, a query dnswire accepted; nil
// when miekg/dns refuses it, counted client-parse-errors, and the caller
// answers appendFormErr's FORMERR over UDP and TCP alike. dnswire checks
// what the fast path reads and skips the rest; miekg/dns also checks the
// content of every option and record: a client-subnet option of an unknown
// family, with a source prefix longer than its address, or shorter than
// its 4-byte head, a TSIG record cut short.
func unpackQuery(pkt []byte, sh *stats.Shard) *dns.Msg {
	req := new(dns.Msg)
	if err := req.Unpack(pkt); err != nil {
		sh.Inc(stats.ClientParseErrors)
		return nil
	}
	return req
}

// appendFormErr appends the FORMERR for pkt, a query dnswire accepted and
// unpackQuery refused: dnswire's error reply (its id, question and EDNS
// echoed), as for the queries dnswire refuses itself.
func appendFormErr(dst, pkt []byte) []byte {
	var q dnswire.Query
	_ = q.Parse(pkt) // it parsed before: the header, question and EDNS are there
	return dnswire.AppendError(dst, &q, dnswire.RcodeFormatError, ourUDPSize)
}
