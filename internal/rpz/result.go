package rpz

import "github.com/svc-pf/svc-pf/internal/policy"

// Result is a query's RPZ outcome as PowerDNS Recursor counts it: one of
// its policy-result-* statistics (the PowerDNS-compatible statistics API,
// whose names internal/resolver/stats owns).
type Result uint8

// Results. NoAction is every query no RPZ action answered: no trigger
// matched, a PASSTHRU matched, or another step decided first.
const (
	ResultNoAction Result = iota
	ResultDrop
	ResultNXDomain
	ResultNoData
	ResultTruncate
	ResultCustom // local data: A/AAAA/TXT or a CNAME
)

// ResultOf returns the Result of a finished decision; the resolver counts
// it once per query (counters resolved once, indexed by Result). It
// allocates nothing.
func ResultOf(d *policy.Decision) Result {
	if d.Reason != policy.ReasonRPZ {
		return ResultNoAction
	}
	switch d.Action {
	case policy.ActionDrop:
		return ResultDrop
	case policy.ActionNXDomain:
		return ResultNXDomain
	case policy.ActionNoData:
		return ResultNoData
	case policy.ActionTruncate:
		return ResultTruncate
	case policy.ActionRedirect, policy.ActionCNAME:
		return ResultCustom
	}
	return ResultNoAction // passthru
}
