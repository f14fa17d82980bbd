package recursor_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
)

// hostileUDP is an authoritative server for ex.test. on a UDP socket that,
// before each real answer, sends the asking port an empty datagram and a
// forged answer (192.0.2.66) from another of its ports, and records the
// source port and ID of every query.
type hostileUDP struct {
	mu    sync.Mutex
	ports []uint16
	ids   []uint16
}

func startHostileUDP(t *testing.T) (*hostileUDP, netip.AddrPort) {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	forger, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close(); forger.Close() })
	h := &hostileUDP{}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			req := new(dns.Msg)
			if req.Unpack(buf[:n]) != nil || len(req.Question) != 1 {
				continue
			}
			h.mu.Lock()
			h.ports = append(h.ports, from.Port())
			h.ids = append(h.ids, req.Id)
			h.mu.Unlock()
			answer := func(ip string) []byte {
				m := new(dns.Msg)
				m.SetReply(req)
				m.Authoritative = true
				rr, _ := dns.NewRR(fmt.Sprintf("%s 300 IN A %s", req.Question[0].Name, ip))
				m.Answer = []dns.RR{rr}
				b, _ := m.Pack()
				return b
			}
			_, _ = pc.WriteToUDPAddrPort(nil, from)
			_, _ = forger.WriteToUDPAddrPort(answer("192.0.2.66"), from)
			time.Sleep(5 * time.Millisecond) // the forgery first
			_, _ = pc.WriteToUDPAddrPort(answer("192.0.2.1"), from)
		}
	}()
	return h, netip.MustParseAddrPort(pc.LocalAddr().String())
}

// TestOutgoingUDP: each outgoing UDP query has a socket of its own, on a
// port the kernel picks at random (RFC 5452), with a random ID; an empty
// datagram does not end the wait for the answer, and an answer from
// another port than the server's never reaches the recursor (the socket
// is connected to the server).
func TestOutgoingUDP(t *testing.T) {
	t.Parallel()
	h, srv := startHostileUDP(t)
	r := newLabRecursor(t, "", func(c *recursor.Config) {
		c.ForwardZones = []recursor.ForwardZone{{Zone: "ex.test.", Servers: []netip.AddrPort{srv}}}
		c.Timeout = 2 * time.Second
	})
	const n = 40
	for i := range n {
		name := fmt.Sprintf("n%d.ex.test.", i)
		m, _, err := r.Resolve(context.Background(), question(name, dns.TypeA))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
			t.Fatalf("%s: answer %v, want the server's 192.0.2.1 (not the forgery from another port)", name, m.Answer)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ports) != n {
		t.Fatalf("%d queries reached the server, want %d", len(h.ports), n)
	}
	ports, ids := map[uint16]bool{}, map[uint16]bool{}
	for i := range h.ports {
		ports[h.ports[i]], ids[h.ids[i]] = true, true
	}
	// 40 draws from ~28 000 ephemeral ports (and 65 536 IDs): a repeat
	// or two may happen by chance, a run of them means reuse.
	if len(ports) < n-3 || len(ids) < n-3 {
		t.Errorf("%d distinct source ports and %d distinct IDs over %d queries: %v %v", len(ports), len(ids), n, h.ports, h.ids)
	}
}

// TestOutgoingUDPRefused: a server whose port is closed answers with ICMP
// port unreachable, and the recursor gives up on it at once rather than
// at its timeout (the connected socket reports the refusal).
func TestOutgoingUDPRefused(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	closed := netip.MustParseAddrPort(pc.LocalAddr().String())
	pc.Close()
	r := newLabRecursor(t, "", func(c *recursor.Config) {
		c.ForwardZones = []recursor.ForwardZone{{Zone: "ex.test.", Servers: []netip.AddrPort{closed}}}
		c.Timeout, c.MaxTime = 3*time.Second, 8*time.Second
	})
	start := time.Now()
	m, _, err := r.Resolve(context.Background(), question("www.ex.test.", dns.TypeA))
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a refusing server took %v (%v, %v); want well under the 3 s timeout", took, m, err)
	}
	if err == nil && m.Rcode != dns.RcodeServerFailure {
		t.Fatalf("answer %v from a closed port", m)
	}
}
