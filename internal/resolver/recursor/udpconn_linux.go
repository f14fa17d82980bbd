package recursor

import (
	"net"
	"net/netip"
	"os"
	"syscall"
)

// dialUDP opens the socket of one outgoing UDP query: a new socket
// connected to ap, so that the kernel picks a random ephemeral source port
// for this query alone (RFC 5452), drops datagrams from any other address
// and reports an ICMP refusal to the next read.
//
// It is net.DialUDP without what the net package adds for a long-lived
// connection: SO_BROADCAST, and the getsockname and getpeername calls that
// fill LocalAddr and RemoteAddr, nobody reads here. Each miss opens one of
// these; in bench/recursor.sh's miss-nx phase net.DialUDP and Close were
// 18 % of svc-pf's CPU (perf record of the process), a third of it in the
// net package's bookkeeping rather than in the kernel. The socket is
// non-blocking and *os.File puts it in the runtime's poller, so reads wait
// with a deadline as a net.Conn's do. A zoned (link-local) IPv6 address
// goes through net.DialUDP, which resolves the zone's name.
func dialUDP(ap netip.AddrPort) (udpConn, error) {
	a := ap.Addr()
	if a.Zone() != "" {
		return net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(ap))
	}
	var (
		family int
		sa     syscall.Sockaddr
	)
	if a.Is4() || a.Is4In6() {
		family, sa = syscall.AF_INET, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: a.Unmap().As4()}
	} else {
		family, sa = syscall.AF_INET6, &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_DGRAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, syscall.IPPROTO_UDP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	if err := syscall.Connect(fd, sa); err != nil {
		_ = syscall.Close(fd)
		return nil, os.NewSyscallError("connect", err)
	}
	// The name is only what the file's errors say; the callers' errors
	// name the server already, so it is not built for each query.
	return os.NewFile(uintptr(fd), "udp"), nil
}
