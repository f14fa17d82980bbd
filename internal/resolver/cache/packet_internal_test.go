package cache

import (
	"testing"
	"unsafe"
)

// A cold hit reads the entry's one cache line; keep it one line.
func TestPacketEntryFitsACacheLine(t *testing.T) {
	if n := unsafe.Sizeof(packetEntry{}); n > 64 {
		t.Errorf("packetEntry is %d bytes", n)
	}
}
