//go:build !linux

package resolver

import (
	"net"
	"net/netip"
)

// batchIO reads and writes one datagram per system call where there is
// no recvmmsg/sendmmsg.
type batchIO struct{ conn *net.UDPConn }

func (io *batchIO) init(conn *net.UDPConn, _ *udpBatch) error {
	io.conn = conn
	return nil
}

// read receives one datagram.
func (io *batchIO) read(b *udpBatch) (int, error) {
	n, from, err := io.conn.ReadFromUDPAddrPort(b.in[0])
	if err != nil {
		return 0, err
	}
	b.size[0], b.from[0] = n, from
	return 1, nil
}

// write sends the reply at start.
func (io *batchIO) write(b *udpBatch, start int) (int, error) {
	if _, err := io.conn.WriteToUDPAddrPort(b.out[start], b.from[b.to[start]]); err != nil {
		return 0, err
	}
	return 1, nil
}

// replySender writes a slow-path reply with the socket's WriteToUDPAddrPort
// where udp_linux.go's raw sendto is not built.
type replySender struct{}

func (w *replySender) init() {}

func (w *replySender) send(s *udpSocket, wire []byte, to netip.AddrPort) error {
	_, err := s.conn.WriteToUDPAddrPort(wire, to)
	return err
}
