package recursor

import "github.com/miekg/dns"

// QNAME minimisation (RFC 9156): a server is asked about the name one label
// below its zone, not the full name, until the zone that holds the name is
// found; only that zone's servers see the full name. The minimised question
// is of type A (as unbound asks), which servers answer more reliably than
// NS.
//
// The bounds are RFC 9156's: at most maxMinimise minimised questions per
// resolution of a name, and once the name has more labels left than that,
// the first steps take several labels at once (minimiseOneLab are taken one
// at a time at the end), so a name of 100 labels does not cost 100 queries.
const (
	maxMinimise    = 10
	minimiseOneLab = 4
)

type minimiser struct {
	on    bool
	below int // labels below the zone in the next question; 0: not started
	steps int
}

func (m *minimiser) reset() { m.below = 0 }

func (m *minimiser) deeper() { m.below++ }

// next is the question to ask zone's servers on the way to name/qtype.
func (m *minimiser) next(zone, name string, qtype uint16) (string, uint16) {
	if !m.on || m.steps >= maxMinimise {
		return name, qtype
	}
	zl, nl := dns.CountLabel(zone), dns.CountLabel(name)
	left := nl - zl
	if m.below == 0 {
		m.below = 1
		// Many labels left: take the extra ones in the first steps,
		// leaving the last minimiseOneLab to one label each, so that
		// all of them fit in the steps left.
		if budget := maxMinimise - m.steps; left > minimiseOneLab && left > budget {
			m.below = max(1, left-budget+1)
		}
	}
	if m.below >= left {
		return name, qtype
	}
	m.steps++
	idx := dns.Split(name)
	return name[idx[left-m.below]:], dns.TypeA
}
