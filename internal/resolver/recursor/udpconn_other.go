//go:build !linux

package recursor

import (
	"net"
	"net/netip"
)

// dialUDP opens the socket of one outgoing UDP query: a new socket
// connected to ap (a random ephemeral source port for this query alone;
// datagrams from other addresses dropped). Linux has a leaner version
// (udpconn_linux.go).
func dialUDP(ap netip.AddrPort) (udpConn, error) {
	return net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(ap))
}
