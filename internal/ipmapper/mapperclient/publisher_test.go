package mapperclient

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
)

func TestCleanRequests(t *testing.T) {
	subnets := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	full := deploy.Diff{Org: "acme", CleanIDs: []string{"s1"}, CleanSubnets: subnets, CleanBelowRevision: 4, CleanOrg: true}
	want := []CleanRequest{
		{Org: "acme", IDs: []string{"s1"}},
		{Org: "acme", Subnets: subnets},
		{Org: "acme", RevisionBelow: 4},
		{Org: "acme", All: true},
	}
	got := cleanRequests(&full)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("cleanRequests = %+v, want %+v", got, want)
	}
	// Each is a request the IP Mapper accepts: one selector, bounded by org.
	for _, c := range got {
		w := wire.CleanSessionsRequest(c)
		if _, err := w.Mode(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	// Sets alone clean nothing: an empty selector must never be sent.
	if got := cleanRequests(&deploy.Diff{Org: "acme", Revision: 3}); len(got) != 0 {
		t.Fatalf("diff without cleans gave %+v", got)
	}
}
