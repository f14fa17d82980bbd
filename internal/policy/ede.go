package policy

import "github.com/svc-pf/svc-pf/internal/settings"

// Extended DNS Error codes of a blocked answer (RFC 8914; docs/policy.md).
const (
	// EDEBlocked: operator policy decided (the global layer, RPZ).
	EDEBlocked uint16 = 15
	// EDEFiltered: the subscriber's own settings decided (an organisation,
	// profile, location, username or deviceid layer, or the simulator's
	// request settings).
	EDEFiltered uint16 = 17
)

// The bits of Policy.operator: one per field whose origin decides a block's
// EDE code.
const (
	opBlocklist uint8 = 1 << iota
	opPaused
	opSchedules
	opCategories
	opNetworks
)

// operatorFields names the field of each bit of Policy.operator.
var operatorFields = [...]struct {
	field string
	bit   uint8
}{
	{"blocklist", opBlocklist}, {"paused", opPaused}, {"schedules", opSchedules},
	{"blocked_categories", opCategories}, {"blocked_networks", opNetworks},
}

// operatorMask has a bit set for each field of operatorFields whose value
// comes from the operator: the global layer or the built-in defaults.
func operatorMask(e *settings.Effective) uint8 {
	var m uint8
	for _, f := range operatorFields {
		if o := e.OriginOf(f.field); o == settings.LayerGlobal || o == settings.LayerDefault || o == "" {
			m |= f.bit
		}
	}
	return m
}

// EDE returns the Extended DNS Error code of a blocked decision made with
// p: EDEBlocked when operator policy decided, EDEFiltered when the
// subscriber's own settings did; ok is false for a decision that blocks
// nothing (an allow, a safe-search rewrite, an RPZ passthru). The
// resolver puts it on the answer, the simulator reports it, so both say
// the same.
func (d *Decision) EDE(p *Policy) (code uint16, ok bool) {
	var bit uint8
	switch d.Reason {
	case ReasonRPZ:
		if d.Verdict == VerdictAllow {
			return 0, false
		}
		return EDEBlocked, true
	case ReasonBlocklist:
		bit = opBlocklist
	case ReasonPaused:
		bit = opPaused
		if d.rule != "paused:settings" {
			bit = opSchedules
		}
	case ReasonCategory:
		bit = opCategories
		if d.Matched >= 0 && d.Matched < len(d.Categories) && !p.categories.has(d.Categories[d.Matched].Code) {
			bit = opSchedules // blocked by an open schedule's categories
		}
	case ReasonNetwork:
		bit = opNetworks
	default: // allowed, or safe search: a rewrite, not a block
		return 0, false
	}
	if p.operator&bit != 0 {
		return EDEBlocked, true
	}
	return EDEFiltered, true
}
