package policy

import (
	"hash/maphash"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/gaissmai/bart"

	"github.com/svc-pf/svc-pf/internal/settings"
)

// Policy is an effective settings document compiled for the query path:
// lists as suffix-match sets, categories as sorted sets, networks as a
// short list or a prefix table. It is immutable once compiled and safe for
// concurrent use.
type Policy struct {
	eff *settings.Effective

	filtering  bool
	safeSearch bool
	paused     bool
	allow      suffixSet
	block      suffixSet
	categories codeSet
	networks   networkSet
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

// CompileWith compiles an effective document (settings.Merge) with
// options; the zero Options are the defaults. A nil e compiles the
// defaults (settings.Merge of no layer).
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
	if d.BlockedNetworks != nil {
		p.networks = newNetworkSet(*d.BlockedNetworks)
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
func (p *Policy) HasNetworks() bool { return !p.networks.empty() }

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
// under it, and answers with the rule naming the entry
// ("blocklist:ads.example"). A compiled policy lives in the engine's cache
// for as long as its documents do, tens of thousands of them, and every GC
// cycle marks what they hold: a map of strings is an object per name and
// per rule, and a pointer to each. So the set is two pointer-free objects:
// the rules back to back in one string, and an open-addressing table of
// where each rule is, hashed by its name. The GC marks them without
// scanning them.
type suffixSet struct {
	rules  string   // every entry's rule, prefix then name, back to back
	slots  []uint64 // len a power of two; 0 is empty, else slot(off, tag, len)
	prefix int      // len of the rules' prefix ("blocklist:")
	seed   maphash.Seed
}

// A slot packs where an entry's rule is (offset and length in rules) with 8
// bits of its name's hash, which spare most probes a string compare. A rule
// is never empty (its prefix is not), so no entry's slot is 0. Lengths have
// 24 bits: names are domain names (settings.Parse: at most 253 bytes).
func slot(off, tag, n int) uint64 { return uint64(off)<<32 | uint64(tag&0xff)<<24 | uint64(n) }

func newSuffixSet(prefix string, names []string) suffixSet {
	if len(names) == 0 {
		return suffixSet{}
	}
	size := 4
	for size*2 < len(names)*3 { // at most two thirds full: short probes
		size <<= 1
	}
	s := suffixSet{slots: make([]uint64, size), prefix: len(prefix), seed: maphash.MakeSeed()}
	size = 0
	for _, n := range names {
		size += len(prefix) + len(strings.TrimSuffix(n, "."))
	}
	var b strings.Builder
	b.Grow(size)
	for _, n := range names {
		b.WriteString(prefix)
		b.WriteString(strings.TrimSuffix(n, "."))
	}
	s.rules = b.String()
	off := 0
	for _, n := range names {
		end := off + len(prefix) + len(strings.TrimSuffix(n, "."))
		name := s.rules[off+len(prefix) : end]
		h := maphash.String(s.seed, name)
		if _, dup := s.find(name, h); !dup {
			s.slots[s.free(h)] = slot(off, int(h>>56), end-off)
		}
		off = end
	}
	return s
}

// find returns the rule of name, whose hash is h.
func (s *suffixSet) find(name string, h uint64) (string, bool) {
	mask := uint64(len(s.slots) - 1)
	tag := h >> 56
	for i := h & mask; ; i = (i + 1) & mask {
		e := s.slots[i]
		if e == 0 {
			return "", false
		}
		n := int(e & 0xffffff)
		if (e>>24)&0xff == tag && n-s.prefix == len(name) {
			off := int(e >> 32)
			if s.rules[off+s.prefix:off+n] == name {
				return s.rules[off : off+n], true
			}
		}
	}
}

// free returns the first empty slot of a probe for hash h.
func (s *suffixSet) free(h uint64) uint64 {
	mask := uint64(len(s.slots) - 1)
	i := h & mask
	for s.slots[i] != 0 {
		i = (i + 1) & mask
	}
	return i
}

// match returns the rule of the most specific listed name that is name or
// a parent of it. name is lower case without a trailing dot. It walks the
// labels with substrings: no allocation.
func (s *suffixSet) match(name string) (string, bool) {
	if len(s.slots) == 0 {
		return "", false
	}
	for {
		if r, ok := s.find(name, maphash.String(s.seed, name)); ok {
			return r, true
		}
		i := strings.IndexByte(name, '.')
		if i < 0 {
			return "", false
		}
		name = name[i+1:]
	}
}

// networkSet is blocked_networks for step 8: the most specific network
// holding an address, and its rule ("network:10.0.0.0/8"). A short list,
// the common case, is the effective document's own prefixes searched in
// turn, with the rules back to back in one string: no object of its own
// for the GC to mark beyond that string and their ends (pointer-free). A
// long one is a prefix table.
type networkSet struct {
	prefixes []netip.Prefix // short lists: shared with the document
	rules    string
	ends     []uint32            // where each prefix's rule ends in rules
	table    *bart.Table[string] // long lists
}

// maxLinearNetworks is the longest list searched in turn: beyond it the
// prefix table's lookup is quicker.
const maxLinearNetworks = 16

func newNetworkSet(nets []netip.Prefix) networkSet {
	if len(nets) == 0 {
		return networkSet{}
	}
	if len(nets) > maxLinearNetworks {
		t := new(bart.Table[string])
		for _, n := range nets {
			t.Insert(n, "network:"+n.String())
		}
		return networkSet{table: t}
	}
	s := networkSet{prefixes: nets[:len(nets):len(nets)], ends: make([]uint32, len(nets))}
	var b []byte
	for i, n := range nets {
		b = n.AppendTo(append(b, "network:"...))
		s.ends[i] = uint32(len(b))
	}
	s.rules = string(b)
	return s
}

func (s *networkSet) empty() bool { return s.table == nil && len(s.prefixes) == 0 }

// lookup returns the rule of the most specific network holding a; of
// equal networks, the one listed last (as the table keeps the last
// inserted).
func (s *networkSet) lookup(a netip.Addr) (string, bool) {
	if s.table != nil {
		return s.table.Lookup(a)
	}
	a = a.WithZone("") // the table ignores a zone; Prefix.Contains would refuse it
	best, bits := -1, -1
	for i, n := range s.prefixes {
		if n.Bits() >= bits && n.Contains(a) {
			best, bits = i, n.Bits()
		}
	}
	if best < 0 {
		return "", false
	}
	start := uint32(0)
	if best > 0 {
		start = s.ends[best-1]
	}
	return s.rules[start:s.ends[best]], true
}

// codeSet is a sorted set of category codes.
type codeSet []uint16

func newCodeSet(codes []uint16) codeSet {
	if len(codes) == 0 {
		return nil
	}
	if increasing(codes) {
		// As settings.Parse leaves them: share the document's codes
		// (immutable) rather than hold a copy per policy.
		return codes[:len(codes):len(codes)]
	}
	c := slices.Clone(codes)
	slices.Sort(c)
	return slices.Compact(c)
}

// increasing reports whether codes are sorted without duplicates.
func increasing(codes []uint16) bool {
	for i := 1; i < len(codes); i++ {
		if codes[i] <= codes[i-1] {
			return false
		}
	}
	return true
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
