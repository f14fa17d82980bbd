package ipmapper

import (
	"net/netip"

	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
)

// The reads the IP Mapper makes on an index snapshot, each returning nil or
// an empty list when nothing matches.

func indexGet(ix *sessionindex.Index, id string) *session.Session {
	s, _ := ix.Get(id)
	return s
}

func indexLookupIP(ix *sessionindex.Index, ip netip.Addr) *session.Session {
	s, _ := ix.LookupIP(ip)
	return s
}

func indexByOrg(ix *sessionindex.Index, org string) []*session.Session {
	return ix.ByOrg(org)
}

func indexByUsername(ix *sessionindex.Index, username string) []*session.Session {
	return ix.ByUsername(username)
}

func indexByDeviceID(ix *sessionindex.Index, deviceID string) []*session.Session {
	return ix.ByDeviceID(deviceID)
}
