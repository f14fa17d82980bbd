package rpz

import (
	"iter"
	"maps"
	"net/netip"
	"strings"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// SkipReason says why a record of a zone file made no trigger. Skipped
// records are counted, never guessed at.
type SkipReason string

// Skip reasons.
const (
	// SkipClientIP, SkipIP, SkipNSDName, SkipNSIP: triggers other than
	// QNAME. The decision sees neither the client address (identity is
	// the session's), nor the response's addresses (policy's
	// blocked_networks is the RPZ-IP analogue), nor the name servers (a
	// forwarding resolver never learns them).
	SkipClientIP SkipReason = "rpz-client-ip"
	SkipIP       SkipReason = "rpz-ip"
	SkipNSDName  SkipReason = "rpz-nsdname"
	SkipNSIP     SkipReason = "rpz-nsip"
	// SkipZoneData: NS records, a repeated apex SOA (as an AXFR dump
	// ends), DNSSEC records: zone structure, not policy.
	SkipZoneData SkipReason = "zone-data"
	// SkipApex: a policy record at the apex, which would be a trigger for
	// the root name.
	SkipApex SkipReason = "apex"
	// SkipOutOfZone: an owner name not under the apex (an absolute name
	// written without the zone suffix, usually).
	SkipOutOfZone SkipReason = "out-of-zone"
	// SkipClass: a class other than IN (PowerDNS ignores them too).
	SkipClass SkipReason = "class"
	// SkipType: local data of a type a Decision cannot carry (MX, SRV,
	// PTR, HTTPS …); PowerDNS would answer it.
	SkipType SkipReason = "unsupported-type"
	// SkipAction: a CNAME to an "rpz-" name this version does not know
	// (rpz-skipzone., a later RPZ format), which PowerDNS discards too.
	SkipAction SkipReason = "unsupported-action"
	// SkipName: an owner that is not a host name a query can carry
	// (escapes, a '*' other than a leading wildcard label, bad labels).
	SkipName SkipReason = "invalid-name"
	// SkipTarget: a local CNAME whose target is not a host name.
	SkipTarget SkipReason = "invalid-target"
	// SkipDuplicate: a record equal to one already read for the trigger.
	SkipDuplicate SkipReason = "duplicate"
)

// Stats is a zone's parse report.
type Stats struct {
	// Records is the resource records read, the SOA included.
	Records int `json:"records"`
	// Triggers is the QNAME triggers loaded, Wildcards of them wildcards.
	Triggers  int `json:"triggers"`
	Wildcards int `json:"wildcards"`
	// Skipped counts records that made no trigger, by reason.
	Skipped map[SkipReason]int `json:"skipped"`
}

// SkippedTotal is the sum of Skipped.
func (s *Stats) SkippedTotal() int {
	n := 0
	for _, v := range s.Skipped {
		n += v
	}
	return n
}

// Zone is one parsed zone file: immutable, safe for concurrent use. It
// implements policy.RPZ on its own; a Snapshot checks several in order.
type Zone struct {
	name   string
	file   string
	apex   string
	serial uint32

	// exact maps a trigger name to its rule; wild maps the name under a
	// wildcard ("example.com" for *.example.com, "" for a bare "*") to its
	// rule. Indexes into rules keep the maps' values small and the rules
	// in one allocation.
	exact map[string]uint32
	wild  map[string]uint32
	rules []rule

	stats Stats
}

// Name is the zone's configured name.
func (z *Zone) Name() string { return z.name }

// File is the file the zone was read from.
func (z *Zone) File() string { return z.file }

// Apex is the SOA's owner, lower case without the trailing dot ("" for
// the root).
func (z *Zone) Apex() string { return z.apex }

// Serial is the SOA's serial.
func (z *Zone) Serial() uint32 { return z.serial }

// Stats returns the zone's parse report (a copy).
func (z *Zone) Stats() Stats {
	s := z.stats
	s.Skipped = maps.Clone(z.stats.Skipped)
	return s
}

// Check implements policy.RPZ for this zone alone.
func (z *Zone) Check(in *policy.Input, d *policy.Decision) bool {
	name := strings.TrimSuffix(in.Domain, ".")
	r := z.match(name)
	if r == nil {
		return false
	}
	r.apply(d, name)
	return true
}

// Trigger is one QNAME trigger of a zone, as Triggers yields it.
type Trigger struct {
	// Name is the trigger's name, a lower-case A-label; for a wildcard the
	// name under its "*" ("" for a bare "*").
	Name     string
	Wildcard bool
	// Verdict is what a match decides: policy.VerdictAllow for PASSTHRU.
	Verdict policy.Verdict
}

// Triggers yields the zone's triggers in the order the file gives them
// first. It is for tools (`feed build`'s rpz source imports them), not for
// the query path.
func (z *Zone) Triggers() iter.Seq[Trigger] {
	return func(yield func(Trigger) bool) {
		ts := make([]Trigger, len(z.rules))
		for name, i := range z.exact {
			ts[i] = Trigger{Name: name}
		}
		for name, i := range z.wild {
			ts[i] = Trigger{Name: name, Wildcard: true}
		}
		for i := range ts {
			ts[i].Verdict = z.rules[i].verdict
			if !yield(ts[i]) {
				return
			}
		}
	}
}

// match returns the rule for name, which is lower case without the
// trailing dot: the exact trigger, else the wildcard nearest to name (a
// longer wildcard beats a shorter one), else nil. A wildcard covers the
// names strictly below its base, never the base itself. It walks the
// labels with substrings, as policy's suffixSet: no allocation.
func (z *Zone) match(name string) *rule {
	if i, ok := z.exact[name]; ok {
		return &z.rules[i]
	}
	if len(z.wild) == 0 || name == "" {
		return nil
	}
	for parent := name; ; {
		dot := strings.IndexByte(parent, '.')
		if dot < 0 {
			break
		}
		parent = parent[dot+1:]
		if i, ok := z.wild[parent]; ok {
			return &z.rules[i]
		}
	}
	// A bare "*" covers every name below the root.
	if i, ok := z.wild[""]; ok {
		return &z.rules[i]
	}
	return nil
}

// rule is one trigger's action, ready to be copied into a Decision.
type rule struct {
	verdict policy.Verdict
	action  policy.Action
	// target is a local CNAME's target; when expand is set it is the part
	// after the target's leading "*" (".garden.example"), which follows
	// the query name.
	target string
	expand bool
	a      []netip.Addr
	aaaa   []netip.Addr
	txt    []string
	// text is the rule, "rpz:<zone> trigger=<trigger> action=<action>",
	// built once so that a hit allocates nothing.
	text string
}

func (r *rule) apply(d *policy.Decision, name string) {
	d.Verdict, d.Action = r.verdict, r.action
	switch r.action {
	case policy.ActionCNAME:
		d.Target = r.target
		if r.expand {
			d.Target = name + r.target
		}
	case policy.ActionRedirect:
		d.A, d.AAAA, d.TXT = r.a, r.aaaa, r.txt
	}
	d.SetRule(r.text)
}

// Snapshot is the zones of a Set at one moment, in order of evaluation:
// immutable, safe for concurrent use. It implements policy.RPZ.
type Snapshot struct {
	zones []*Zone
}

// Check reports whether a trigger of any zone matches in.Domain (a lower-
// case A-label; a trailing dot is ignored). The first zone with a match
// decides, exact beating wildcard inside a zone; it sets d's Verdict,
// Action, Target, A, AAAA, TXT and rule, and leaves d.Reason to policy.
// It allocates nothing, except a wildcard-target local CNAME's target.
func (s *Snapshot) Check(in *policy.Input, d *policy.Decision) bool {
	if s == nil {
		return false
	}
	name := strings.TrimSuffix(in.Domain, ".")
	for _, z := range s.zones {
		if r := z.match(name); r != nil {
			r.apply(d, name)
			return true
		}
	}
	return false
}

// Zones returns the zones in order of evaluation.
func (s *Snapshot) Zones() []*Zone {
	if s == nil {
		return nil
	}
	return append([]*Zone(nil), s.zones...)
}
