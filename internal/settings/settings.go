// Package settings is a subscriber's filtering policy as a document
// (docs/policy.md, the settings): its fields, their validation, the layers it
// is stored in, and the field-by-field merge of those layers into the
// effective policy, with the origin of each field and a stable fingerprint.
//
// Data flow: orgmanager REST (Parse) → orgstore → deploy → KV "settings" →
// readmodel/settings (Parse again: the same rule) → Merge, once per
// (session, settings version) → policy.DecideInto. It is a leaf: no I/O.
package settings

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// Document is one layer's settings. Every field is optional: nil means
// "not set here", and the layer below decides. A field set in a layer
// replaces the one below whole (a list is not merged with the lists below).
type Document struct {
	Filtering         *bool           `json:"filtering,omitempty"`
	BlockedCategories *[]uint16       `json:"blocked_categories,omitempty"`
	Allowlist         *[]string       `json:"allowlist,omitempty"`
	Blocklist         *[]string       `json:"blocklist,omitempty"`
	BlockedNetworks   *[]netip.Prefix `json:"blocked_networks,omitempty"`
	SafeSearch        *bool           `json:"safe_search,omitempty"`
	Paused            *bool           `json:"paused,omitempty"`
	Action            *Action         `json:"action,omitempty"`
	Schedules         *[]Schedule     `json:"schedules,omitempty"`
	Profile           *int            `json:"profile,omitempty"`
}

// Action says how a block is answered.
type Action struct {
	Type   string       `json:"type"`
	A      []netip.Addr `json:"a,omitempty"`
	AAAA   []netip.Addr `json:"aaaa,omitempty"`
	Target string       `json:"target,omitempty"`
}

// Action types.
const (
	ActionNXDomain = "nxdomain"
	ActionNoData   = "nodata"
	ActionRefused  = "refused"
	ActionDrop     = "drop"
	ActionRedirect = "redirect"
	ActionCNAME    = "cname"
)

// MaxProfile bounds profile numbers; an organisation numbers its profiles
// from 0.
const MaxProfile = 1 << 20

// Limits that keep one document small enough for a KV value and a node's
// memory (docs/policy.md).
const (
	MaxListItems = 10_000
	MaxSchedules = 64
	// MaxDocumentBytes bounds a document's canonical JSON: each document
	// travels to every node as one KV value, and NATS carries at most 1 MiB
	// in a message by default.
	MaxDocumentBytes = 512 << 10
)

// FieldError is a refused document: Field names the field as a client
// wrote it (with an index for list items), Msg says what is wrong.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, a ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// field is one field of a document: the one table of them, in Document's
// order (the order of its canonical JSON), which Parse, Merge, the origins
// and Fields all read.
type field struct {
	name string
	// parse validates v (not null) and sets the field of d.
	parse func(d *Document, v json.RawMessage) error
	// take sets e's field to src's when src sets it, reporting whether it
	// did: the merge's rule, the layer that sets a field replaces it whole.
	take func(e, src *Document) bool
}

var fields = [...]field{
	{"filtering", func(d *Document, v json.RawMessage) (err error) {
		d.Filtering, err = parseBool("filtering", v)
		return err
	}, func(e, src *Document) bool { return take(&e.Filtering, src.Filtering) }},
	{"blocked_categories", func(d *Document, v json.RawMessage) error {
		return set(&d.BlockedCategories, v, func(v json.RawMessage) ([]uint16, error) { return parseCodes("blocked_categories", v) })
	}, func(e, src *Document) bool { return take(&e.BlockedCategories, src.BlockedCategories) }},
	{"allowlist", func(d *Document, v json.RawMessage) error {
		return set(&d.Allowlist, v, func(v json.RawMessage) ([]string, error) { return parseDomains("allowlist", v) })
	}, func(e, src *Document) bool { return take(&e.Allowlist, src.Allowlist) }},
	{"blocklist", func(d *Document, v json.RawMessage) error {
		return set(&d.Blocklist, v, func(v json.RawMessage) ([]string, error) { return parseDomains("blocklist", v) })
	}, func(e, src *Document) bool { return take(&e.Blocklist, src.Blocklist) }},
	{"blocked_networks", func(d *Document, v json.RawMessage) error {
		return set(&d.BlockedNetworks, v, func(v json.RawMessage) ([]netip.Prefix, error) { return parseNetworks("blocked_networks", v) })
	}, func(e, src *Document) bool { return take(&e.BlockedNetworks, src.BlockedNetworks) }},
	{"safe_search", func(d *Document, v json.RawMessage) (err error) {
		d.SafeSearch, err = parseBool("safe_search", v)
		return err
	}, func(e, src *Document) bool { return take(&e.SafeSearch, src.SafeSearch) }},
	{"paused", func(d *Document, v json.RawMessage) (err error) {
		d.Paused, err = parseBool("paused", v)
		return err
	}, func(e, src *Document) bool { return take(&e.Paused, src.Paused) }},
	{"action", func(d *Document, v json.RawMessage) error {
		return set(&d.Action, v, parseAction)
	}, func(e, src *Document) bool { return take(&e.Action, src.Action) }},
	{"schedules", func(d *Document, v json.RawMessage) error {
		return set(&d.Schedules, v, parseSchedules)
	}, func(e, src *Document) bool { return take(&e.Schedules, src.Schedules) }},
	{"profile", func(d *Document, v json.RawMessage) error {
		return set(&d.Profile, v, func(v json.RawMessage) (int, error) { return parseProfile("profile", v) })
	}, func(e, src *Document) bool { return take(&e.Profile, src.Profile) }},
}

