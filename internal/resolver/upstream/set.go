package upstream

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Strategy is the order in which an Exchange asks the healthy forwarders.
type Strategy uint8

const (
	// StrategyFastest asks the forwarder with the smallest smoothed RTT
	// first (unmeasured ones in the configured order).
	StrategyFastest Strategy = iota
	// StrategyOrdered asks them in the configured order: the next only
	// when the one before failed or timed out.
	StrategyOrdered
)

// ParseStrategy reads `forwarder_strategy`: "fastest" (or "", the
// default) or "ordered".
func ParseStrategy(s string) (Strategy, error) {
	switch s {
	case "", "fastest":
		return StrategyFastest, nil
	case "ordered":
		return StrategyOrdered, nil
	}
	return 0, fmt.Errorf("%q is not a strategy: want fastest or ordered", s)
}

func (s Strategy) String() string {
	switch s {
	case StrategyFastest:
		return "fastest"
	case StrategyOrdered:
		return "ordered"
	}
	return fmt.Sprintf("Strategy(%d)", uint8(s))
}

// forwarderSet is what SetForwarders swaps: never modified once stored.
type forwarderSet struct {
	fwds     []*forwarder
	strategy Strategy
}

// newSet validates fws and s and builds a set, taking over from old the
// forwarders whose address stays (their health, counters and idle
// sockets).
func (c *Client) newSet(fws []netip.AddrPort, s Strategy, old *forwarderSet) (*forwarderSet, error) {
	switch {
	case len(fws) == 0:
		return nil, errors.New("upstream: no forwarders")
	case len(fws) > MaxForwarders:
		return nil, fmt.Errorf("upstream: %d forwarders, at most %d", len(fws), MaxForwarders)
	case s != StrategyFastest && s != StrategyOrdered:
		return nil, fmt.Errorf("upstream: unknown strategy %v", s)
	}
	kept := map[netip.AddrPort]*forwarder{}
	if old != nil {
		for _, f := range old.fwds {
			kept[f.addr] = f
		}
	}
	set := &forwarderSet{strategy: s}
	seen := make(map[netip.AddrPort]bool, len(fws))
	for i, ap := range fws {
		// A v4-mapped IPv6 address is the IPv4 forwarder it names: dialled
		// and counted as IPv4.
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		switch {
		case !ap.IsValid() || ap.Port() == 0:
			return nil, fmt.Errorf("upstream: forwarder %d: %q is not ip:port", i, fws[i])
		case ap.Addr().IsUnspecified() || ap.Addr().IsMulticast():
			return nil, fmt.Errorf("upstream: forwarder %d: %s is not a unicast address", i, ap)
		case ap.Addr().Zone() != "":
			return nil, fmt.Errorf("upstream: forwarder %d: %s has a zone", i, ap)
		case seen[ap]:
			return nil, fmt.Errorf("upstream: forwarder %s given twice", ap)
		}
		seen[ap] = true
		f := kept[ap]
		if f == nil {
			f = &forwarder{addr: ap, ipv6: ap.Addr().Is6(), c: c}
		}
		set.fwds = append(set.fwds, f)
	}
	return set, nil
}

// CheckForwarders tells whether New and SetForwarders would take fws and
// s (Config.Forwarders' rules, a known strategy), without a client: a
// caller changing several clients at once checks them all first.
func CheckForwarders(fws []netip.AddrPort, s Strategy) error {
	_, err := (*Client)(nil).newSet(fws, s, nil)
	return err
}

// SetForwarders replaces the forwarders and the strategy of a running
// client, all at once: an Exchange already started finishes with the set
// it began with, the next ones use the new set. A forwarder in both sets
// keeps its health, its counters and its idle sockets; one left out has
// its idle sockets closed (those in use are closed when their query
// ends). On an error (the rules of Config.Forwarders, an unknown
// strategy) nothing changes.
func (c *Client) SetForwarders(fws []netip.AddrPort, s Strategy) error {
	if c.closed.Load() {
		return ErrClosed
	}
	c.setMu.Lock()
	defer c.setMu.Unlock()
	old := c.set.Load()
	set, err := c.newSet(fws, s, old)
	if err != nil {
		return err
	}
	c.set.Store(set)
	in := make(map[*forwarder]bool, len(set.fwds))
	for _, f := range set.fwds {
		in[f] = true
	}
	for _, f := range old.fwds {
		if !in[f] {
			f.retire()
		}
	}
	return nil
}

