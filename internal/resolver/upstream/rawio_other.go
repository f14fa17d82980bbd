//go:build !linux

package upstream

import "net"

// rawIO is the socket's own Read and Write where rawio_linux.go's raw
// system calls are not built.
type rawIO struct{ conn *net.UDPConn }

func (io *rawIO) init(conn *net.UDPConn) error {
	io.conn = conn
	return nil
}

func (io *rawIO) write(b []byte) error {
	_, err := io.conn.Write(b)
	return err
}

func (io *rawIO) read(b []byte) (int, error) { return io.conn.Read(b) }
