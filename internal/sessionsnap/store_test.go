package sessionsnap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
)

// TestPutOpenSlowReader: a snapshot written to a real object store reads
// back record for record with its metadata, also when the reader takes
// longer than nats.go's default API timeout (5 s) to get through it: a
// node reading gigabytes does. Before the read was given a deadline of
// its own (readBound) it failed then
// with "nats: timeout".
func TestPutOpenSlowReader(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the slow reader waits 6 s on purpose; CI runs it (.ci/run lists it among the tests that must not skip)")
	}
	bus := natstest.Start(t)
	ctx := context.Background()
	if _, err := Open(ctx, bus.JS, "sessions"); !errors.Is(err, ErrNone) {
		t.Fatalf("no object store yet: %v, want ErrNone", err)
	}
	meta := Meta{Sequence: 42, StreamCreated: time.Unix(1_700_000_000, 5).UTC(), Taken: time.Unix(1_700_000_100, 0).UTC(), ValidFor: 24 * time.Hour}
	const n = 3000 // several chunks of the object
	if _, err := Put(ctx, bus.JS, "sessions", 1, meta, func(w *Writer) error {
		for i := range n {
			if err := w.Add(fmt.Sprintf("id-%d", i), []byte(fmt.Sprintf("value %d %0400d", i, i))); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	snap, err := Open(ctx, bus.JS, "sessions")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = snap.Close() }()
	if snap.Meta != meta {
		t.Fatalf("meta %+v, want %+v", snap.Meta, meta)
	}
	for i := 0; ; i++ {
		k, v, err := snap.Next()
		if errors.Is(err, io.EOF) {
			if i != n {
				t.Fatalf("%d records, want %d", i, n)
			}
			return
		}
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if want := fmt.Sprintf("id-%d", i); k != want || string(v) != fmt.Sprintf("value %d %0400d", i, i) {
			t.Fatalf("record %d: %q", i, k)
		}
		if i == 10 {
			time.Sleep(6 * time.Second)
		}
	}
}

// TestReadBound: a snapshot's read may take 10 s plus a second per 2 MiB:
// a small one is given up on within seconds (a replaced snapshot's read
// never ends otherwise), 10 million sessions (2.6 GiB) get over twenty
// minutes, far more than a node needs.
func TestReadBound(t *testing.T) {
	if got := readBound(0); got != 11*time.Second {
		t.Fatalf("readBound(0) = %v, want 11s", got)
	}
	if got := readBound(1 << 20); got != 11*time.Second {
		t.Fatalf("readBound(1 MiB) = %v, want 11s", got)
	}
	big := uint64(26) << 30 / 10 // 2.6 GiB
	if got := readBound(big); got < 20*time.Minute || got > 25*time.Minute {
		t.Fatalf("readBound(2.6 GiB) = %v, want 20–25 min", got)
	}
}