// ForwarderStatus is one forwarder's health and counts, for metrics.
type ForwarderStatus struct {
	Addr netip.AddrPort
	// Up: its last attempt (or probe) got an answer; false from a failure
	// until a probe or a query gets one again.
	Up bool
	// SRTT is the smoothed round-trip time as the fastest strategy sees
	// it now (a timeout counts as the attempt timeout); 0 until measured.
	SRTT time.Duration
	// Answers, Failures and Timeouts count the attempts of client queries:
	// an answer accepted (a failure rcode is a failure), a failure (a
	// failure rcode, the network refusing), no answer in time. Probes
	// counts the background probes sent while it was down.
	Answers, Failures, Timeouts, Probes uint64
}

// Status reports every current forwarder, in the configured order, and
// the strategy.
func (c *Client) Status() ([]ForwarderStatus, Strategy) {
	set := c.set.Load()
	now := time.Now()
	out := make([]ForwarderStatus, 0, len(set.fwds))
	for _, f := range set.fwds {
		f.mu.Lock()
		st := ForwarderStatus{Addr: f.addr, Up: f.fails == 0, SRTT: f.decayedSRTT(now)}
		f.mu.Unlock()
		st.Answers, st.Failures, st.Timeouts, st.Probes = f.answers.Load(), f.failures.Load(), f.timeouts.Load(), f.probes.Load()
		out = append(out, st)
	}
	return out, set.strategy
}

// Probing. A forwarder that failed rests (forwarder.failed); while it is
// down, no client query goes to it before the healthy ones, and a probe
// (". NS", over UDP, one at a time) is sent when its rest is over: an
// answer of any kind but a failure rcode brings it back, else it rests
// longer (1 s doubling to 30 s). So a black-holed forwarder costs a client
// query one attempt timeout once, when it starts failing, and then only
// the probes' own waiting, which no client sees.

// scheduleProbe arms f's probe for when its rest is over. f.mu is held.
func (f *forwarder) scheduleProbe(now time.Time) {
	if f.c == nil || f.probing || f.retired {
		return
	}
	f.probing = true
	f.probeTimer = time.AfterFunc(f.restUntil.Sub(now), func() { f.c.probe(f) })
}

// probe asks f whether it answers again.
func (c *Client) probe(f *forwarder) {
	f.mu.Lock()
	skip := f.retired || f.fails == 0 || c.closed.Load()
	f.mu.Unlock()
	var rtt time.Duration
	ok := false
	if !skip {
		f.probes.Add(1)
		rtt, ok = c.probeOnce(f)
	}
	now := time.Now()
	f.mu.Lock()
	f.probing = false
	f.mu.Unlock()
	switch {
	case skip:
	case ok:
		f.revive(now, rtt)
	default:
		f.failed(now, c.timeout) // rests longer, and arms the next probe
	}
}

// probeOnce sends one ". NS" query to f from a socket of its own and waits
// up to the attempt timeout for an answer with its id and question.
func (c *Client) probeOnce(f *forwarder) (time.Duration, bool) {
	q := new(dns.Msg)
	q.SetQuestion(".", dns.TypeNS)
	if c.probeName != "" {
		q.SetQuestion(c.probeName, dns.TypeSOA)
	}
	q.RecursionDesired = !c.auth
	var id [2]byte
	_, _ = rand.Read(id[:])
	q.Id = binary.BigEndian.Uint16(id[:])
	wire, err := q.Pack()
	if err != nil {
		return 0, false
	}
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(f.addr))
	if err != nil {
		return 0, false
	}
	defer conn.Close()
	sent := time.Now()
	_ = conn.SetDeadline(sent.Add(c.timeout))
	if _, err := conn.Write(wire); err != nil {
		return 0, false
	}
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return 0, false
		}
		var m dns.Msg
		if m.Unpack(buf[:n]) != nil || !m.Response || m.Id != q.Id || len(m.Question) != 1 ||
			!strings.EqualFold(m.Question[0].Name, q.Question[0].Name) || m.Question[0].Qtype != q.Question[0].Qtype {
			continue
		}
		return time.Since(sent), !isForwarderFailure(m.Rcode)
	}
}

// retire takes f out of service: no more probes, idle sockets closed.
func (f *forwarder) retire() {
	f.mu.Lock()
	f.retired = true
	if f.probeTimer != nil && f.probeTimer.Stop() {
		f.probing = false
	}
	f.mu.Unlock()
	f.udp.close()
	f.tcp.close()
}
