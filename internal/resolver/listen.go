package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// portAttempts bounds the retries of a kernel-chosen port (dns.listen with
// port 0, as tests use): the UDP port the kernel picks may be taken for
// TCP by another process.
const portAttempts = 20

// listen binds every address of dns.listen: UDPSockets SO_REUSEPORT UDP
// sockets and one TCP listener on the same port.
func (r *Resolver) listen() error {
	for _, ap := range r.cfg.Listen {
		var err error
		for range portAttempts {
			if err = r.listenOn(ap); err == nil || ap.Port() != 0 || !errors.Is(err, syscall.EADDRINUSE) {
				break
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// listenOn binds one address. UDP comes first: with port 0 the kernel then
// picks a port no UDP socket uses, so the SO_REUSEPORT sockets that follow
// join only our own group (binding TCP first could land the UDP sockets in
// another process's group, which would receive part of our queries). On
// an error everything bound here is closed again.
func (r *Resolver) listenOn(ap netip.AddrPort) error {
	port := ap.Port()
	var socks []*udpSocket
	fail := func(err error) error {
		for _, s := range socks {
			s.close()
		}
		return err
	}
	for i := range r.cfg.UDPSockets {
		lc := net.ListenConfig{Control: reusePort}
		pc, err := lc.ListenPacket(context.Background(), "udp", netip.AddrPortFrom(ap.Addr(), port).String())
		if err != nil {
			return fail(fmt.Errorf("dns.listen %s (udp socket %d): %w", ap, i+1, err))
		}
		conn := pc.(*net.UDPConn)
		port = conn.LocalAddr().(*net.UDPAddr).AddrPort().Port()
		sock, err := newUDPSocket(conn, netip.AddrPortFrom(ap.Addr(), port), r.packets.NewReader(),
			r.stats.Shard(uint(r.shardSeq.Add(1))), r.cfg.UDPBatch)
		if err != nil {
			_ = conn.Close()
			return fail(fmt.Errorf("dns.listen %s (udp socket %d): %w", ap, i+1, err))
		}
		socks = append(socks, sock)
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ap.Addr(), port).String())
	if err != nil {
		return fail(fmt.Errorf("dns.listen %s (tcp port %d): %w", ap, port, err))
	}
	r.udp = append(r.udp, socks...)
	shard := r.stats.Shard(uint(r.shardSeq.Add(1)))
	r.tcp = append(r.tcp, newTCPServer(r, netip.AddrPortFrom(ap.Addr(), port),
		&limitListener{Listener: ln, max: int64(r.cfg.TCPMaxConnections), shard: shard, allowed: r.allowed}, shard))
	return nil
}
