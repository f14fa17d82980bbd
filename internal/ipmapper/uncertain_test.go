package ipmapper

import (
	"encoding/json"
	"errors"
	"net/netip"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/session"
)

// TestCleanAfterUnreadableFailedWrite: a write that failed here but landed
// in the bucket, and that the reconcile could not read back because the
// bus was away, is read back before the next command, so that a clean by
// organisation removes it from the bucket too (found by
// TestNATSClusterNodeLossDuringWrites in internal/app: the sessions of a
// deleted organisation stayed on every node). Without retryUncertain the
// clean selects from the table alone and leaves the key in the bucket.
func TestCleanAfterUnreadableFailedWrite(t *testing.T) {
	ctx := ctxT(t)
	f := startFixture(t, nil)
	if _, err := f.client.SetSession(ctx, session.Session{ID: "kept", Org: "acme"}, 0); err != nil {
		t.Fatal(err)
	}
	// The write whose ack was lost: in the bucket, not in the table.
	landed := session.Session{ID: "landed", Org: "acme", Attributes: identity.Attributes{Username: "late"},
		Allocations: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/28")}, UpdatedAt: f.clock.Now()}
	b, err := json.Marshal(landed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kvOf(t, f.bus.nc).Put(ctx, "landed", b); err != nil {
		t.Fatal(err)
	}

	// Its reconcile runs while NATS is away: the read fails.
	reconcileDuringOutage(t, f, "landed")
	var removed int
	eventually(t, "clean-sessions to answer after the NATS restart", func() bool {
		removed, err = f.client.CleanSessions(ctx, mapperclient.CleanRequest{Org: "acme", All: true})
		return err == nil
	})
	if removed != 2 {
		t.Errorf("clean of acme removed %d sessions, want 2 (kept and landed)", removed)
	}
	for _, id := range []string{"kept", "landed"} {
		if _, err := kvOf(t, f.bus.nc).Get(ctx, id); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s still in the bucket after the clean of its organisation: %v", id, err)
		}
	}
	f.svc.mu.Lock()
	uncertain := len(f.svc.store.uncertain)
	f.svc.mu.Unlock()
	if uncertain != 0 {
		t.Errorf("%d keys still uncertain after a command read them back", uncertain)
	}
}

// TestUndoFailedWriteNotFound: a key whose write failed, that the table
// does not hold and that the bucket does not show, is deleted in the
// bucket: over a NATS cluster such a write can still land after the read
// (a new stream leader commits it), and the delete, ordered after it,
// keeps every node from serving a session no clean would select. When the
// delete cannot be made (NATS away), the key stays uncertain and the next
// sweep, with no command in between, reads it and deletes it.
func TestUndoFailedWriteNotFound(t *testing.T) {
	ctx := ctxT(t)
	f := startFixture(t, nil)
	lastOp := func(id string) jetstream.KeyValueOp {
		t.Helper()
		h, err := kvOf(t, f.bus.nc).History(ctx, id)
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		return h[len(h)-1].Operation()
	}
	f.svc.mu.Lock()
	f.svc.reconcile([]string{"ghost"})
	f.svc.mu.Unlock()
	if op := lastOp("ghost"); op != jetstream.KeyValueDelete {
		t.Errorf("ghost: last operation %v, want a delete", op)
	}

	reconcileDuringOutage(t, f, "ghost2")
	eventually(t, "the client to reconnect", func() bool { return f.bus.nc.IsConnected() })
	eventually(t, "a sweep to undo ghost2", func() bool {
		f.svc.sweepTick()
		f.svc.mu.Lock()
		defer f.svc.mu.Unlock()
		return len(f.svc.store.uncertain) == 0
	})
	if op := lastOp("ghost2"); op != jetstream.KeyValueDelete {
		t.Errorf("ghost2: last operation %v, want a delete", op)
	}
}

// reconcileDuringOutage stops the fixture's NATS server, reconciles id
// while the client is away (its read fails, so it must be kept uncertain),
// and starts the server again on the same port and store.
func reconcileDuringOutage(t *testing.T, f *fixture, id string) {
	t.Helper()
	port := f.bus.srv.Port()
	f.bus.srv.Shutdown()
	eventually(t, "the client to notice the outage", func() bool { return !f.bus.nc.IsConnected() })
	f.svc.mu.Lock()
	f.svc.reconcile([]string{id})
	uncertain := len(f.svc.store.uncertain)
	f.svc.mu.Unlock()
	if uncertain != 1 {
		t.Fatalf("%d uncertain keys after a reconcile without NATS, want 1", uncertain)
	}
	srv, err := natsbusRestart(f.bus.dir, port)
	if err != nil {
		t.Fatal(err)
	}
	f.bus.srv = srv
}
