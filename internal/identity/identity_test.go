package identity

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateOrg(t *testing.T) {
	for _, c := range []struct {
		org, err string // err: "" for valid, else a substring of the text
	}{
		{"acme", ""},
		{"a b c", ""},
		{"école", ""},
		{strings.Repeat("a", MaxOrgLen), ""},
		{"", "organisation id is empty"},
		{".", `must not be "."`},
		{"..", `must not be ".."`},
		{"...", ""},
		{strings.Repeat("a", MaxOrgLen+1), "longer than 255 bytes"},
		{"a\xffb", "not valid UTF-8"},
		{"a/b", "must not contain '/'"},
		{"a\tb", "control character"},
		{"a\x00b", "control character"},
		{"a\x7fb", "control character"},
	} {
		err := ValidateOrg(c.org)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("ValidateOrg(%q) = %v, want ok", c.org, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ValidateOrg(%q) = %v, want %q", c.org, err, c.err)
		case err != nil && !errors.Is(err, ErrInvalid):
			t.Errorf("ValidateOrg(%q): %v does not match ErrInvalid", c.org, err)
		}
	}
}

func TestAttributesValidate(t *testing.T) {
	long := strings.Repeat("u", MaxAttributeLen+1)
	for _, c := range []struct {
		a   Attributes
		err string
	}{
		{Attributes{}, ""},
		{Attributes{Username: "alice", DeviceID: "mac:00:11", Location: "hq"}, ""},
		{Attributes{Username: strings.Repeat("u", MaxAttributeLen)}, ""},
		{Attributes{Username: long}, "username longer than 1024 bytes"},
		{Attributes{DeviceID: long}, "deviceid longer than 1024 bytes"},
		{Attributes{Location: long}, "location longer than 1024 bytes"},
		{Attributes{Username: "a\x00"}, "invalid input: username contains a NUL character"},
		{Attributes{DeviceID: "\xff"}, "invalid input: deviceid is not valid UTF-8"},
		// Fields are checked in order, each for its length first.
		{Attributes{Username: "\xff", DeviceID: long}, "username is not valid UTF-8"},
		{Attributes{Username: long + "\xff"}, "username longer than"},
	} {
		err := c.a.Validate()
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%+v: %v, want ok", c.a, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%+v: %v, want %q", c.a, err, c.err)
		case err != nil && !errors.Is(err, ErrInvalid):
			t.Errorf("%+v: %v does not match ErrInvalid", c.a, err)
		}
	}
}

func TestIdentity(t *testing.T) {
	id := Identity{Org: "acme", Attributes: Attributes{Username: "alice"}}
	if err := id.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Identity{Attributes: Attributes{Username: "alice"}}).Validate(); err == nil {
		t.Error("an identity without organisation is valid")
	}
	if err := (Identity{Org: "acme", Attributes: Attributes{Location: "\x00"}}).Validate(); err == nil {
		t.Error("an identity with a NUL in its location is valid")
	}
}
