package app

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"

	"github.com/svc-pf/svc-pf/internal/node"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

// allowFromSetter is the resolver's swap of allow_from.
type allowFromSetter interface {
	SetAllowFrom([]netip.Prefix)
}

// resolverReload is what a reload may change in a running resolver and its
// node; get picks the resolver's section and the node's keys out of a
// command's config, at the keys that command names them.
type resolverReload[C any] struct {
	res  *Resolver
	node *node.Node
	// get returns the resolver's section and the node's rpz and feeds
	// lists.
	get func(C) (ResolverConfig, []rpz.ZoneConfig, []feeds.FeedConfig)
	// prefix is the resolver section's key ("" for svc-pf resolver,
	// "resolver." under svc-pf all).
	prefix string
}

// registerResolverReload registers what a reload may change in `svc-pf
// resolver`.
func registerResolverReload(rl *Reloader[ResolverConfig], res *Resolver, n *node.Node) {
	rr := resolverReload[ResolverConfig]{res: res, node: n,
		get: func(c ResolverConfig) (ResolverConfig, []rpz.ZoneConfig, []feeds.FeedConfig) {
			return c, c.RPZ, c.Feeds
		}}
	for _, s := range rr.steps() {
		rl.Register(s)
	}
}

// registerAllReload registers what a reload may change in `svc-pf all`:
// the resolver section's keys and the node's (top level).
func registerAllReload(rl *Reloader[AllConfig], a *All) {
	rr := resolverReload[AllConfig]{res: a.Resolver, node: a.Node.Models, prefix: "resolver.",
		get: func(c AllConfig) (ResolverConfig, []rpz.ZoneConfig, []feeds.FeedConfig) {
			return c.Resolver, c.RPZ, c.Feeds
		}}
	for _, s := range rr.steps() {
		rl.Register(s)
	}
}

// registerSimulatorReload registers what a reload may change in `svc-pf
// simulator`: its node's rpz and feeds, swapped as the resolver's are (a
// simulation must see the zones and feeds the file names, or it would
// answer for a policy no resolver applies).
func registerSimulatorReload(rl *Reloader[SimulatorConfig], n *node.Node) {
	rl.Register(nodeListStep("rpz", func(c SimulatorConfig) []rpz.ZoneConfig { return c.RPZ }, n.PrepareRPZ, zoneNames))
	rl.Register(nodeListStep("feeds", func(c SimulatorConfig) []feeds.FeedConfig { return c.Feeds }, n.PrepareFeeds, feedNames))
}

// steps are the reload's steps.
func (rr resolverReload[C]) steps() []ReloadStep[C] {
	return []ReloadStep[C]{rr.modeStep(), rr.forwardersStep(), rr.allowFromStep(), rr.rpzStep(), rr.feedsStep()}
}

// modeStep refuses a reload that changes mode: the forwarder client and
// the recursor are built at start, with their caches and statistics, and
// swapping one for the other under running queries is not worth its risk.
// The recursor's own keys (dnssec, root_hints_file, …) are named in the
// restart warning like any key no step applies.
func (rr resolverReload[C]) modeStep() ReloadStep[C] {
	key := rr.prefix + "mode"
	return ReloadStep[C]{Keys: []string{key}, Prepare: func(old, new C) (string, func() error, error) {
		o, n := rr.modeOf(old), rr.modeOf(new)
		if o != n {
			return "", nil, fmt.Errorf("%s: %s → %s needs a restart; the reload is refused", key, o, n)
		}
		return key + " unchanged", nil, nil
	}}
}

// modeOf is c's mode, forward when it does not parse (parse says why).
func (rr resolverReload[C]) modeOf(c C) resolver.Mode {
	rc, _, _ := rr.get(c)
	m, _ := resolver.ParseMode(rc.Mode)
	return m
}

func (rr resolverReload[C]) settings(c C) (resolverSettings, error) {
	rc, _, _ := rr.get(c)
	return rc.parse()
}

