package orgmanager

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/svc-pf/svc-pf/internal/cidr"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/orgstore"
)

// Limits on stored strings. The spec names none; these keep one careless
// client from storing megabytes per override (docs/orgmanager.md).
const (
	maxOrgIDLen     = 255
	maxAttributeLen = 1024
	maxMetaLen      = 16 << 10
	maxBatchItems   = 10_000
)

// Request body caps, derived from the limits above so that no legal request
// is refused with 413.
const (
	// maxItemBytes is the largest legal override as a client encodes it
	// compactly: username, deviceid and location at their limit with every
	// byte escaped as \uXXXX (6 bytes; encoding/json's default HTML escaping
	// writes '<' so), meta at its limit (which counts its compact text,
	// escapes included), and 1 KiB for the cidr, the key names, "delete" and
	// the read-only fields a client may echo back (_status, _mtime, _ctime).
	maxItemBytes = 3*6*maxAttributeLen + maxMetaLen + 1<<10
	// maxBatchBody caps POST /overrides/batch: a full batch of the largest
	// items plus 1 MiB for the envelope and whitespace (about 343 MiB).
	maxBatchBody = maxBatchItems*maxItemBytes + 1<<20
	// maxBody caps every other body: a single override needs at most
	// maxItemBytes, and 32 MiB of prefix patch is about a million CIDRs.
	maxBody = 32 << 20
)

// errMissingCIDR is the batch item message for an absent cidr.
var errMissingCIDR = errors.New("missing required field: cidr")

// validOrgID checks an organisation id taken from the path: any non-empty
// segment up to 255 bytes of printable UTF-8 (DESIGN.md §3). A decoded %2F
// would make it more than one segment, so '/' is refused; "." and ".." (sent
// as %2E) are not segments a client or proxy keeps as they are, since they
// name the current and parent path.
func validOrgID(id string) error {
	switch {
	case id == "":
		return errors.New("organisation id is empty")
	case id == "." || id == "..":
		return fmt.Errorf("organisation id must not be %q", id)
	case len(id) > maxOrgIDLen:
		return fmt.Errorf("organisation id longer than %d bytes", maxOrgIDLen)
	case !utf8.ValidString(id):
		return errors.New("organisation id is not valid UTF-8")
	case strings.ContainsRune(id, '/'):
		return errors.New("organisation id must not contain '/'")
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return errors.New("organisation id contains a control character")
		}
	}
	return nil
}

// overrideInput is an override as clients send it, alone or as a batch
// item. Pointers tell an absent field from an empty one; unknown fields,
// such as the read-only _status a client may echo back, are ignored.
type overrideInput struct {
	CIDR     *string         `json:"cidr"`
	Username *string         `json:"username"`
	DeviceID *string         `json:"deviceid"`
	Location *string         `json:"location"`
	Meta     json.RawMessage `json:"meta"`
	Delete   *bool           `json:"delete"`
}

// inputError is a refused override; cidr is set when the CIDR itself was
// the problem, for the batch error's cidr field.
type inputError struct {
	cidr string
	err  error
}

func (e *inputError) Error() string { return e.err.Error() }

// toOverride validates in the spec's order: the required cidr, its syntax,
// length and canonical form, then the other fields. Whatever it accepts the
// store accepts too (it runs the store's text checks, orgstore.CheckText), so
// a batch item the store would refuse is a per-item error here instead of
// failing the whole batch in the store.
func (in *overrideInput) toOverride() (orgstore.Override, error) {
	if in.CIDR == nil {
		return orgstore.Override{}, &inputError{err: errMissingCIDR}
	}
	p, err := cidr.Parse(*in.CIDR)
	if err != nil {
		return orgstore.Override{}, &inputError{cidr: *in.CIDR, err: err}
	}
	o := orgstore.Override{CIDR: p}
	for _, f := range []struct {
		name string
		in   *string
		out  *string
	}{{"username", in.Username, &o.Username}, {"deviceid", in.DeviceID, &o.DeviceID}, {"location", in.Location, &o.Location}} {
		if f.in == nil {
			continue
		}
		if len(*f.in) > maxAttributeLen {
			return o, &inputError{err: fmt.Errorf("%s longer than %d bytes", f.name, maxAttributeLen)}
		}
		if err := orgstore.CheckText(f.name, *f.in); err != nil {
			return o, &inputError{err: err}
		}
		*f.out = *f.in
	}
	meta, err := normaliseMeta(in.Meta)
	if err != nil {
		return o, &inputError{err: err}
	}
	// The store keeps a string meta.trace_id in a TEXT column of its own,
	// so it is held to the same rule as the attributes.
	if err := orgstore.CheckText("meta.trace_id", orgstore.TraceID(meta)); err != nil {
		return o, &inputError{err: err}
	}
	o.Meta = meta
	return o, nil
}

// normaliseMeta accepts a JSON object (stored compact) or null/absent. Like
// orgstore's normalizeMeta it refuses invalid UTF-8: a json.RawMessage keeps
// the request's bytes as they are, so a raw 0xff byte inside meta gets here.
func normaliseMeta(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, errors.New("meta must be a JSON object")
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("meta is not valid UTF-8")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	if buf.Len() > maxMetaLen {
		return nil, fmt.Errorf("meta larger than %d bytes", maxMetaLen)
	}
	return buf.Bytes(), nil
}

// decodeItem decodes one batch item; a type error is a per-item error, not
// a broken envelope.
func decodeItem(raw json.RawMessage) (overrideInput, error) {
	var in overrideInput
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
				return nil, fmt.Errorf("%s: %w", name, err)
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
