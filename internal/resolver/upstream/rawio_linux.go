//go:build linux

package upstream

import (
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawIO sends and receives a connected UDP socket's datagrams with raw
// system calls inside its RawConn's Read and Write: the socket is
// non-blocking, so a call returns at once, and the runtime's poller still
// waits (and honours the deadline) when nothing is there. net.Conn's Read
// and Write go through syscall.Syscall, whose bookkeeping of a call that
// might block (the P handed over, taken back) kept the runtime's sysmon
// thread waking to retake Ps: ~4 % of the CPU of a cache miss in
// bench/resolver.sh's miss phase, for the three calls a miss makes here.
// The functions RawConn calls are method values made once per socket, so
// a call allocates nothing; one query at a time uses a socket.
type rawIO struct {
	rc             syscall.RawConn
	readFn, sendFn func(fd uintptr) bool
	buf            []byte // the datagram to send, or the buffer to read into
	n              int
	errno          syscall.Errno
}

func (io *rawIO) init(conn *net.UDPConn) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	*io = rawIO{rc: rc}
	io.readFn, io.sendFn = io.recv, io.send
	return nil
}

// write sends b as one datagram.
func (io *rawIO) write(b []byte) error {
	io.buf = b
	err := io.rc.Write(io.sendFn)
	io.buf = nil
	if err != nil {
		return err
	}
	if io.errno != 0 {
		return io.errno
	}
	return nil
}

// read receives one datagram into b, cut at len(b), waiting until one
// comes or the deadline passes.
func (io *rawIO) read(b []byte) (int, error) {
	io.buf = b
	err := io.rc.Read(io.readFn)
	io.buf = nil
	if err != nil {
		return 0, err
	}
	if io.errno != 0 {
		return 0, io.errno
	}
	return io.n, nil
}

// send and recv are the functions RawConn.Write and Read call: one
// datagram system call on the connected socket, retried on EINTR; false
// (EAGAIN) lets the poller wait until the socket is ready.
func (io *rawIO) send(fd uintptr) bool { return io.rawCall(unix.SYS_SENDTO, fd) }
func (io *rawIO) recv(fd uintptr) bool { return io.rawCall(unix.SYS_RECVFROM, fd) }

func (io *rawIO) rawCall(trap, fd uintptr) bool {
	p := unsafe.Pointer(unsafe.SliceData(io.buf))
	r, _, e := unix.RawSyscall6(trap, fd, uintptr(p), uintptr(len(io.buf)), 0, 0, 0)
	for e == unix.EINTR {
		r, _, e = unix.RawSyscall6(trap, fd, uintptr(p), uintptr(len(io.buf)), 0, 0, 0)
	}
	if e == unix.EAGAIN {
		return false
	}
	io.n, io.errno = int(r), e
	return true
}
