package cache

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

// A cold hit reads the entry's one cache line; keep it one line.
func TestPacketEntryFitsACacheLine(t *testing.T) {
	if n := unsafe.Sizeof(packetEntry{}); n > 64 {
		t.Errorf("packetEntry is %d bytes", n)
	}
}

// Append and SetBytes carry a key to another goroutine: the key rebuilt is
// the one appended, and finds what the original stored.
func TestPacketKeyAppendSetBytes(t *testing.T) {
	longName := bytes.Repeat([]byte{'a'}, dnswire.MaxNameLen)
	longFP := strings.Repeat("f", MaxFingerprintLen)
	for _, tc := range []struct {
		name []byte
		fp   string
	}{
		{[]byte("\x03www\x07example\x03com\x00"), "0123456789abcdef"},
		{[]byte{0}, ""},
		{longName, longFP},
	} {
		var k PacketKey
		if !k.Set(tc.name, 1, 1, KeyDO|KeyEDNS, tc.fp) {
			t.Fatalf("Set(%q, %q) refused", tc.name, tc.fp)
		}
		prefix := []byte("packet")
		b := k.Append(prefix)
		if !bytes.Equal(b[:len(prefix)], prefix) || !bytes.Equal(b[len(prefix):], k.bytes()) {
			t.Fatalf("Append wrote %q after %q, want the key %q", b[len(prefix):], prefix, k.bytes())
		}
		var back PacketKey
		if !back.SetBytes(b[len(prefix):]) {
			t.Fatalf("SetBytes(%q) refused a key Append wrote", b[len(prefix):])
		}
		if back != k {
			t.Fatalf("SetBytes rebuilt %q, want %q", back.bytes(), k.bytes())
		}
	}
	var unset PacketKey
	if b := unset.Append(nil); len(b) != 0 {
		t.Errorf("an unset key appended %q", b)
	}
}

func TestPacketKeySetBytesRefuses(t *testing.T) {
	for _, b := range [][]byte{
		nil,
		{0, 0, 1, 0, 1, 0},                // no name
		{0, 0, 1, 0, 1, 3, 'a', 'b', 'c'}, // the fingerprint takes every byte: no name
		{0, 0, 1, 0, 1, 9, 'a'},           // a fingerprint longer than the bytes
		append([]byte{0, 0, 1, 0, 1, MaxFingerprintLen + 1}, make([]byte, MaxFingerprintLen+2)...),
		append([]byte{0, 0, 1, 0, 1, 0}, make([]byte, dnswire.MaxNameLen+1)...),
	} {
		k := PacketKey{n: 3}
		if k.SetBytes(b) {
			t.Errorf("SetBytes(%q) accepted", b)
		}
		if k.n != 0 {
			t.Errorf("SetBytes(%q) left the key set", b)
		}
	}
}

// FuzzPacketKeySetBytes: SetBytes never panics, and what it accepts is a
// key Set could have built, which Append gives back unchanged.
func FuzzPacketKeySetBytes(f *testing.F) {
	var k PacketKey
	k.Set([]byte("\x03www\x07example\x03com\x00"), 28, 1, KeyCD, "0123456789abcdef")
	f.Add(k.Append(nil))
	f.Add([]byte{0, 0, 1, 0, 1, 0, 0})
	f.Add([]byte{0, 0, 1, 0, 1, 200, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var k PacketKey
		if !k.SetBytes(b) {
			return
		}
		if got := k.Append(nil); !bytes.Equal(got, b) {
			t.Fatalf("Append gave %q back for %q", got, b)
		}
		fp := string(b[keyHeaderLen : keyHeaderLen+int(b[5])])
		var set PacketKey
		if !set.Set(keyName(b), keyType(b), keyClass(b), keyFlags(b), fp) || set != k {
			t.Fatalf("SetBytes accepted %q, which Set does not build", b)
		}
	})
}