// forwardersStep applies forwarders, forwarder_strategy and, in forward
// mode, forward_zones: one step, so that the resolver checks them all
// before it swaps any (SetUpstream). In recursive mode forward_zones belong
// to the recursor, built at start: a change there is named for a restart.
func (rr resolverReload[C]) forwardersStep() ReloadStep[C] {
	key, skey, zkey := rr.prefix+"forwarders", rr.prefix+"forwarder_strategy", rr.prefix+"forward_zones"
	keys := []string{key, skey}
	if rr.res.DNS.Mode() == resolver.ModeForward {
		keys = append(keys, zkey)
	}
	return ReloadStep[C]{Keys: keys, MayFail: true, Prepare: func(old, new C) (string, func() error, error) {
		o, err := rr.settings(old)
		if err != nil {
			return "", nil, err
		}
		n, err := rr.settings(new)
		if err != nil {
			return "", nil, err
		}
		if n.mode == resolver.ModeRecursive {
			return key + " unused in recursive mode", nil, nil
		}
		sameZones := reflect.DeepEqual(o.forwardZones, n.forwardZones) || len(o.forwardZones) == 0 && len(n.forwardZones) == 0
		if slices.Equal(o.forwarders, n.forwarders) && o.strategy == n.strategy && sameZones {
			return key + " unchanged", nil, nil
		}
		change := fmt.Sprintf("%s %v → %v", key, o.forwarders, n.forwarders)
		if o.strategy != n.strategy {
			change += fmt.Sprintf("; %s %s → %s", skey, o.strategy, n.strategy)
		}
		if !sameZones {
			change += fmt.Sprintf("; %s %v → %v", zkey, zoneList(o.forwardZones), zoneList(n.forwardZones))
		}
		return change, func() error { return rr.res.DNS.SetUpstream(n.forwarders, n.strategy, n.forwardZones) }, nil
	}}
}

func (rr resolverReload[C]) allowFromStep() ReloadStep[C] {
	key := rr.prefix + "allow_from"
	return ReloadStep[C]{Keys: []string{key}, Prepare: func(old, new C) (string, func() error, error) {
		o, err := rr.settings(old)
		if err != nil {
			return "", nil, err
		}
		n, err := rr.settings(new)
		if err != nil {
			return "", nil, err
		}
		if slices.Equal(o.allowFrom, n.allowFrom) {
			return key + " unchanged", nil, nil
		}
		var set allowFromSetter = rr.res.DNS
		return fmt.Sprintf("%s %s → %s", key, prefixesOrDefault(o.allowFrom), prefixesOrDefault(n.allowFrom)),
			func() error { set.SetAllowFrom(n.allowFrom); return nil }, nil
	}}
}

func prefixesOrDefault(p []netip.Prefix) string {
	if p == nil {
		return "[default: loopback and private ranges]"
	}
	return fmt.Sprint(p)
}

func (rr resolverReload[C]) rpzStep() ReloadStep[C] {
	return nodeListStep("rpz", func(c C) []rpz.ZoneConfig { _, z, _ := rr.get(c); return z },
		rr.node.PrepareRPZ, zoneNames)
}

// nodeListStep is the step of a list the node swaps as a whole (its RPZ
// zones, its feeds): unchanged, or prepared by the node and named old → new.
func nodeListStep[C, T any](key string, list func(C) []T, prepare func([]T) (func(), error), names func([]T) []string) ReloadStep[C] {
	return ReloadStep[C]{Keys: []string{key}, Prepare: func(old, new C) (string, func() error, error) {
		o, n := list(old), list(new)
		if len(o) == 0 && len(n) == 0 || reflect.DeepEqual(o, n) { // nil and [] alike
			return key + " unchanged", nil, nil
		}
		commit, err := prepare(n)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("%s %s → %s", key, names(o), names(n)), func() error { commit(); return nil }, nil
	}}
}

func zoneNames(zs []rpz.ZoneConfig) []string {
	out := make([]string, len(zs))
	for i, z := range zs {
		out[i] = z.Name + "=" + z.File
	}
	return out
}

func (rr resolverReload[C]) feedsStep() ReloadStep[C] {
	return nodeListStep("feeds", func(c C) []feeds.FeedConfig { _, _, f := rr.get(c); return f },
		rr.node.PrepareFeeds, feedNames)
}

func feedNames(fs []feeds.FeedConfig) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Name + "=" + redactURL(f.URL)
	}
	return out
}
