// Package identity holds who a DNS client is, in the platform's terms: an
// organisation and, inside it, the attributes an override gives an address
// range (username, device id, location). The write side validates it once
// (orgmanager → orgstore), sessions carry it to the IP Mapper and to every
// node, the session index hands it back, and the settings layers and the
// decision engine address subscribers by it.
//
// It is a leaf package: validation rules and limits only, no I/O.
package identity

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on identity strings. The organisation API names none; these keep one
// careless client from storing megabytes per override (docs/orgmanager.md).
const (
	MaxOrgLen       = 255
	MaxAttributeLen = 1024
)

// ErrInvalid is wrapped by every refusal of this package, so layers that
// map errors to statuses (a 400) test for it alone.
var ErrInvalid = errors.New("invalid input")

// invalidError is a refusal whose text is shown to API clients as it is.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, a ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, a...)}
}

// Attributes are what an override assigns to the addresses of its CIDR.
// Each is "" when absent. meta and trace_id are never part of them: they do
// not change who the subscriber is.
type Attributes struct {
	Username string `json:"username,omitempty"`
	DeviceID string `json:"deviceid,omitempty"`
	Location string `json:"location,omitempty"`
}

// Validate checks each attribute in the order username, deviceid, location:
// at most MaxAttributeLen bytes, then text a database column can hold.
func (a Attributes) Validate() error {
	for _, f := range [...]struct{ name, v string }{
		{"username", a.Username}, {"deviceid", a.DeviceID}, {"location", a.Location},
	} {
		if len(f.v) > MaxAttributeLen {
			return invalidf("%s longer than %d bytes", f.name, MaxAttributeLen)
		}
		if err := CheckText(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

// Identity is a subscriber: the organisation and the attributes of the
// session an address, a username or a device id resolved to.
type Identity struct {
	Org string `json:"org"`
	Attributes
}

// Validate checks the organisation id and the attributes.
func (id Identity) Validate() error {
	if err := ValidateOrg(id.Org); err != nil {
		return err
	}
	return id.Attributes.Validate()
}

// ValidateOrg checks an organisation id: any non-empty path segment up to
// MaxOrgLen bytes of printable UTF-8 (docs/orgmanager.md, organisation ids).
// A decoded %2F would make it more than one segment, so '/' is refused; "."
// and ".." are not segments a client or proxy keeps as they are, since they
// name the current and parent path. The texts are the API's 400 bodies.
func ValidateOrg(org string) error {
	switch {
	case org == "":
		return invalidf("organisation id is empty")
	case org == "." || org == "..":
		return invalidf("organisation id must not be %q", org)
	case len(org) > MaxOrgLen:
		return invalidf("organisation id longer than %d bytes", MaxOrgLen)
	case !utf8.ValidString(org):
		return invalidf("organisation id is not valid UTF-8")
	case strings.ContainsRune(org, '/'):
		return invalidf("organisation id must not contain '/'")
	}
	for _, r := range org {
		if r < 0x20 || r == 0x7f {
			return invalidf("organisation id contains a control character")
		}
	}
	return nil
}

// CheckText refuses strings that PostgreSQL cannot store in a TEXT column
// (invalid UTF-8, NUL), so both SQL dialects accept and refuse the same
// input. field names the value in the error.
func CheckText(field, v string) error {
	if !utf8.ValidString(v) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, field)
	}
	if strings.IndexByte(v, 0) >= 0 {
		return fmt.Errorf("%w: %s contains a NUL character", ErrInvalid, field)
	}
	return nil
}
