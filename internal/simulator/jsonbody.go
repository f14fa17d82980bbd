package simulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/svc-pf/svc-pf/internal/httpapi"
)

// The domain and simulate bodies are appended to a reused buffer rather
// than encoded by encoding/json: that reflects over every map[string]any and
// sorts every map's keys, ≈ 12 % of the simulator's CPU. The bytes mean the
// same (same fields, same values, the same string escaping as
// httpapi.WriteJSON, which does not escape HTML); the keys of the body's
// known objects come in the documented order (docs/simulator.md, Bodies)
// instead of sorted, and keys the order does not name (a script's own, the
// settings document's) follow sorted. A value of a type the appender does
// not know (a script can only produce the known ones; a built-in might)
// falls back to httpapi.WriteJSON.

// keyOrder is the order of one object's known keys and the orders of its
// nested objects (by key; for an array, of its elements).
type keyOrder struct {
	keys   []string
	nested map[string]*keyOrder
}

// The documented orders (docs/simulator.md, Bodies): fingerprint follows
// answer, log (verbose) comes last.
var (
	categoryOrder = &keyOrder{keys: []string{"code", "title", "feed", "match"}}
	answerOrder   = &keyOrder{
		keys:   []string{"rcode", "forwarded", "records", "a", "aaaa", "txt", "cname", "dropped", "truncated", "ede"},
		nested: map[string]*keyOrder{"ede": {keys: []string{"code", "text"}}},
	}
	simulateOrder = &keyOrder{
		keys: []string{"domain", "path", "verdict", "action", "reason", "rule", "identity", "categories",
			"settings", "layers", "answer", "fingerprint", "trace", "log"},
		nested: map[string]*keyOrder{
			"identity":   {keys: append(identityFields[:], "other_sessions")},
			"categories": categoryOrder,
			"answer":     answerOrder,
			"trace":      {keys: []string{"step", "result"}},
		},
	}
	domainOrder = &keyOrder{
		keys:   []string{"domain", "path", "categories"},
		nested: map[string]*keyOrder{"categories": categoryOrder},
	}
)

// orderOf is the key order of call's body; nil for calls answered by
// httpapi.WriteJSON.
func orderOf(call string) *keyOrder {
	switch call {
	case CallSimulateUser:
		return simulateOrder
	case CallLookupDomain:
		return domainOrder
	}
	return nil
}

// errUnknownType stops the appender at a value it does not encode.
var errUnknownType = errors.New("a value the body appender does not encode")

// maxBodyDepth matches the nesting the Lua conversion allows, with room.
const maxBodyDepth = 128

// bodyEncoder appends one body; its buffers are reused through a
// bodyEncoders pool.
type bodyEncoder struct {
	buf  []byte
	keys []string // scratch for the keys an order does not name, used as a stack
}

// bodyEncoders reuses encoders and their buffers across requests.
type bodyEncoders struct{ pool sync.Pool }

// writeBody writes v as the 200 body of call, as httpapi.WriteJSON would
// (Content-Type, a trailing newline). A value neither the appender nor
// encoding/json can encode is returned as an error before anything is
// written, for the caller's 500.
func (p *bodyEncoders) writeBody(w http.ResponseWriter, call string, v any) error {
	e, _ := p.pool.Get().(*bodyEncoder)
	if e == nil {
		e = &bodyEncoder{buf: make([]byte, 0, 4096)}
	}
	defer p.pool.Put(e)
	var err error
	e.buf, err = e.appendValue(e.buf[:0], v, orderOf(call), 0)
	if err == nil {
		e.buf = append(e.buf, '\n')
	} else {
		// A type the appender does not know: httpapi.WriteJSON's bytes,
		// encoded before the status line is sent.
		buf := bytes.NewBuffer(e.buf[:0])
		enc := json.NewEncoder(buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return err
		}
		e.buf = buf.Bytes()
	}
	w.Header().Set("Content-Type", "application/json")
	// The length is known: net/http need not chunk a body over its 2 KB buffer.
	w.Header().Set("Content-Length", strconv.Itoa(len(e.buf)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(e.buf) // a write error means the client went away
	if cap(e.buf) > 1<<20 {
		e.buf = make([]byte, 0, 4096) // not kept: one verbose answer should not pin a large buffer
	}
	return nil
}

// AppendBody appends the JSON of call's result v as the HTTP body has it
// (without the trailing newline): the domain and simulate bodies in
// the documented key order, other objects' keys sorted. It fails on a
// value encoding/json would be needed for (then use encoding/json: the
// value is the same).
func AppendBody(dst []byte, call string, v any) ([]byte, error) {
	var e bodyEncoder
	return e.appendValue(dst, v, orderOf(call), 0)
}

func (e *bodyEncoder) appendValue(b []byte, v any, o *keyOrder, depth int) ([]byte, error) {
	if depth > maxBodyDepth {
		return b, errUnknownType
	}
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case string:
		return httpapi.AppendJSONString(b, x), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case float64:
		return appendFloat(b, x)
	case []any:
		b = append(b, '[')
		for i, el := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = e.appendValue(b, el, o, depth+1); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	case []string:
		b = append(b, '[')
		for i, s := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = httpapi.AppendJSONString(b, s)
		}
		return append(b, ']'), nil
	case map[string]any:
		return e.appendObject(b, x, o, depth)
	case *simulateBody:
		return x.appendTo(e, b, depth)
	case json.RawMessage:
		// Rendered by the built-in (the settings document): compact JSON
		// already, copied as is.
		if len(x) == 0 {
			return b, errUnknownType
		}
		return append(b, x...), nil
	}
	return b, errUnknownType
}

// appendObject writes the keys o names in its order, then the others
// sorted.
func (e *bodyEncoder) appendObject(b []byte, m map[string]any, o *keyOrder, depth int) ([]byte, error) {
	b = append(b, '{')
	first := true
	field := func(k string, v any) error {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = httpapi.AppendJSONString(b, k)
		b = append(b, ':')
		var no *keyOrder
		if o != nil {
			no = o.nested[k]
		}
		var err error
		b, err = e.appendValue(b, v, no, depth+1)
		return err
	}
	named := 0
	if o != nil {
		for _, k := range o.keys {
			if v, ok := m[k]; ok {
				named++
				if err := field(k, v); err != nil {
					return b, err
				}
			}
		}
	}
	if named < len(m) {
		base := len(e.keys)
		for k := range m {
			if o == nil || !slices.Contains(o.keys, k) {
				e.keys = append(e.keys, k)
			}
		}
		rest := e.keys[base:]
		slices.Sort(rest)
		for _, k := range rest {
			if err := field(k, m[k]); err != nil {
				e.keys = e.keys[:base]
				return b, err
			}
		}
		e.keys = e.keys[:base]
	}
	return append(b, '}'), nil
}

// appendFloat formats f as encoding/json does; NaN and ±Inf have no JSON
// form (encoding/json fails on them too).
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, errUnknownType
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}
