//go:build linux

package resolver

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batchIO is recvmmsg/sendmmsg on a socket with their message headers,
// iovecs and source addresses prepared once, pointing at the batch's
// buffers: a call fills in lengths only, allocates nothing, and a source
// address is decoded straight from its sockaddr. A reply's header points
// at the sockaddr its query came from.
type batchIO struct {
	rc    syscall.RawConn
	rhdr  []unix.Mmsghdr
	riov  []unix.Iovec
	names []unix.RawSockaddrInet6 // large enough for either family
	whdr  []unix.Mmsghdr
	wiov  []unix.Iovec

	// The functions RawConn.Read and Write call, made once (method
	// values), and their results: a closure per call would escape, with
	// the variables it sets, and allocate three objects a call.
	recvFn, sendFn func(fd uintptr) bool
	m              int // messages to send
	n              int // the last call's result
	errno          syscall.Errno
}

func (io *batchIO) init(conn *net.UDPConn, b *udpBatch) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	n := len(b.in)
	*io = batchIO{rc: rc, rhdr: make([]unix.Mmsghdr, n), riov: make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n), whdr: make([]unix.Mmsghdr, n), wiov: make([]unix.Iovec, n)}
	io.recvFn, io.sendFn = io.recv, io.send
	for i := range n {
		io.riov[i].Base = &b.in[i][0]
		io.riov[i].SetLen(len(b.in[i]))
		h := &io.rhdr[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&io.names[i]))
		h.Iov = &io.riov[i]
		h.SetIovlen(1)
		h = &io.whdr[i].Hdr
		h.Iov = &io.wiov[i]
		h.SetIovlen(1)
	}
	return nil
}

// read receives up to len(b.in) datagrams, at least one (it waits in the
// runtime's poller, not in the kernel), and sets their sizes and sources.
func (io *batchIO) read(b *udpBatch) (int, error) {
	for i := range io.rhdr {
		io.rhdr[i].Hdr.Namelen = unix.SizeofSockaddrInet6 // the kernel writes the length it used
	}
	if err := io.rc.Read(io.recvFn); err != nil {
		return 0, err
	}
	if io.errno != 0 {
		return 0, io.errno
	}
	n := io.n
	for i := range n {
		b.size[i] = int(io.rhdr[i].Len)
		b.from[i] = sockaddrAddrPort(&io.names[i], io.rhdr[i].Hdr.Namelen)
	}
	return n, nil
}

// write sends b's replies from start on, as many as one sendmmsg takes; an
// error is the first reply's (the kernel reports a failure only when it
// sent none).
func (io *batchIO) write(b *udpBatch, start int) (int, error) {
	m := b.n - start
	for j := range m {
		reply, to := b.out[start+j], b.to[start+j]
		io.wiov[j].Base = unsafe.SliceData(reply)
		io.wiov[j].SetLen(len(reply))
		h := &io.whdr[j].Hdr
		h.Name, h.Namelen = io.rhdr[to].Hdr.Name, io.rhdr[to].Hdr.Namelen
	}
	io.m = m
	err := io.rc.Write(io.sendFn)
	for j := range m { // drop the references to the replies' buffers
		io.wiov[j].Base = nil
	}
	if err != nil {
		return 0, err
	}
	if io.errno != 0 {
		return 0, io.errno
	}
	return io.n, nil
}

// recv is one recvmmsg on fd; false (not done) when nothing is waiting.
// A raw system call: the socket is non-blocking, the call returns at once,
// and the runtime's bookkeeping of a blocking call (handing the P over,
// which keeps sysmon waking) would cost more than the call.
func (io *batchIO) recv(fd uintptr) bool {
	r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&io.rhdr[0])), uintptr(len(io.rhdr)), 0, 0, 0)
	for e == unix.EINTR {
		r, _, e = unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&io.rhdr[0])), uintptr(len(io.rhdr)), 0, 0, 0)
	}
	if e == unix.EAGAIN {
		return false // wait until readable
	}
	io.n, io.errno = int(r), e
	return true
}

