package app

import (
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/resolver"
)

// TestResolverInFlightConfig: dns.max_in_flight_per_client is accepted
// from 0 (the default) to resolver.MaxClientMaxInFlight and
// dns.tcp.max_queries_per_connection from 0 up; outside, each is refused
// naming its key.
func TestResolverInFlightConfig(t *testing.T) {
	for _, tc := range []struct {
		perClient, perConn int
		key                string // "": accepted
	}{
		{0, 0, ""}, {1, 1, ""}, {resolver.MaxClientMaxInFlight, 100, ""},
		{-1, 0, "dns.max_in_flight_per_client"}, {resolver.MaxClientMaxInFlight + 1, 0, "dns.max_in_flight_per_client"},
		{0, -1, "dns.tcp.max_queries_per_connection"},
	} {
		c := DefaultResolverConfig()
		c.Forwarders = []string{"127.0.0.1:5300"}
		c.DNS.MaxInFlightPerClient, c.DNS.TCP.MaxQueriesPerConnection = tc.perClient, tc.perConn
		_, err := c.parse()
		if tc.key == "" && err != nil {
			t.Errorf("%d per client, %d per connection: %v", tc.perClient, tc.perConn, err)
		}
		if tc.key != "" && (err == nil || !strings.Contains(err.Error(), tc.key)) {
			t.Errorf("%d per client, %d per connection: err %v, want one naming %s", tc.perClient, tc.perConn, err, tc.key)
		}
	}
}
