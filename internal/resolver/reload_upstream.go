package resolver

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// SetForwarders replaces the forwarders and the forwarder strategy of a
// running resolver (a configuration reload): validated first, then swapped
// at once. Queries already asking the old forwarders finish with them; the
// next ones use the new set. A forwarder kept across the swap keeps its
// health, counters and idle sockets. On an error (no forwarder, more than
// upstream.MaxForwarders, a duplicate, an address that is not unicast
// ip:port, an unknown strategy) the resolver keeps the old set; the error
// names the `forwarders` key.
func (r *Resolver) SetForwarders(fw []netip.AddrPort, strategy upstream.Strategy) error {
	if r.up == nil {
		return errors.New("forwarders: the resolver runs in recursive mode (a mode change needs a restart)")
	}
	if err := r.up.SetForwarders(fw, strategy); err != nil {
		return fmt.Errorf("forwarders: %w; the previous forwarders stay in use", err)
	}
	r.log.Info("forwarders set", "forwarders", fw, "strategy", strategy.String())
	return nil
}

// Forwarders reports the current forwarders' health and counts, in the
// configured order, and the strategy: what the node's /health shows.
func (r *Resolver) Forwarders() ([]upstream.ForwarderStatus, upstream.Strategy) {
	if r.up == nil {
		return nil, 0
	}
	return r.up.Status()
}
