package settings

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/netip"
)

// Layer names, least specific first (DESIGN.md §6.1). A layer of a scope is
// named with its value: "org:acme", "profile:2", "location:hq",
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
	Origin map[string]string
	// Fingerprint is 16 hex digits of a SHA-256 over the canonical JSON of
	// the policy (without profile, which only selects a layer): the
	// resolver's packet cache keys on it, never on the subscriber.
	Fingerprint string
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
	e := &Effective{Document: *Defaults(), Origin: make(map[string]string, len(fieldNames))}
	for _, name := range fieldNames {
		e.Origin[name] = LayerDefault
	}
	delete(e.Origin, "profile")
	for _, l := range layers {
		if l.Doc == nil {
			continue
		}
		d := l.Doc
		set := func(field string, ok bool) {
			if ok {
				e.Origin[field] = l.Name
			}
		}
		if set("filtering", d.Filtering != nil); d.Filtering != nil {
			e.Filtering = d.Filtering
		}
		if set("blocked_categories", d.BlockedCategories != nil); d.BlockedCategories != nil {
			e.BlockedCategories = d.BlockedCategories
		}
		if set("allowlist", d.Allowlist != nil); d.Allowlist != nil {
			e.Allowlist = d.Allowlist
		}
		if set("blocklist", d.Blocklist != nil); d.Blocklist != nil {
			e.Blocklist = d.Blocklist
		}
		if set("blocked_networks", d.BlockedNetworks != nil); d.BlockedNetworks != nil {
			e.BlockedNetworks = d.BlockedNetworks
		}
		if set("safe_search", d.SafeSearch != nil); d.SafeSearch != nil {
			e.SafeSearch = d.SafeSearch
		}
		if set("paused", d.Paused != nil); d.Paused != nil {
			e.Paused = d.Paused
		}
		if set("action", d.Action != nil); d.Action != nil {
			e.Action = d.Action
		}
		if set("schedules", d.Schedules != nil); d.Schedules != nil {
			e.Schedules = d.Schedules
		}
		if set("profile", d.Profile != nil); d.Profile != nil {
			e.Profile = d.Profile
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
