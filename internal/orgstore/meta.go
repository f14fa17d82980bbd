package orgstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxMetaLen is the largest meta the store keeps, counted in its compact
// form. The organisation API names no limit; this keeps one careless client
// from storing megabytes per override (docs/orgmanager.md).
const MaxMetaLen = 16 << 10

// NormalizeMeta checks that meta is absent (nil) or a JSON object of at most
// MaxMetaLen bytes and returns it in compact form, so what is stored is what
// the client sent minus whitespace. The refusals wrap ErrInvalidInput and
// their texts are the API's 400 bodies. JSON null is not absent here: how a
// wire format spells "absent" is its decoder's business.
func NormalizeMeta(meta json.RawMessage) (json.RawMessage, error) {
	if meta == nil {
		return nil, nil
	}
	// The object check comes first so that a string or an array is named
	// for what it is rather than for a bad byte inside it.
	if t := bytes.TrimLeft(meta, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, &invalidError{msg: "meta must be a JSON object"}
	}
	// A json.RawMessage keeps the request's bytes as they are, so a raw
	// 0xff byte gets here; json.Compact would copy it through.
	if !utf8.Valid(meta) {
		return nil, &invalidError{msg: "meta is not valid UTF-8"}
	}
	var buf bytes.Buffer
	buf.Grow(len(meta))
	if err := json.Compact(&buf, meta); err != nil {
		return nil, &invalidError{msg: "meta: " + err.Error(), err: err}
	}
	if buf.Len() > MaxMetaLen {
		return nil, &invalidError{msg: fmt.Sprintf("meta larger than %d bytes", MaxMetaLen)}
	}
	return buf.Bytes(), nil
}

// invalidError is a refusal whose text goes to API clients as it is, like
// identity's: without the "invalid input: " that wrapping would prefix.
type invalidError struct {
	msg string
	err error // the cause, if any
}

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalidInput }
func (e *invalidError) Unwrap() error        { return e.err }

// TraceID returns meta.trace_id when meta is a JSON object whose "trace_id"
// member (exact, case-sensitive name; the last one when repeated, as
// encoding/json decodes) is a JSON string, and "" otherwise: absent, not a
// string, or meta not a valid JSON object. It is the value forwarded to the
// IP Mapper with the session, for tracing only (docs/orgmanager.md).
//
// It scans the top-level members by hand rather than decoding: it runs for
// every item of a 10 000-item batch.
func TraceID(meta json.RawMessage) string {
	// Without the literal name, or an escape that could spell it, there is
	// no trace_id member.
	if !bytes.Contains(meta, []byte(`trace_id`)) && !bytes.ContainsRune(meta, '\\') {
		return ""
	}
	if !json.Valid(meta) {
		return ""
	}
	// From here on meta is valid JSON, so the scan needs no error handling.
	i := skipSpace(meta, 0)
	if meta[i] != '{' {
		return ""
	}
	traceID := ""
	i = skipSpace(meta, i+1)
	for meta[i] != '}' {
		keyEnd := stringEnd(meta, i)
		key := meta[i:keyEnd]
		i = skipSpace(meta, keyEnd)
		i = skipSpace(meta, i+1) // ':'
		valEnd := valueEnd(meta, i)
		if isTraceIDKey(key) {
			traceID = ""
			if meta[i] == '"' {
				traceID = unquote(meta[i:valEnd])
			}
		}
		i = skipSpace(meta, valEnd)
		if meta[i] == ',' {
			i = skipSpace(meta, i+1)
		}
	}
	return traceID
}

func isTraceIDKey(quoted []byte) bool {
	if string(quoted) == `"trace_id"` {
		return true
	}
	return bytes.IndexByte(quoted, '\\') >= 0 && unquote(quoted) == "trace_id"
}

// unquote decodes a valid JSON string literal the way encoding/json does.
func unquote(quoted []byte) string {
	inner := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	var s string
	if json.Unmarshal(quoted, &s) != nil {
		return ""
	}
	return s
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string literal starting at i.
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// valueEnd returns the index just past the JSON value starting at i.
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = stringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	default: // number, true, false, null
		for i < len(b) && !strings.ContainsRune(",}] \t\n\r", rune(b[i])) {
			i++
		}
		return i
	}
}
