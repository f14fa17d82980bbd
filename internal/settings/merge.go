package settings

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/netip"
)

// Layer names, least specific first (docs/policy.md, the layers). A layer of
// a scope is named with its value: "org:acme", "profile:2", "location:hq",
// "username:alice", "deviceid:mac:0a1b".
const (
	LayerDefault  = "default" // built in: what no layer sets
	LayerGlobal   = "global"
	LayerOrg      = "org"
	LayerProfile  = "profile"
	LayerLocation = "location"
	LayerUsername = "username"
	LayerDeviceID = "deviceid"
)

// Layer is one document of a merge, with the name the origin reports.
type Layer struct {
	Name string
	Doc  *Document // nil: the layer has no document
}

// Effective is a merged policy: every field set, the layer each came from,
// and a fingerprint that is equal for equal policies.
type Effective struct {
	Document
	// Origin maps each field name to the name of the layer it came from.
	// It is nil in an Effective of MergeCompact: OriginOf answers for
	// either.
	Origin map[string]string
	// Fingerprint is 16 hex digits of a SHA-256 over the canonical JSON of
	// the policy (without profile, which only selects a layer): the
	// resolver's packet cache keys on it, never on the subscriber.
	Fingerprint string
	// origins is Origin by the index of the field in fields ("" for a
	// profile no layer sets), filled by Merge and MergeCompact alike.
	origins [len(fields)]string
}

// OriginOf returns the name of the layer field came from: Origin[field]
// when Origin is set, else the same from the Effective's own record (""
// for an unknown field, and for profile when no layer sets it).
func (e *Effective) OriginOf(field string) string {
	if e.Origin != nil {
		return e.Origin[field]
	}
	if i := fieldIndex(field); i >= 0 {
		return e.origins[i]
	}
	return ""
}

// Defaults is what applies where no layer sets a field: filtering on,
// nothing blocked, blocks answered NXDOMAIN. The values the document
// points at are one allocation: every merge takes a copy, and a compiled
// policy keeps it for as long as it is cached, so nine small objects per
// cached policy would be nine more for each GC cycle to mark.
func Defaults() *Document {
	v := &struct {
		filtering, safe, paused bool
		cats                    []uint16
		allow, block            []string
		nets                    []netip.Prefix
		action                  Action
		schedules               []Schedule
	}{filtering: true, cats: []uint16{}, allow: []string{}, block: []string{},
		nets: []netip.Prefix{}, action: Action{Type: ActionNXDomain}, schedules: []Schedule{}}
	return &Document{
		Filtering:         &v.filtering,
		BlockedCategories: &v.cats,
		Allowlist:         &v.allow,
		Blocklist:         &v.block,
		BlockedNetworks:   &v.nets,
		SafeSearch:        &v.safe,
		Paused:            &v.paused,
		Action:            &v.action,
		Schedules:         &v.schedules,
	}
}

// Merge merges layers, least specific first: for each field the last layer
// that sets it wins, whole. Fields no layer sets take Defaults. Documents
// are shared, not copied: they are immutable once parsed.
func Merge(layers ...Layer) *Effective {
	e := MergeCompact(layers...)
	e.Origin = make(map[string]string, len(fields))
	for i := range fields {
		if i != fProfile || e.Profile != nil { // profile only when a layer sets it
			e.Origin[fields[i].name] = e.origins[i]
		}
	}
	return e
}

// MergeCompact is Merge without the Origin map: its Effective answers
// OriginOf from a record held inline. The map of nine fields is several
// objects and eighteen string pointers, which every GC cycle marks for
// each of the tens of thousands of policies a policy cache holds (about
// half of what such a cache costs a cycle); a cache keeps MergeCompact's.
func MergeCompact(layers ...Layer) *Effective {
	e := &Effective{Document: *Defaults()}
	for i := range fields {
		e.origins[i] = LayerDefault
	}
	e.origins[fProfile] = ""
	for _, l := range layers {
		if l.Doc == nil {
			continue
		}
		for i := range fields {
			if fields[i].take(&e.Document, l.Doc) {
				e.origins[i] = l.Name
			}
		}
	}
	policy := e.Document
	policy.Profile = nil
	b, _ := json.Marshal(&policy) // the fields' order is fixed, lists are canonical
	sum := sha256.Sum256(b)
	e.Fingerprint = hex.EncodeToString(sum[:8])
	return e
}

// ProfileOf returns the profile the most specific of docs sets (docs least
// specific first), and whether any sets one.
func ProfileOf(docs ...*Document) (int, bool) {
	for i := len(docs) - 1; i >= 0; i-- {
		if docs[i] != nil && docs[i].Profile != nil {
			return *docs[i].Profile, true
		}
	}
	return 0, false
}
