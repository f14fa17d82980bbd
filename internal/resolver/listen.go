package resolver

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// listen binds every address of dns.listen: UDPSockets SO_REUSEPORT UDP
// sockets (the first picks the port when the config says 0) and one TCP
// listener on the same port.
func (r *Resolver) listen() error {
	slow := make(chan struct{}, maxSlowInFlight)
	for _, ap := range r.cfg.Listen {
		port := ap.Port()
		for i := range r.cfg.UDPSockets {
			lc := net.ListenConfig{Control: reusePort}
			pc, err := lc.ListenPacket(context.Background(), "udp", netip.AddrPortFrom(ap.Addr(), port).String())
			if err != nil {
				return fmt.Errorf("dns.listen %s (udp socket %d): %w", ap, i+1, err)
			}
			conn := pc.(*net.UDPConn)
			bound := conn.LocalAddr().(*net.UDPAddr).AddrPort()
			port = bound.Port()
			r.udp = append(r.udp, &udpSocket{conn: conn, addr: netip.AddrPortFrom(ap.Addr(), port),
				reader: r.packets.NewReader(), shard: r.stats.Shard(uint(r.shardSeq.Add(1))), slow: slow})
		}
		ln, err := net.Listen("tcp", netip.AddrPortFrom(ap.Addr(), port).String())
		if err != nil {
			return fmt.Errorf("dns.listen %s (tcp): %w", ap, err)
		}
		shard := r.stats.Shard(uint(r.shardSeq.Add(1)))
		r.tcp = append(r.tcp, newTCPServer(r, netip.AddrPortFrom(ap.Addr(), port),
			&limitListener{Listener: ln, max: int64(r.cfg.TCPMaxConnections), shard: shard, allowed: r.allowed}, shard))
	}
	return nil
}
