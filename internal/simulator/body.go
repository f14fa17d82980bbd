package simulator

import (
	"encoding/json"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/policy"
)

// simulateBody is simulate_user's result: the engine's Result and what
// the body adds, rendered only where it is needed. The HTTP and NATS
// bodies are appended straight from it (appendTo: the documented keys in
// simulateOrder, the bytes the maps gave); a script reads it as a Go object
// (luapool.Object: a field is rendered when read, nested objects as JSON
// decoded on demand, as the maps' json.RawMessage parts were), and a script
// that changes a field gets a map of the fields back. Building the body as
// a map of rendered parts was ≈ 2 KB and a score of allocations per
// simulate, most of all the garbage the GC cycles come from.
type simulateBody struct {
	domain, path string // path "" is absent
	res          policy.Result
	settings     json.RawMessage // rendered once per compiled policy (builtins.document)
	log          []any           // verbose=1 only
}

// simulateKeys are the body's keys in simulateOrder.
var simulateKeys = [...]string{"domain", "path", "verdict", "action", "reason", "rule", "identity", "categories",
	"settings", "layers", "answer", "fingerprint", "trace", "log"}

// Field is the value the map body had at key.
func (s *simulateBody) Field(key string) (any, bool) {
	switch key {
	case "domain":
		return s.domain, true
	case "path":
		return s.path, s.path != ""
	case "verdict":
		return string(s.res.Verdict), true
	case "action":
		return string(s.res.Action), true
	case "reason":
		return string(s.res.Reason), true
	case "rule":
		return s.res.Rule(), true
	case "identity":
		return json.RawMessage(appendIdentity(nil, &s.res.Subject)), true
	case "categories":
		return json.RawMessage(appendCategories(nil, s.res.Categories)), true
	case "settings":
		return s.settings, true
	case "layers":
		return json.RawMessage(appendStrings(nil, s.res.Layers)), true
	case "answer":
		return json.RawMessage(appendAnswer(nil, &s.res)), true
	case "fingerprint":
		return s.res.Fingerprint, true
	case "trace":
		return json.RawMessage(appendTrace(nil, &s.res)), true
	case "log":
		return s.log, s.log != nil
	}
	return nil, false
}

// Keys are the fields the body has.
func (s *simulateBody) Keys() []string {
	ks := make([]string, 0, len(simulateKeys))
	for _, k := range simulateKeys {
		if _, ok := s.Field(k); ok {
			ks = append(ks, k)
		}
	}
	return ks
}

// appendTo appends the body as the appender writes the map body it
// replaces: the keys in simulateOrder, the parts rendered in place.
func (s *simulateBody) appendTo(e *bodyEncoder, b []byte, depth int) ([]byte, error) {
	b = append(b, `{"domain":`...)
	b = httpapi.AppendJSONString(b, s.domain)
	if s.path != "" {
		b = append(b, `,"path":`...)
		b = httpapi.AppendJSONString(b, s.path)
	}
	b = append(b, `,"verdict":`...)
	b = httpapi.AppendJSONString(b, string(s.res.Verdict))
	b = append(b, `,"action":`...)
	b = httpapi.AppendJSONString(b, string(s.res.Action))
	b = append(b, `,"reason":`...)
	b = httpapi.AppendJSONString(b, string(s.res.Reason))
	b = append(b, `,"rule":`...)
	b = httpapi.AppendJSONString(b, s.res.Rule())
	b = append(b, `,"identity":`...)
	b = appendIdentity(b, &s.res.Subject)
	b = append(b, `,"categories":`...)
	b = appendCategories(b, s.res.Categories)
	b = append(b, `,"settings":`...)
	if len(s.settings) == 0 {
		return b, errUnknownType // as the map appender refuses an empty json.RawMessage
	}
	b = append(b, s.settings...)
	b = append(b, `,"layers":`...)
	b = appendStrings(b, s.res.Layers)
	b = append(b, `,"answer":`...)
	b = appendAnswer(b, &s.res)
	b = append(b, `,"fingerprint":`...)
	b = httpapi.AppendJSONString(b, s.res.Fingerprint)
	b = append(b, `,"trace":`...)
	b = appendTrace(b, &s.res)
	if s.log != nil {
		b = append(b, `,"log":`...)
		var err error
		if b, err = e.appendValue(b, s.log, nil, depth+1); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

// MarshalJSON is the body's JSON, for encoding/json (httpapi.WriteJSON,
// a body nested in a script's own table).
func (s *simulateBody) MarshalJSON() ([]byte, error) {
	var e bodyEncoder
	return s.appendTo(&e, nil, 0)
}
