package orgmanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/orgstore"
)

// readBatch decodes the body of POST /overrides/batch item by item: each
// item becomes an operation or a per-item error as soon as it is read, so
// a batch near its size cap is never held twice (raw and parsed), and the
// 10 001st item ends the request at once without reading the rest. Keys of
// the envelope other than data are skipped, as the decoder of every other
// body does.
func readBatch(w http.ResponseWriter, r *http.Request) ([]orgstore.BatchOp, []BatchError, *httpapi.BodyError) {
	dec, err := httpapi.NewBodyDecoder(w, r, maxBatchBody)
	if err != nil {
		return nil, nil, asBodyError(err)
	}
	switch tok, err := dec.Token(); {
	case err != nil:
		return nil, nil, httpapi.AsBodyError(err) // io.EOF: an empty body
	case tok != json.Delim('{'):
		return nil, nil, badRequest("invalid JSON: body must be an object, not " + tokenKind(tok))
	}
	var (
		ops      []orgstore.BatchOp
		errs     = []BatchError{}
		seenData bool
	)
	for dec.More() {
		key, err := next(dec)
		if err != nil {
			return nil, nil, err
		}
		if key != "data" {
			if _, err := value(dec); err != nil {
				return nil, nil, err
			}
			continue
		}
		if seenData {
			// encoding/json would keep the last; streaming cannot take
			// back what the first one did.
			return nil, nil, badRequest("invalid JSON: data given more than once")
		}
		seenData = true
		if ops, errs, err = readItems(dec); err != nil {
			return nil, nil, err
		}
	}
	if _, err := next(dec); err != nil { // the closing '}'
		return nil, nil, err
	}
	if err := httpapi.ExpectEOF(dec); err != nil {
		return nil, nil, asBodyError(err)
	}
	if !seenData {
		return nil, nil, badRequest("missing required field: data")
	}
	return ops, errs, nil
}

// next reads a token inside the body, where its end is a syntax error.
func next(dec *json.Decoder) (json.Token, *httpapi.BodyError) {
	tok, err := dec.Token()
	return tok, inside(err)
}

// value reads a whole value inside the body.
func value(dec *json.Decoder) (json.RawMessage, *httpapi.BodyError) {
	var raw json.RawMessage
	err := dec.Decode(&raw)
	return raw, inside(err)
}

func inside(err error) *httpapi.BodyError {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return httpapi.AsBodyError(err)
}

// readItems reads the value of data: null (as if absent), or an array of at
// most maxBatchItems items.
func readItems(dec *json.Decoder) ([]orgstore.BatchOp, []BatchError, *httpapi.BodyError) {
	tok, berr := next(dec)
	if berr != nil {
		return nil, nil, berr
	}
	if tok == nil {
		return nil, nil, badRequest("missing required field: data")
	}
	if tok != json.Delim('[') {
		return nil, nil, badRequest("invalid JSON: data must be an array, not " + tokenKind(tok))
	}
	ops := []orgstore.BatchOp{}
	errs := []BatchError{}
	for i := 0; dec.More(); i++ {
		if i == maxBatchItems {
			return nil, nil, badRequest(fmt.Sprintf("batch has more than %d items; the limit is %d", maxBatchItems, maxBatchItems))
		}
		raw, berr := value(dec)
		if berr != nil {
			return nil, nil, berr
		}
		op, err := batchOp(raw)
		if err != nil {
			be := BatchError{Index: i, Error: err.Error()}
			var ie *inputError
			if errors.As(err, &ie) && ie.cidr != "" {
				be.CIDR = &ie.cidr
			}
			errs = append(errs, be)
			continue
		}
		ops = append(ops, op)
	}
	if _, err := next(dec); err != nil { // the closing ']'
		return nil, nil, err
	}
	return ops, errs, nil
}

// tokenKind names the JSON kind of a token as encoding/json's type errors do.
func tokenKind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			return "array"
		}
		return "object"
	case string:
		return "string"
	case float64, json.Number:
		return "number"
	case bool:
		return "bool"
	}
	return "null"
}

func badRequest(msg string) *httpapi.BodyError {
	return &httpapi.BodyError{Status: http.StatusBadRequest, Msg: msg}
}

// asBodyError passes a *httpapi.BodyError through and maps anything else.
func asBodyError(err error) *httpapi.BodyError {
	var be *httpapi.BodyError
	if errors.As(err, &be) {
		return be
	}
	return httpapi.AsBodyError(err)
}
