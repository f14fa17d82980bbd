package session

import (
	"net/netip"
	"strconv"
	"time"
)

// canonicalKeys are the session's JSON keys in the order json.Marshal
// writes them (the struct's field order).
var canonicalKeys = [...]string{"id", "org", "revision", "allocations", "username", "deviceid", "location",
	"trace_id", "opaque_id", "producer", "updated_at", "expires_at"}

// decodeCanonical parses value when it is exactly what json.Marshal writes
// for a Session with plain values, which is what the IP Mapper stores:
// known keys in field order, each at most once, no whitespace, strings of
// printable ASCII without escapes, integers, no nulls. Anything else
// returns false, and the caller decodes with encoding/json. Decoding is
// most of a node's cold start (millions of values), and encoding/json's
// reflection and validation pass cost several times this. Where it
// returns true, the session equals what json.Unmarshal gives
// (FuzzDecodeCanonical): the prefixes and times are parsed by the same
// methods encoding/json calls.
func decodeCanonical(b []byte, s *Session) bool {
	p := 0
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return false
	}
	p = 1
	if b[p] == '}' {
		return p+1 == len(b)
	}
	next := 0 // index in canonicalKeys the next key may have, at least
	for {
		ks, ke, ok := scanString(b, p)
		if !ok || ke+1 >= len(b) || b[ke+1] != ':' {
			return false
		}
		key := b[ks+1 : ke]
		k := next
		for k < len(canonicalKeys) && canonicalKeys[k] != string(key) {
			k++
		}
		if k == len(canonicalKeys) {
			return false
		}
		next = k + 1
		p = ke + 2
		var end int
		switch k {
		case 0, 1, 4, 5, 6, 7, 8, 9:
			vs, ve, ok := scanString(b, p)
			if !ok {
				return false
			}
			v := string(b[vs+1 : ve])
			switch k {
			case 0:
				s.ID = v
			case 1:
				s.Org = v
			case 4:
				s.Username = v
			case 5:
				s.DeviceID = v
			case 6:
				s.Location = v
			case 7:
				s.TraceID = v
			case 8:
				s.OpaqueID = v
			case 9:
				s.Producer = v
			}
			end = ve + 1
		case 2:
			e := p
			if e < len(b) && b[e] == '-' {
				e++
			}
			ds := e
			for e < len(b) && b[e] >= '0' && b[e] <= '9' {
				e++
			}
			if e == ds || b[ds] == '0' && e-ds > 1 {
				return false
			}
			n, err := strconv.ParseInt(string(b[p:e]), 10, 64)
			if err != nil {
				return false
			}
			s.Revision = n
			end = e
		case 3:
			if p >= len(b) || b[p] != '[' {
				return false
			}
			p++
			allocs := []netip.Prefix{}
			if p < len(b) && b[p] == ']' {
				end = p + 1
			} else {
				for {
					vs, ve, ok := scanString(b, p)
					if !ok {
						return false
					}
					var a netip.Prefix
					if a.UnmarshalText(b[vs+1:ve]) != nil {
						return false
					}
					allocs = append(allocs, a)
					p = ve + 1
					if p < len(b) && b[p] == ',' {
						p++
						continue
					}
					if p < len(b) && b[p] == ']' {
						end = p + 1
						break
					}
					return false
				}
			}
			s.Allocations = allocs
		case 10, 11:
			vs, ve, ok := scanString(b, p)
			if !ok {
				return false
			}
			var t time.Time
			if t.UnmarshalJSON(b[vs:ve+1]) != nil {
				return false
			}
			if k == 10 {
				s.UpdatedAt = t
			} else {
				s.ExpiresAt = &t
			}
			end = ve + 1
		}
		switch {
		case end >= len(b):
			return false
		case b[end] == '}':
			return end+1 == len(b)
		case b[end] != ',':
			return false
		}
		p = end + 1
	}
}

// scanString finds the JSON string at b[p]: its opening and closing
// quotes, when it holds only printable ASCII without escapes.
func scanString(b []byte, p int) (start, end int, ok bool) {
	if p >= len(b) || b[p] != '"' {
		return 0, 0, false
	}
	for i := p + 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return p, i, true
		case c < 0x20 || c == '\\' || c >= 0x7f:
			return 0, 0, false
		}
	}
	return 0, 0, false
}
