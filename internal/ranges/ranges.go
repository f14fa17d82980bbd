// Package ranges turns an organisation's IP prefixes and per-CIDR overrides
// into the effective ranges the IP Mapper sees (docs/orgmanager.md, effective
// ranges and deploys). It sits between the orgmanager's store, which supplies
// prefixes and overrides, and the deploy step, which turns ranges into
// sessions. It is pure computation.
package ranges

import (
	"cmp"
	"net/netip"
	"slices"

	"go4.org/netipx"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// Override is an override CIDR with its attributes.
type Override struct {
	CIDR  netip.Prefix
	Attrs identity.Attributes
}

// Range is a run of addresses that all resolve to the same source CIDR.
type Range struct {
	From, To netip.Addr
	// Orig is the override the range derives from, or the bare prefix for
	// addresses no active override covers (then Attrs is empty).
	Orig  netip.Prefix
	Attrs identity.Attributes
}

// Coverage answers whether a CIDR lies inside the union of an organisation's
// prefixes: the test behind an override's active/outside-prefixes status.
type Coverage struct {
	set *netipx.IPSet
}

// NewCoverage builds the union of prefixes. Adjacent prefixes merge, so two
// /9 prefixes cover their /8.
func NewCoverage(prefixes []netip.Prefix) *Coverage {
	var b netipx.IPSetBuilder
	for _, p := range prefixes {
		b.AddPrefix(p)
	}
	set, _ := b.IPSet() // only fails on invalid input, which AddPrefix ignores
	return &Coverage{set: set}
}

// Covers reports whether p is fully contained in the union.
func (c *Coverage) Covers(p netip.Prefix) bool {
	return c.set.ContainsPrefix(p)
}

// Effective flattens prefixes and overrides with most-specific-wins:
// overrides outside the prefix union are held back; any active override wins
// over a bare prefix whatever their lengths; between overrides the longest
// prefix wins; what no override covers is attributed to the most specific
// prefix with no attributes. The result is sorted (IPv4 before IPv6), its
// ranges are disjoint, and two adjacent ranges never share a source.
func Effective(prefixes []netip.Prefix, overrides []Override) []Range {
	cov := NewCoverage(prefixes)
	active := make([]Range, 0, len(overrides))
	for _, o := range overrides {
		if cov.Covers(o.CIDR) {
			active = append(active, Range{Orig: o.CIDR, Attrs: o.Attrs})
		}
	}
	base := make([]Range, 0, len(prefixes))
	for _, p := range prefixes {
		base = append(base, Range{Orig: p})
	}
	return overlay(flatten(active), flatten(base))
}

// flatten splits a set of CIDRs (given as Ranges with only Orig set) so that
// every address belongs to its most specific CIDR. Any two CIDRs are either
// nested or disjoint, so after sorting by start address and then by length a
// stack of the open CIDRs is enough: the top is always the most specific one.
func flatten(items []Range) []Range {
	byStart := func(a, b Range) int {
		if c := a.Orig.Addr().Compare(b.Orig.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Orig.Bits(), b.Orig.Bits())
	}
	// The store hands CIDRs over in this order already; checking is far
	// cheaper than sorting structs this large.
	if !slices.IsSortedFunc(items, byStart) {
		slices.SortFunc(items, byStart)
	}
	items = slices.CompactFunc(items, func(a, b Range) bool { return a.Orig == b.Orig })

	type open struct {
		r    Range
		last netip.Addr
		// next is the first address of r not yet emitted; invalid once the
		// end of the address space has been passed.
		next netip.Addr
	}
	out := make([]Range, 0, len(items))
	var stack []open
	emit := func(o *open, to netip.Addr) {
		if o.next.IsValid() && o.next.Compare(to) <= 0 {
			out = append(out, Range{From: o.next, To: to, Orig: o.r.Orig, Attrs: o.r.Attrs})
		}
	}
	closeUntil := func(first netip.Addr) {
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if first.IsValid() && top.last.Compare(first) >= 0 {
				return
			}
			emit(top, top.last)
			stack = stack[:len(stack)-1]
		}
	}
	for _, it := range items {
		r := netipx.RangeOfPrefix(it.Orig)
		closeUntil(r.From())
		if len(stack) > 0 {
			// The top contains this CIDR: emit the top's part before it and
			// resume the top after it.
			top := &stack[len(stack)-1]
			emit(top, r.From().Prev())
			top.next = r.To().Next()
		}
		stack = append(stack, open{r: it, last: r.To(), next: r.From()})
	}
	// Every piece is emitted once all addresses before it are, so out is
	// in address order without sorting.
	closeUntil(netip.Addr{})
	return out
}

// overlay lays the override ranges over the prefix ranges: both inputs are
// sorted and disjoint; overrides win wherever they overlap. The output is
// merged in address order.
func overlay(over, base []Range) []Range {
	out := make([]Range, 0, len(over)+len(base))
	j := 0 // next override to emit
	// coveredTo is the last address of the last override emitted: one
	// override may span several adjacent base ranges.
	var coveredTo netip.Addr
	for _, b := range base {
		next := b.From // first address of b not yet covered; invalid when none is left
		if coveredTo.IsValid() && coveredTo.Compare(next) >= 0 {
			if coveredTo.Compare(b.To) >= 0 {
				continue
			}
			next = coveredTo.Next()
		}
		for ; j < len(over) && over[j].From.Compare(b.To) <= 0; j++ {
			if over[j].From.Compare(next) > 0 {
				piece := b
				piece.From, piece.To = next, over[j].From.Prev()
				out = append(out, piece)
			}
			out = append(out, over[j])
			coveredTo = over[j].To
			if coveredTo.Compare(b.To) >= 0 {
				next = netip.Addr{}
				j++
				break
			}
			next = coveredTo.Next()
		}
		if next.IsValid() {
			piece := b
			piece.From = next
			out = append(out, piece)
		}
	}
	// Active overrides lie inside the prefixes, so none is left over; keep
	// any that is rather than lose it.
	return append(out, over[j:]...)
}
