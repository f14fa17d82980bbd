package app

import (
	"testing"

	"github.com/svc-pf/svc-pf/internal/feedbuild"
)

// TestDefaultListenersDistinct: the standalone commands' default TCP
// listeners are all different, so that any of them run side by side on
// one machine with their defaults (the control plane runs the
// orgmanager, the IP Mapper, the collector, RADIUS, feed update and feed
// serve together) start without a port clash. `svc-pf all`'s node
// listener takes the resolver's port on purpose: it replaces it.
func TestDefaultListenersDistinct(t *testing.T) {
	listeners := []struct{ who, addr string }{
		{"orgmanager http.address", DefaultOrgManagerConfig().HTTP.Address},
		{"simulator http.address", DefaultSimulatorConfig().HTTP.Address},
		{"resolver http.address", DefaultResolverConfig().HTTP.Address},
		{"ipmapper http.address", DefaultIPMapperConfig().HTTP.Address},
		{"activity http.address", DefaultActivityConfig().HTTP.Address},
		{"radius http.address", DefaultRadiusConfig().HTTP.Address},
		{"feed update http.address", DefaultFeedUpdateConfig().HTTP.Address},
		{"feed serve --listen", feedbuild.DefaultListen},
	}
	for _, a := range DefaultResolverConfig().DNS.Listen {
		listeners = append(listeners, struct{ who, addr string }{"resolver dns.listen", a})
	}
	seen := map[string]string{}
	for _, l := range listeners {
		if l.addr == "" {
			t.Errorf("%s: no default", l.who)
			continue
		}
		if other, ok := seen[l.addr]; ok {
			t.Errorf("%s and %s both default to %s", other, l.who, l.addr)
		}
		seen[l.addr] = l.who
	}
}
