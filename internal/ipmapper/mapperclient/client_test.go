package mapperclient

import (
	"testing"
)

func TestNewClientChecks(t *testing.T) {
	if _, err := NewClient(ClientConfig{}); err == nil {
		t.Error("NewClient without Conn accepted")
	}
}

// FuzzPack checks the client's request splitting: every item in exactly one
// chunk, in order, and no chunk over budget unless it is one oversized item.
func FuzzPack(f *testing.F) {
	f.Add([]byte{3, 10, 200, 1, 50}, 64)
	f.Add([]byte{}, 1)
	f.Fuzz(func(t *testing.T, sizes []byte, budget int) {
		if budget < 1 || budget > 1<<16 {
			return
		}
		items := make([][]byte, len(sizes))
		for i, n := range sizes {
			items[i] = make([]byte, n)
		}
		next := 0
		for _, ch := range pack(items, budget) {
			if ch.start != next || ch.end <= ch.start {
				t.Fatalf("chunk %+v after %d", ch, next)
			}
			next = ch.end
			size := ch.end - ch.start - 1
			for _, it := range items[ch.start:ch.end] {
				size += len(it)
			}
			if ch.tooBig != (size > budget) || (ch.tooBig && ch.end-ch.start != 1) {
				t.Fatalf("chunk %+v of %d bytes, budget %d", ch, size, budget)
			}
		}
		if next != len(items) {
			t.Fatalf("chunks cover %d of %d items", next, len(items))
		}
	})
}
