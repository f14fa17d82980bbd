package orgstore

import (
	"net/netip"
	"slices"
	"testing"
)

func TestUnpackIdentity(t *testing.T) {
	key := prefixKey(netip.MustParsePrefix("2001:db8::/48"))
	var o Override
	if err := unpackIdentity(append(slices.Clone(key), "alice\x00mac:1\x00\x00tr"...), &o); err != nil {
		t.Fatal(err)
	}
	if o.CIDR.String() != "2001:db8::/48" || o.Username != "alice" || o.DeviceID != "mac:1" || o.Location != "" || o.TraceID != "tr" {
		t.Fatalf("unpacked %+v", o)
	}
	for _, bad := range [][]byte{
		nil,
		{4, 10},
		append(slices.Clone(key), "a\x00b\x00c"...),           // three fields
		append(slices.Clone(key), "a\x00b\x00c\x00d\x00e"...), // five fields
		append([]byte{9, 0, 0, 0, 0, 0}, "\x00\x00\x00"...),   // bad key
	} {
		if err := unpackIdentity(bad, &o); err == nil {
			t.Errorf("unpackIdentity(%q) succeeded", bad)
		}
	}
}
