package orgmanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/svc-pf/svc-pf/internal/cidr"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
)

// maxBatchItems is the organisation API's limit on a batch.
const maxBatchItems = 10_000

// Request body caps, derived from the item limits (identity.MaxAttributeLen,
// orgstore.MaxMetaLen, maxBatchItems) so that no legal request is refused
// with 413.
const (
	// maxItemBytes is the largest legal override as a client encodes it
	// compactly: username, deviceid and location at their limit with every
	// byte escaped as \uXXXX (6 bytes; encoding/json's default HTML escaping
	// writes '<' so), meta at its limit (which counts its compact text,
	// escapes included), and 1 KiB for the cidr, the key names, "delete" and
	// the read-only fields a client may echo back (_status, _mtime, _ctime).
	maxItemBytes = 3*6*identity.MaxAttributeLen + orgstore.MaxMetaLen + 1<<10
	// maxBatchBody caps POST /overrides/batch: a full batch of the largest
	// items plus 1 MiB for the envelope and whitespace (about 343 MiB).
	maxBatchBody = maxBatchItems*maxItemBytes + 1<<20
	// maxBody caps every other body: a single override needs at most
	// maxItemBytes, and 32 MiB of prefix patch is about a million CIDRs.
	maxBody = 32 << 20
)

// errMissingCIDR is the batch item message for an absent cidr.
var errMissingCIDR = errors.New("missing required field: cidr")

// OverrideInput is an override as clients send it, alone or as a batch
// item (the console fills one from a form or a CSV row). Pointers tell an absent field from an empty one; unknown fields,
// such as the read-only _status a client may echo back, are ignored.
type OverrideInput struct {
	CIDR     *string         `json:"cidr"`
	Username *string         `json:"username"`
	DeviceID *string         `json:"deviceid"`
	Location *string         `json:"location"`
	Meta     json.RawMessage `json:"meta"`
	Delete   *bool           `json:"delete"`

	// notUTF8 names the first of username, deviceid and location whose
	// string in the body was not valid UTF-8 (see UnmarshalJSON).
	notUTF8 string
}

// UnmarshalJSON decodes an override and notes an attribute whose bytes are
// not valid UTF-8. encoding/json replaces each invalid byte of a string with
// U+FFFD without a word, so such a username was stored as another name
// while the same bytes in meta (kept raw) were a 400 (issue 11); only the
// raw value tells. A body that is valid UTF-8 as a whole, the usual case,
// is decoded once.
func (in *OverrideInput) UnmarshalJSON(b []byte) error {
	type plain OverrideInput // without this method
	if err := json.Unmarshal(b, (*plain)(in)); err != nil {
		return err
	}
	in.notUTF8 = ""
	if utf8.Valid(b) {
		return nil
	}
	var raw struct {
		Username json.RawMessage `json:"username"`
		DeviceID json.RawMessage `json:"deviceid"`
		Location json.RawMessage `json:"location"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err // not reached: the same bytes decoded above
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"username", raw.Username}, {"deviceid", raw.DeviceID}, {"location", raw.Location}} {
		if !utf8.Valid(f.raw) {
			in.notUTF8 = f.name
			break
		}
	}
	return nil
}

// inputError is a refused override; cidr is set when the CIDR itself was
// the problem, for the batch error's cidr field.
type inputError struct {
	cidr string
	err  error
}

func (e *inputError) Error() string { return e.err.Error() }

// field names the override field at fault, as FieldOf does.
func (e *inputError) field() string {
	if e.cidr != "" || errors.Is(e.err, errMissingCIDR) {
		return "cidr"
	}
	if e.err != nil {
		for _, f := range []string{"username", "deviceid", "location", "meta"} {
			if strings.Contains(e.err.Error(), f) {
				return f
			}
		}
	}
	return ""
}

// toOverride validates in the API's order: the required cidr, its syntax,
// length and canonical form, then the other fields. The checks after the
// CIDR are the store's own (orgstore.PrepareOverride), so a batch item the
// store would refuse is a per-item error here instead of failing the whole
// batch in the store, and the store does not run them again.
func (in *OverrideInput) toOverride() (orgstore.Override, error) {
	if in.CIDR == nil {
		return orgstore.Override{}, &inputError{err: errMissingCIDR}
	}
	p, err := cidr.Parse(*in.CIDR)
	if err != nil {
		return orgstore.Override{}, &inputError{cidr: *in.CIDR, err: err}
	}
	if in.notUTF8 != "" {
		// The text identity.Attributes.Validate gives a Go string that is
		// not UTF-8, so both ways of sending one read the same.
		return orgstore.Override{}, &inputError{err: fmt.Errorf("%w: %s is not valid UTF-8", identity.ErrInvalid, in.notUTF8)}
	}
	o := orgstore.Override{CIDR: p, Meta: in.Meta}
	for _, f := range []struct{ in, out *string }{
		{in.Username, &o.Username}, {in.DeviceID, &o.DeviceID}, {in.Location, &o.Location},
	} {
		if f.in != nil {
			*f.out = *f.in
		}
	}
	// encoding/json hands a RawMessage the literal null: for clients it
	// means absent, as leaving meta out does.
	if string(o.Meta) == "null" {
		o.Meta = nil
	}
	if o, err = orgstore.PrepareOverride(o); err != nil {
		return o, &inputError{err: err}
	}
	return o, nil
}

// decodeItem decodes one batch item; a type error is a per-item error, not
// a broken envelope.
func decodeItem(raw json.RawMessage) (OverrideInput, error) {
	var in OverrideInput
	if err := json.Unmarshal(raw, &in); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			return in, fmt.Errorf("invalid item: %s must be %s", ute.Field, httpapi.JSONKind(ute.Type.Kind().String()))
		}
		return in, errors.New("invalid item: not a JSON object")
	}
	return in, nil
}

// prefixPatch is the body of PATCH /org/{org}/prefixes.
type prefixPatch struct {
	Add    []string `json:"add"`
	Remove []string `json:"remove"`
}

func (p *prefixPatch) parse() (add, remove []netip.Prefix, err error) {
	parse := func(list []string, name string) ([]netip.Prefix, error) {
		out := make([]netip.Prefix, 0, len(list))
		for _, s := range list {
			pf, err := cidr.Parse(s)
			if err != nil {
				return nil, refused(http.StatusBadRequest, name, fmt.Errorf("%s: %w", name, err))
			}
			out = append(out, pf)
		}
		return out, nil
	}
	if add, err = parse(p.Add, "add"); err != nil {
		return nil, nil, err
	}
	if remove, err = parse(p.Remove, "remove"); err != nil {
		return nil, nil, err
	}
	return add, remove, nil
}

// specQuery parses the query string of an organisation API endpoint: a
// malformed one (`?cidr=bad%ZZ`) and a parameter of names given more than
// once (`?confirm=true&confirm=false`) are 400s rather than silently read one
// way. Other parameters are ignored, as the API names none of them.
func specQuery(raw string, names ...string) (url.Values, error) {
	q, err := httpapi.ParseQuery(raw)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if len(q[name]) > 1 {
			return nil, fmt.Errorf("parameter %s given more than once", name)
		}
	}
	return q, nil
}
