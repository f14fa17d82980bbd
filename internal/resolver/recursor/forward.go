package recursor

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// ForwardZone sends the names at and below Zone to Servers instead of
// iterating down to them from the root: a zone served by servers that no
// public delegation leads to (a private zone), or one to be asked of
// chosen servers.
//
// Without Recurse (PowerDNS's forward-zones) the servers are taken as the
// zone's authorities: asked without RD, their referrals to zones below are
// followed as any others. With Recurse (PowerDNS's forward-zones-recurse,
// unbound's forward-zone) they are recursive resolvers: asked with RD and
// the full name, not minimised.
//
// Either way only what the servers say about names within Zone is taken
// (the bailiwick rule of any authority): a CNAME chain that leaves the zone
// is followed by the recursor itself. DNSSEC applies as anywhere else: the
// zone's chain of trust is built from the trust anchors down, its DS asked
// at its parent by iteration. A forward zone that the public tree does not
// delegate under a signed parent is therefore bogus unless a negative trust
// anchor (NTA) or a trust anchor of its own covers it — as with unbound's
// forward-zone and PowerDNS's forward-zones.
type ForwardZone struct {
	// Zone is the zone's name (a FQDN; a missing final dot is added).
	Zone string
	// Servers are the addresses asked (port 53 unless another is given).
	Servers []netip.AddrPort
	// Recurse: the servers are recursive resolvers.
	Recurse bool
}

// forwardZone is a ForwardZone checked: lower-case zone, the servers'
// addresses (ranked by the infrastructure cache as any server) and each
// one's port.
type forwardZone struct {
	zone    string
	addrs   []netip.Addr
	port    map[netip.Addr]uint16
	recurse bool
}

// forwardZones are the configured forward zones, by name.
type forwardZones map[string]*forwardZone

func newForwardZones(in []ForwardZone) (forwardZones, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := forwardZones{}
	for i, f := range in {
		zone := strings.ToLower(dns.Fqdn(f.Zone))
		if _, ok := dns.IsDomainName(zone); !ok || f.Zone == "" {
			return nil, fmt.Errorf("recursor: forward zone %d: %q is not a domain name", i, f.Zone)
		}
		if _, dup := out[zone]; dup {
			return nil, fmt.Errorf("recursor: forward zone %s listed twice", zone)
		}
		if len(f.Servers) == 0 {
			return nil, fmt.Errorf("recursor: forward zone %s: no server", zone)
		}
		z := &forwardZone{zone: zone, port: map[netip.Addr]uint16{}, recurse: f.Recurse}
		for _, s := range f.Servers {
			a := s.Addr().Unmap()
			if !s.IsValid() || a.IsUnspecified() || a.IsMulticast() {
				return nil, fmt.Errorf("recursor: forward zone %s: server %v is not a unicast address", zone, s)
			}
			port := s.Port()
			if port == 0 {
				port = DefaultPort
			}
			if p, dup := z.port[a]; dup && p != port {
				return nil, fmt.Errorf("recursor: forward zone %s: server %v listed with two ports", zone, a)
			}
			if _, dup := z.port[a]; !dup {
				z.addrs = append(z.addrs, a)
			}
			z.port[a] = port
		}
		out[zone] = z
	}
	return out, nil
}

// find returns the closest forward zone at or above name (lower case,
// FQDN), or nil.
func (f forwardZones) find(name string) *forwardZone {
	if len(f) == 0 {
		return nil
	}
	for off, end := 0, false; !end; off, end = dns.NextLabel(name, off) {
		if z, ok := f[name[off:]]; ok {
			return z
		}
	}
	return f["."]
}
