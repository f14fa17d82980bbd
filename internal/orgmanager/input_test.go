package orgmanager

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/orgstore"
)

// TestToOverrideTexts pins the 400 texts of an override's fields and the
// order of their checks; they are the store's (orgstore.PrepareOverride),
// and clients see them as they are.
func TestToOverrideTexts(t *testing.T) {
	str := func(s string) *string { return &s }
	c := str("10.0.0.0/8")
	for _, tc := range []struct {
		in   OverrideInput
		want string
	}{
		{OverrideInput{CIDR: c, Username: str(strings.Repeat("u", 1025))}, "username longer than 1024 bytes"},
		{OverrideInput{CIDR: c, DeviceID: str("a\x00b")}, "invalid input: deviceid contains a NUL character"},
		{OverrideInput{CIDR: c, Location: str("\xff")}, "invalid input: location is not valid UTF-8"},
		// The attributes come before meta.
		{OverrideInput{CIDR: c, Username: str("\x00"), Meta: json.RawMessage(`1`)}, "invalid input: username contains a NUL character"},
		{OverrideInput{CIDR: c, Meta: json.RawMessage(`"x"`)}, "meta must be a JSON object"},
		// Not an object is said before not UTF-8.
		{OverrideInput{CIDR: c, Meta: json.RawMessage("\"\xff\"")}, "meta must be a JSON object"},
		{OverrideInput{CIDR: c, Meta: json.RawMessage("{\"a\":\"\xff\"}")}, "meta is not valid UTF-8"},
		{OverrideInput{CIDR: c, Meta: json.RawMessage(`{"a":1,}`)}, "meta: invalid character '}' looking for beginning of object key string"},
		{OverrideInput{CIDR: c, Meta: json.RawMessage(`{"k":"` + strings.Repeat("m", orgstore.MaxMetaLen) + `"}`)}, "meta larger than 16384 bytes"},
		{OverrideInput{CIDR: c, Meta: json.RawMessage(`{"trace_id":"\u0000"}`)}, "invalid input: meta.trace_id contains a NUL character"},
	} {
		_, err := tc.in.toOverride()
		if err == nil || err.Error() != tc.want {
			t.Errorf("toOverride(%+v) err = %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestToOverrideMeta: null is absent, as leaving meta out is; an object is
// kept compact with its trace id.
func TestToOverrideMeta(t *testing.T) {
	c := "10.0.0.0/8"
	for _, meta := range []json.RawMessage{nil, json.RawMessage(`null`)} {
		o, err := (&OverrideInput{CIDR: &c, Meta: meta}).toOverride()
		if err != nil || o.Meta != nil || o.TraceID != "" {
			t.Errorf("meta %q: %+v, %v; want no meta", meta, o, err)
		}
	}
	in, err := decodeItem(json.RawMessage(`{"cidr":"10.0.0.0/8","meta": { "trace_id" : "t" } }`))
	if err != nil {
		t.Fatal(err)
	}
	o, err := in.toOverride()
	if err != nil || string(o.Meta) != `{"trace_id":"t"}` || o.TraceID != "t" {
		t.Fatalf("toOverride = %+v, %v", o, err)
	}
}
