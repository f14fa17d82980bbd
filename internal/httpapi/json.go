package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"unicode/utf8"
)

type ctxKey struct{}

func withRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// RequestID returns the id of the request being served.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error     string `json:"error"`
	Detail    string `json:"detail,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// WriteJSON writes v as the response body with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // a write error means the client went away
}

// WriteError writes {"error": msg} with the given 4xx status.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, ErrorBody{Error: msg})
}

// WriteInternal answers 500 with the error's detail and the request id, so
// an operator can find the matching log line, and logs it.
func WriteInternal(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	id := RequestID(r.Context())
	if log != nil {
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "request_id", id, "err", err)
	}
	writeInternal(w, id, err)
}

func writeInternal(w http.ResponseWriter, id string, err error) {
	WriteJSON(w, http.StatusInternalServerError, ErrorBody{
		Error: "internal server error", Detail: err.Error(), RequestID: id,
	})
}

// BodyError is a request body that could not be decoded; Status says which
// 4xx it deserves.
type BodyError struct {
	Status int
	Msg    string
}

func (e *BodyError) Error() string { return e.Msg }

// DecodeJSON decodes the request body into dst, reading at most maxBytes.
// Trailing data after the JSON value is refused. A body whose declared
// Content-Length is over maxBytes is refused before any of it is read.
func DecodeJSON(w http.ResponseWriter, r *http.Request, maxBytes int64, dst any) error {
	dec, err := NewBodyDecoder(w, r, maxBytes)
	if err != nil {
		return err
	}
	if err := dec.Decode(dst); err != nil {
		return AsBodyError(err)
	}
	return ExpectEOF(dec)
}

// NewBodyDecoder returns a JSON decoder over the request body that reads
// at most maxBytes, for handlers that decode a large body piece by piece.
// A body whose declared Content-Length is over maxBytes is refused before
// any of it is read.
func NewBodyDecoder(w http.ResponseWriter, r *http.Request, maxBytes int64) (*json.Decoder, error) {
	if r.ContentLength > maxBytes {
		return nil, AsBodyError(&http.MaxBytesError{Limit: maxBytes})
	}
	return json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBytes)), nil
}

// ExpectEOF refuses trailing data after the JSON value dec has read.
func ExpectEOF(dec *json.Decoder) error {
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return AsBodyError(err)
		}
		return &BodyError{Status: http.StatusBadRequest, Msg: "invalid JSON: trailing data after the JSON value"}
	}
	return nil
}

// AsBodyError maps an error of reading or decoding a request body to its
// 4xx: 413 over the size limit, else 400 with the reason.
func AsBodyError(err error) *BodyError {
	var mbe *http.MaxBytesError
	var ute *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &mbe):
		return &BodyError{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("request body larger than %d bytes", mbe.Limit)}
	case errors.Is(err, io.EOF):
		return &BodyError{Status: http.StatusBadRequest, Msg: "invalid JSON: empty body"}
	case errors.As(err, &ute):
		field := ute.Field
		if field == "" {
			field = "body"
		}
		return &BodyError{Status: http.StatusBadRequest, Msg: fmt.Sprintf("invalid JSON: %s must be %s, not %s", field, JSONKind(ute.Type.Kind().String()), ute.Value)}
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF):
		return &BodyError{Status: http.StatusBadRequest, Msg: "invalid JSON: " + err.Error()}
	}
	return &BodyError{Status: http.StatusBadRequest, Msg: "invalid JSON: " + err.Error()}
}

// JSONKind names a Go kind the way a JSON client thinks of it, for
// "field must be a string" messages.
func JSONKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "bool":
		return "a boolean"
	case "int", "int64", "int32", "uint", "uint64", "float64":
		return "a number"
	}
	return k
}

// AppendJSONString appends s quoted as encoding/json quotes it with HTML
// escaping off (WriteJSON's setting), byte for byte: control characters
// escaped (\b \f \n \r \t by name), invalid UTF-8 as U+FFFD, U+2028 and
// U+2029 escaped (JavaScript line terminators). Bodies built by appending
// (the hot ones) stay identical to what WriteJSON would have written.
func AppendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
