//go:build linux

package resolver

import (
	"encoding/binary"
	"net/netip"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FuzzSockaddr: whatever the kernel's sockaddr bytes and length,
// sockaddrAddrPort does not panic, decodes an AF_INET or AF_INET6 address
// of full length to the address and port in it (a scope id as its
// numeric zone), and anything else to the invalid AddrPort.
func FuzzSockaddr(f *testing.F) {
	v4 := make([]byte, unix.SizeofSockaddrInet6)
	binary.NativeEndian.PutUint16(v4, unix.AF_INET)
	copy(v4[2:], []byte{0x14, 0xe9, 127, 0, 0, 1})
	f.Add(v4, uint32(unix.SizeofSockaddrInet4))
	v6 := make([]byte, unix.SizeofSockaddrInet6)
	binary.NativeEndian.PutUint16(v6, unix.AF_INET6)
	copy(v6[2:], []byte{0, 53})
	copy(v6[8:], netip.MustParseAddr("fe80::1").AsSlice())
	binary.NativeEndian.PutUint32(v6[24:], 2)
	f.Add(v6, uint32(unix.SizeofSockaddrInet6))
	f.Add(v6, uint32(12))
	f.Fuzz(func(t *testing.T, raw []byte, namelen uint32) {
		var sa unix.RawSockaddrInet6
		copy((*[unix.SizeofSockaddrInet6]byte)(unsafe.Pointer(&sa))[:], raw)
		b := (*[unix.SizeofSockaddrInet6]byte)(unsafe.Pointer(&sa))
		got := sockaddrAddrPort(&sa, namelen)
		port := binary.BigEndian.Uint16(b[2:])
		var want netip.AddrPort
		switch {
		case sa.Family == unix.AF_INET && namelen >= unix.SizeofSockaddrInet4:
			want = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port)
		case sa.Family == unix.AF_INET6 && namelen >= unix.SizeofSockaddrInet6:
			a := netip.AddrFrom16([16]byte(b[8:24]))
			if id := binary.NativeEndian.Uint32(b[24:]); id != 0 {
				a = a.WithZone(strconv.FormatUint(uint64(id), 10))
			}
			want = netip.AddrPortFrom(a, port)
		}
		if got != want {
			t.Fatalf("family %d, length %d: %v, want %v", sa.Family, namelen, got, want)
		}
		// The slow path's sender writes a decoded source back as the
		// reply's destination: the same address, port and scope.
		if got.IsValid() {
			var w replySender
			if !w.setAddr(got) {
				t.Fatalf("setAddr(%v) refused a decoded address", got)
			}
			if back := sockaddrAddrPort(&w.sa, w.salen); back != got {
				t.Fatalf("setAddr(%v) decodes to %v", got, back)
			}
		}
	})
}

// TestReplySenderAddrs: the slow path's sender encodes what it may meet
// (IPv4, IPv6, IPv4-mapped, a numeric zone) so that it decodes back the
// same, and leaves a zone that is not a number to WriteToUDPAddrPort.
func TestReplySenderAddrs(t *testing.T) {
	for _, s := range []string{"127.0.0.1:53", "[::1]:5353", "[::ffff:192.0.2.1]:1", "[fe80::1%2]:65535", "192.0.2.255:0"} {
		ap := netip.MustParseAddrPort(s)
		var w replySender
		if !w.setAddr(ap) {
			t.Fatalf("setAddr(%v) refused", ap)
		}
		if back := sockaddrAddrPort(&w.sa, w.salen); back != ap {
			t.Errorf("setAddr(%v) decodes to %v", ap, back)
		}
	}
	var w replySender
	if w.setAddr(netip.MustParseAddrPort("[fe80::1%eth0]:53")) {
		t.Error("setAddr took a zone that is not a number")
	}
	if w.setAddr(netip.AddrPort{}) {
		t.Error("setAddr took the invalid AddrPort")
	}
}