// fProfile is the index of profile in fields: it only selects a layer, so
// it has no default and no part in the fingerprint.
const fProfile = len(fields) - 1

// fieldIndex is the index of the field named name in fields, or -1.
func fieldIndex(name string) int {
	for i := range fields {
		if fields[i].name == name {
			return i
		}
	}
	return -1
}

// set parses v with parse and points *dst at the value.
func set[T any](dst **T, v json.RawMessage, parse func(json.RawMessage) (T, error)) error {
	x, err := parse(v)
	if err == nil {
		*dst = &x
	}
	return err
}

// take points *dst at src when src is set.
func take[T any](dst **T, src *T) bool {
	if src == nil {
		return false
	}
	*dst = src
	return true
}

// Fields lists the document's field names in their documented order.
func Fields() []string {
	names := make([]string, len(fields))
	for i := range fields {
		names[i] = fields[i].name
	}
	return names
}

// PolicyFields lists the fields of an effective policy, in Fields' order:
// every field but profile, which only chooses a layer.
func PolicyFields() []string { return Fields()[:fProfile] }

// Parse decodes and validates a settings document: a JSON object whose
// fields are those of Document. An unknown field, a wrong type or an
// invalid value is a *FieldError naming the field. Domains are returned in
// the feed's form (feed.NormalizeName), lists sorted and without duplicates,
// so equal policies have equal documents.
func Parse(data []byte) (*Document, error) {
	if len(data) > 8*MaxDocumentBytes { // room for whitespace; not worth parsing beyond
		return nil, fieldErr("settings", "%d bytes, more than a document can hold", len(data))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		return nil, &FieldError{Field: "settings", Msg: "must be a JSON object"}
	}
	for name := range raw {
		if fieldIndex(name) < 0 {
			if name == "" {
				name = `""`
			}
			return nil, fieldErr(name, "unknown field")
		}
	}
	var d Document
	for _, f := range fields {
		v, ok := raw[f.name]
		if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue // null is "not set", as absent
		}
		if err := f.parse(&d, v); err != nil {
			return nil, err
		}
	}
	if n := len(d.String()); n > MaxDocumentBytes {
		return nil, fieldErr("settings", "%d bytes once canonical, more than %d: a document travels to every node in one message", n, MaxDocumentBytes)
	}
	return &d, nil
}

func parseBool(field string, v json.RawMessage) (*bool, error) {
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		return nil, fieldErr(field, "must be true or false")
	}
	return &b, nil
}

// list decodes a JSON array of raw items, bounded.
func list(field string, v json.RawMessage) ([]json.RawMessage, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, fieldErr(field, "must be a JSON array")
	}
	if len(items) > MaxListItems {
		return nil, fieldErr(field, "more than %d items", MaxListItems)
	}
	return items, nil
}