// send is one sendmmsg of the first io.m prepared headers on fd.
func (io *batchIO) send(fd uintptr) bool {
	r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&io.whdr[0])), uintptr(io.m), 0, 0, 0)
	for e == unix.EINTR {
		r, _, e = unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&io.whdr[0])), uintptr(io.m), 0, 0, 0)
	}
	if e == unix.EAGAIN {
		return false // wait until writable
	}
	io.n, io.errno = int(r), e
	return true
}

// sockaddrAddrPort decodes a sockaddr_in or sockaddr_in6 as the kernel
// wrote it; an IPv6 scope id becomes a numeric zone (which
// net.UDPConn.WriteToUDPAddrPort turns back into the scope id). Anything
// else is the invalid AddrPort.
func sockaddrAddrPort(sa *unix.RawSockaddrInet6, namelen uint32) netip.AddrPort {
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	switch {
	case sa.Family == unix.AF_INET && namelen >= unix.SizeofSockaddrInet4:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
	case sa.Family == unix.AF_INET6 && namelen >= unix.SizeofSockaddrInet6:
		a := netip.AddrFrom16(sa.Addr)
		if sa.Scope_id != 0 {
			a = a.WithZone(strconv.FormatUint(uint64(sa.Scope_id), 10))
		}
		return netip.AddrPortFrom(a, port)
	}
	return netip.AddrPort{}
}

// replySender writes one slow-path reply with a raw sendto inside the
// socket's RawConn.Write, as batchIO does for the reader's replies:
// net.UDPConn.WriteToUDPAddrPort goes through syscall.Syscall6, whose
// bookkeeping of a call that might block kept the runtime's sysmon thread
// waking under a burst of misses. The destination's sockaddr and the
// function RawConn calls (a method value) are made once per sender; a
// sender is used by one goroutine at a time (Resolver.replyBufs).
type replySender struct {
	fn    func(fd uintptr) bool
	sa    unix.RawSockaddrInet6 // or a RawSockaddrInet4 in its first bytes
	salen uint32
	buf   []byte
	errno syscall.Errno
}

func (w *replySender) init() { w.fn = w.sendto }

// send writes wire to to from s's socket. An address that is not an IP
// one, or an IPv6 zone that is not a number (batchIO writes scope ids as
// numbers), takes the socket's WriteToUDPAddrPort.
func (w *replySender) send(s *udpSocket, wire []byte, to netip.AddrPort) error {
	if !w.setAddr(to) {
		_, err := s.conn.WriteToUDPAddrPort(wire, to)
		return err
	}
	w.buf = wire
	err := s.batch.io.rc.Write(w.fn)
	w.buf = nil
	if err != nil {
		return err
	}
	if w.errno != 0 {
		return w.errno
	}
	return nil
}

// setAddr writes to as a sockaddr_in (an IPv4 address: the family the
// socket's datagram came from, sockaddrAddrPort) or a sockaddr_in6.
func (w *replySender) setAddr(to netip.AddrPort) bool {
	a := to.Addr()
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], to.Port())
	switch {
	case a.Is4():
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&w.sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.As4()}
		*(*[2]byte)(unsafe.Pointer(&sa4.Port)) = port
		w.salen = unix.SizeofSockaddrInet4
	case a.Is6():
		var scope uint64
		if z := a.Zone(); z != "" {
			var err error
			if scope, err = strconv.ParseUint(z, 10, 32); err != nil {
				return false
			}
		}
		w.sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.As16(), Scope_id: uint32(scope)}
		*(*[2]byte)(unsafe.Pointer(&w.sa.Port)) = port
		w.salen = unix.SizeofSockaddrInet6
	default:
		return false
	}
	return true
}

func (w *replySender) sendto(fd uintptr) bool {
	p := unsafe.Pointer(unsafe.SliceData(w.buf))
	sa := uintptr(unsafe.Pointer(&w.sa))
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(p), uintptr(len(w.buf)), 0, sa, uintptr(w.salen))
	for e == unix.EINTR {
		_, _, e = unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(p), uintptr(len(w.buf)), 0, sa, uintptr(w.salen))
	}
	if e == unix.EAGAIN {
		return false // wait until writable
	}
	w.errno = e
	return true
}
