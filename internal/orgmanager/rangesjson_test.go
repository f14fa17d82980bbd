package orgmanager

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ranges"
)

func TestAppendRangesBody(t *testing.T) {
	rs := []ranges.Range{
		{From: netip.MustParseAddr("10.0.0.0"), To: netip.MustParseAddr("10.0.0.255"), Orig: netip.MustParsePrefix("10.0.0.0/24"),
			Attrs: identity.Attributes{Username: "a\"b\\c\n\x01<&>é\u2028", DeviceID: "mac:1"}},
		{From: netip.MustParseAddr("2001:db8::"), To: netip.MustParseAddr("2001:db8::ffff"), Orig: netip.MustParsePrefix("2001:db8::/112"),
			Attrs: identity.Attributes{Location: "lab"}},
		{From: netip.MustParseAddr("10.0.1.0"), To: netip.MustParseAddr("10.0.1.0"), Orig: netip.MustParsePrefix("10.0.1.0/32")},
	}
	out := appendRangesBody(nil, 7, true, "2026-01-02T03:04:05Z", rs)
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	want := map[string]any{
		"version": 7.0, "dirty": true, "dirty_since": "2026-01-02T03:04:05Z",
		"ranges": []any{
			map[string]any{"from": "10.0.0.0", "to": "10.0.0.255", "orig_cidr": "10.0.0.0/24", "username": "a\"b\\c\n\x01<&>é\u2028", "deviceid": "mac:1"},
			map[string]any{"from": "2001:db8::", "to": "2001:db8::ffff", "orig_cidr": "2001:db8::/112", "location": "lab"},
			map[string]any{"from": "10.0.1.0", "to": "10.0.1.0", "orig_cidr": "10.0.1.0/32"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if string(appendRangesBody(nil, 0, false, "", nil)) != `{"version":0,"dirty":false,"dirty_since":"","ranges":[]}`+"\n" {
		t.Fatalf("empty: %s", appendRangesBody(nil, 0, false, "", nil))
	}
}
