package resolver

import (
	"context"
	"errors"
	"fmt"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
)

// Mode is how a record-cache miss is answered (resolver.mode).
type Mode uint8

const (
	// ModeForward asks the configured forwarders (upstream.Client).
	ModeForward Mode = iota
	// ModeRecursive resolves from the root hints (recursor.Recursor),
	// validating DNSSEC as its Config says.
	ModeRecursive
)

func (m Mode) String() string {
	if m == ModeRecursive {
		return "recursive"
	}
	return "forward"
}

// ParseMode reads resolver.mode: "forward" (also "") or "recursive".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "forward":
		return ModeForward, nil
	case "recursive":
		return ModeRecursive, nil
	}
	return ModeForward, fmt.Errorf("%q is not forward or recursive", s)
}

// exchanger is what a record-cache miss, a prefetch and a stale refresh
// ask: the forwarder client or the recursor, which share this contract
// (an answer within a bound, or an error that Is upstream.ErrAllFailed).
type exchanger interface {
	Exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error)
}

// Mode is the mode the resolver runs in (a change needs a restart).
func (r *Resolver) Mode() Mode { return r.cfg.Mode }

// bogusReply is the SERVFAIL for an answer the recursor found bogus, with
// the validator's extended error code (RFC 8914) when the client sent
// EDNS; ok is false when err is no validation failure.
func bogusReply(req *dns.Msg, err error) (*dns.Msg, bool) {
	var ve *recursor.ValidationError
	if !errors.As(err, &ve) {
		return nil, false
	}
	m := errorReply(req, dns.RcodeServerFailure)
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(ourUDPSize, opt.Do())
		m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_EDE{InfoCode: ve.EDE(), ExtraText: "DNSSEC validation failed"}}
	}
	return m, true
}

// recursiveStat is the recursor's statistic called name (PowerDNS's
// names), 0 in forward mode. r.rec is set in New before any read.
func (r *Resolver) recursiveStat(name string) uint64 {
	if r.rec == nil {
		return 0
	}
	switch name {
	case "nsspeeds-entries":
		return uint64(max(r.rec.Stats().NSSpeeds, 0))
	case "throttle-entries":
		return uint64(max(r.rec.Stats().Throttled, 0))
	case "failed-host-entries":
		return uint64(max(r.rec.Stats().Failed, 0))
	case "throttled-out", "throttled-outqueries":
		// PowerDNS serves one counter under both names.
		return r.rec.Counters().ThrottledOut
	case "nsset-invalidations":
		return r.rec.Counters().NSSetInvalidations
	case "dont-outqueries":
		return r.rec.Counters().DontOutqueries
	}
	return r.rec.DNSSECCounters()[name]
}
