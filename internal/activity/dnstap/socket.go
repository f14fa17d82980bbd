package dnstap

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Socket is where the dnstap reader listens: a Unix stream socket or a
// TCP address.
type Socket struct {
	// Network is "unix" or "tcp".
	Network string
	// Address is the socket's absolute path, or "host:port".
	Address string
}

// maxUnixPath is the longest path a Unix socket address holds on Linux
// (sun_path's 108 bytes, less the terminating NUL).
const maxUnixPath = 107

// ParseSocket reads activity.dnstap.socket: "unix:/path" or
// "tcp:host:port" (an IPv6 host in brackets).
func ParseSocket(s string) (Socket, error) {
	network, addr, ok := strings.Cut(s, ":")
	switch {
	case !ok || (network != "unix" && network != "tcp"):
		return Socket{}, fmt.Errorf("dnstap socket %q: want unix:/absolute/path or tcp:host:port", s)
	case network == "unix":
		if !strings.HasPrefix(addr, "/") || strings.ContainsRune(addr, 0) {
			return Socket{}, fmt.Errorf("dnstap socket %q: want unix: followed by an absolute path (unix:/run/dnstap.sock)", s)
		}
		if len(addr) > maxUnixPath {
			return Socket{}, fmt.Errorf("dnstap socket %q: a Unix socket's path has at most %d bytes; choose a shorter one", s, maxUnixPath)
		}
	default:
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return Socket{}, fmt.Errorf("dnstap socket %q: want tcp:host:port (tcp:127.0.0.1:6000, tcp:[::1]:6000): %v", s, err)
		}
		if host == "" || strings.ContainsAny(host, " \t\r\n/\x00") {
			return Socket{}, fmt.Errorf("dnstap socket %q: want a host name or address before the port", s)
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 || strconv.FormatUint(p, 10) != port {
			return Socket{}, fmt.Errorf("dnstap socket %q: port %q: want a number 1…65535", s, port)
		}
	}
	return Socket{Network: network, Address: addr}, nil
}

// String is the socket as the configuration spells it.
func (s Socket) String() string { return s.Network + ":" + s.Address }
