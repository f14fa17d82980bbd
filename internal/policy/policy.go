package policy

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/gaissmai/bart"

	"github.com/svc-pf/svc-pf/internal/settings"
)

// Policy is an effective settings document compiled for the query path:
// lists as suffix-match sets, categories as sorted sets, networks as a
// prefix table. It is immutable once compiled and safe for concurrent use.
type Policy struct {
	eff *settings.Effective

	filtering  bool
	safeSearch bool
	paused     bool
	allow      suffixSet
	block      suffixSet
	categories codeSet
	networks   *bart.Table[string] // nil when blocked_networks is empty
	schedules  []schedule
	action     blockAction
	youtube    string // the YouTube safe name (YouTubeStrict by default)

	fingerprint string
	// operator has a bit per field of operatorFields whose value is the
	// operator's (EDE 15 rather than 17).
	operator uint8
	cacheKey string
}

// schedule is one window of the settings, with what it adds while open.
type schedule struct {
	s          *settings.Schedule
	paused     bool
	categories codeSet
	pausedRule string // "paused:schedules[i]"
}

// blockAction is how a block is answered.
type blockAction struct {
	action  Action
	target  string
	a, aaaa []netip.Addr
}

// Options adjust a compilation.
type Options struct {
	// YouTube is the safe name of YouTube's names under safe search:
	// YouTubeStrict (the default when empty) or YouTubeModerate.
	YouTube string
}

// Compile compiles an effective document (settings.Merge) with the default
// options. A nil e compiles the defaults (settings.Merge of no layer).
func Compile(e *settings.Effective) *Policy { return CompileWith(e, Options{}) }

// CompileWith compiles an effective document with options.
func CompileWith(e *settings.Effective, o Options) *Policy {
	if e == nil {
		e = settings.Merge()
	}
	d := &e.Document
	p := &Policy{
		eff:         e,
		filtering:   d.Filtering == nil || *d.Filtering,
		safeSearch:  d.SafeSearch != nil && *d.SafeSearch,
		paused:      d.Paused != nil && *d.Paused,
		youtube:     YouTubeStrict,
		fingerprint: e.Fingerprint,
	}
	p.operator = operatorMask(e)
	p.cacheKey = p.fingerprint + "-" + strconv.Itoa(int(p.operator))
	if o.YouTube != "" {
		p.youtube = o.YouTube
	}
	if d.Allowlist != nil {
		p.allow = newSuffixSet("allowlist:", *d.Allowlist)
	}
	if d.Blocklist != nil {
		p.block = newSuffixSet("blocklist:", *d.Blocklist)
	}
	if d.BlockedCategories != nil {
		p.categories = newCodeSet(*d.BlockedCategories)
	}
	if d.BlockedNetworks != nil && len(*d.BlockedNetworks) > 0 {
		p.networks = new(bart.Table[string])
		for _, n := range *d.BlockedNetworks {
			p.networks.Insert(n, "network:"+n.String())
		}
	}
	if d.Schedules != nil {
		ss := *d.Schedules
		if len(ss) > maxSchedules {
			ss = ss[:maxSchedules] // settings.Parse allows no more
		}
		for i := range ss {
			p.schedules = append(p.schedules, schedule{
				s:          &ss[i],
				paused:     ss[i].Paused,
				categories: newCodeSet(ss[i].BlockedCategories),
				pausedRule: "paused:schedules[" + strconv.Itoa(i) + "]",
			})
		}
	}
	p.action = blockAction{action: ActionNXDomain}
	if a := d.Action; a != nil {
		switch a.Type {
		case settings.ActionNoData:
			p.action.action = ActionNoData
		case settings.ActionRefused:
			p.action.action = ActionRefused
		case settings.ActionDrop:
			p.action.action = ActionDrop
		case settings.ActionRedirect:
			p.action = blockAction{action: ActionRedirect, a: a.A, aaaa: a.AAAA}
		case settings.ActionCNAME:
			p.action = blockAction{action: ActionCNAME, target: a.Target}
		}
	}
	return p
}

// maxSchedules is how many schedules a bit set of open windows holds.
const maxSchedules = 64

// Effective returns the document the policy was compiled from, with the
// origin of each field. It must not be modified.
func (p *Policy) Effective() *settings.Effective { return p.eff }

// Fingerprint is the effective document's fingerprint: equal for equal
// policies, the resolver's packet cache key.
func (p *Policy) Fingerprint() string { return p.fingerprint }

// HasNetworks reports whether blocked_networks is set: the resolver then
// decides again with each answer address (step 8).
func (p *Policy) HasNetworks() bool { return p.networks != nil }

// HasSchedules reports whether the policy has schedules: its decisions
// change at the minutes their windows open and close, so a cached answer
// must not outlive the current minute.
func (p *Policy) HasSchedules() bool { return len(p.schedules) > 0 }

// CacheKey is the key of the resolver's packet cache: the fingerprint and
// which of the blocking fields are the operator's, since a blocked answer
// carries a different Extended DNS Error for those (EDE). Equal policies
// from the same kinds of layers share it; subscribers never appear in it.
func (p *Policy) CacheKey() string { return p.cacheKey }

// suffixSet holds domain names; a listed name matches itself and every name
// under it. The value is the rule naming the entry ("blocklist:ads.example").
type suffixSet map[string]string

func newSuffixSet(prefix string, names []string) suffixSet {
	if len(names) == 0 {
		return nil
	}
	s := make(suffixSet, len(names))
	for _, n := range names {
		n = strings.TrimSuffix(n, ".")
		s[n] = prefix + n
	}
	return s
}

// match returns the rule of the most specific listed name that is name or
// a parent of it. name is lower case without a trailing dot. It walks the
// labels with substrings: no allocation.
func (s suffixSet) match(name string) (string, bool) {
	if len(s) == 0 {
		return "", false
	}
	for {
		if r, ok := s[name]; ok {
			return r, true
		}
		i := strings.IndexByte(name, '.')
		if i < 0 {
			return "", false
		}
		name = name[i+1:]
	}
}

// codeSet is a sorted set of category codes.
type codeSet []uint16

func newCodeSet(codes []uint16) codeSet {
	if len(codes) == 0 {
		return nil
	}
	c := slices.Clone(codes)
	slices.Sort(c)
	return slices.Compact(c)
}

func (c codeSet) has(code uint16) bool {
	switch len(c) {
	case 0:
		return false
	case 1:
		return c[0] == code
	}
	_, ok := slices.BinarySearch(c, code)
	return ok
}