func parseCodes(field string, v json.RawMessage) ([]uint16, error) {
	items, err := list(field, v)
	if err != nil {
		return nil, err
	}
	out := make([]uint16, 0, len(items))
	for i, it := range items {
		n, err := strconv.ParseUint(string(bytes.TrimSpace(it)), 10, 16)
		if err != nil {
			return nil, fieldErr(fmt.Sprintf("%s[%d]", field, i), "must be a category code from 0 to 65535")
		}
		out = append(out, uint16(n))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func parseString(field string, v json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", fieldErr(field, "must be a string")
	}
	return s, nil
}

func parseDomains(field string, v json.RawMessage) ([]string, error) {
	items, err := list(field, v)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		f := fmt.Sprintf("%s[%d]", field, i)
		s, err := parseString(f, it)
		if err != nil {
			return nil, err
		}
		n, err := feed.NormalizeName(s)
		if err != nil {
			return nil, fieldErr(f, "not a domain name: %v", err)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func parseNetworks(field string, v json.RawMessage) ([]netip.Prefix, error) {
	items, err := list(field, v)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(items))
	for i, it := range items {
		f := fmt.Sprintf("%s[%d]", field, i)
		s, err := parseString(f, it)
		if err != nil {
			return nil, err
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			// A bare address is the network of that one address.
			a, aerr := netip.ParseAddr(s)
			if aerr != nil || a.Zone() != "" {
				return nil, fieldErr(f, "%q is not a CIDR or an IP address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Zone() != "" {
			return nil, fieldErr(f, "%q has a zone", s)
		}
		if p.Addr().Is4In6() {
			// Answers carry IPv4 addresses in A records: the IPv4 form is
			// what matches.
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		out = append(out, p.Masked())
	}
	slices.SortFunc(out, netip.Prefix.Compare) // masked: family, address, length
	return slices.Compact(out), nil
}

func parseProfile(field string, v json.RawMessage) (int, error) {
	n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
	if err != nil || n < 0 || n > MaxProfile {
		return 0, fieldErr(field, "must be a whole number from 0 to %d", MaxProfile)
	}
	return n, nil
}

// ParseProfile checks a profile number given outside a document (a query
// parameter).
func ParseProfile(s string) (int, error) {
	return parseProfile("profile", json.RawMessage(s))
}

func parseAction(v json.RawMessage) (Action, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(v, &raw); err != nil || raw == nil {
		return Action{}, fieldErr("action", "must be a JSON object")
	}
	for k := range raw {
		switch k {
		case "type", "a", "aaaa", "target":
		default:
			return Action{}, fieldErr(fmt.Sprintf("action.%q", k), "unknown field")
		}
	}
	var a Action
	t, ok := raw["type"]
	if !ok {
		return Action{}, fieldErr("action.type", "is required")
	}
	var err error
	if a.Type, err = parseString("action.type", t); err != nil {
		return Action{}, err
	}
	switch a.Type {
	case ActionNXDomain, ActionNoData, ActionRefused, ActionDrop:
		for _, k := range []string{"a", "aaaa", "target"} {
			if _, ok := raw[k]; ok {
				return Action{}, fieldErr("action."+k, "does not go with type %q", a.Type)
			}
		}
	case ActionRedirect:
		if _, ok := raw["target"]; ok {
			return Action{}, fieldErr("action.target", "does not go with type %q", a.Type)
		}
		if a.A, err = parseAddrs("action.a", raw["a"], true); err != nil {
			return Action{}, err
		}
		if a.AAAA, err = parseAddrs("action.aaaa", raw["aaaa"], false); err != nil {
			return Action{}, err
		}
		if len(a.A)+len(a.AAAA) == 0 {
			return Action{}, fieldErr("action", "a redirect needs an address in a or aaaa")
		}
	case ActionCNAME:
		if _, ok := raw["a"]; ok {
			return Action{}, fieldErr("action.a", "does not go with type %q", a.Type)
		}
		if _, ok := raw["aaaa"]; ok {
			return Action{}, fieldErr("action.aaaa", "does not go with type %q", a.Type)
		}
		tv, ok := raw["target"]
		if !ok {
			return Action{}, fieldErr("action.target", "is required for type %q", a.Type)
		}
		s, err := parseString("action.target", tv)
		if err != nil {
			return Action{}, err
		}
		if a.Target, err = feed.NormalizeName(s); err != nil {
			return Action{}, fieldErr("action.target", "not a domain name: %v", err)
		}
	default:
		return Action{}, fieldErr("action.type", "%q is not one of nxdomain, nodata, refused, drop, redirect, cname", a.Type)
	}
	return a, nil
}

func parseAddrs(field string, v json.RawMessage, v4 bool) ([]netip.Addr, error) {
	if v == nil {
		return nil, nil
	}
	items, err := list(field, v)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(items))
	for i, it := range items {
		f := fmt.Sprintf("%s[%d]", field, i)
		s, err := parseString(f, it)
		if err != nil {
			return nil, err
		}
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil || a.Zone() != "":
			return nil, fieldErr(f, "%q is not an IP address", s)
		case v4 && !a.Unmap().Is4():
			return nil, fieldErr(f, "%q is not an IPv4 address", s)
		case !v4 && (a.Is4() || a.Is4In6()):
			return nil, fieldErr(f, "%q is not an IPv6 address", s)
		}
		if v4 {
			a = a.Unmap()
		}
		out = append(out, a)
	}
	return out, nil
}

// String renders the document as its canonical JSON.
func (d *Document) String() string {
	b, _ := json.Marshal(d)
	return string(b)
}
