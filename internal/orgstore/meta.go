package orgstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// normalizeMeta checks that meta is absent or a JSON object and returns it in
// compact form, so what is stored is what the client sent minus whitespace.
func normalizeMeta(meta json.RawMessage) (json.RawMessage, error) {
	if meta == nil {
		return nil, nil
	}
	if !utf8.Valid(meta) {
		return nil, fmt.Errorf("%w: meta is not valid UTF-8", ErrInvalidInput)
	}
	var buf bytes.Buffer
	buf.Grow(len(meta))
	if err := json.Compact(&buf, meta); err != nil {
		return nil, fmt.Errorf("%w: meta is not valid JSON: %v", ErrInvalidInput, err)
	}
	out := buf.Bytes()
	if len(out) == 0 || out[0] != '{' {
		return nil, fmt.Errorf("%w: meta must be a JSON object", ErrInvalidInput)
	}
	return out, nil
}

// TraceID returns meta.trace_id when meta is a JSON object whose "trace_id"
// member (exact, case-sensitive name; the last one when repeated, as
// encoding/json decodes) is a JSON string, and "" otherwise: absent, not a
// string, or meta not a valid JSON object. It is the value forwarded to the
// IP Mapper (spec 1, reserved meta key).
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

// checkText rejects strings PostgreSQL cannot store in a TEXT column, so both
// dialects accept and refuse the same input.
func CheckText(field, v string) error {
	if !utf8.ValidString(v) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidInput, field)
	}
	if strings.IndexByte(v, 0) >= 0 {
		return fmt.Errorf("%w: %s contains a NUL character", ErrInvalidInput, field)
	}
	return nil
}

// validOrgID follows DESIGN.md §3: any non-empty path segment up to 255 bytes.
// An id the store cannot hold cannot exist, so readers map it to not-found.
func validOrgID(id string) bool {
	return id != "" && len(id) <= 255 && CheckText("org id", id) == nil
}
