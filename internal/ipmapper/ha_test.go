package ipmapper

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/session"
)

// haInstance is one IP Mapper on a connection of its own, as a separate
// process would have.
type haInstance struct {
	svc *Service
	nc  *nats.Conn
	reg *prometheus.Registry
}

func startHA(t *testing.T, b *bus, name string, ttl time.Duration) *haInstance {
	t.Helper()
	nc, err := natsbus.Connect(b.srv.ClientURL(), name, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	reg := prometheus.NewRegistry()
	svc := startService(t, Config{Conn: nc, LockTTL: ttl, Instance: name, Registerer: reg, Logger: natstest.Logger(t)}, 10*time.Second)
	return &haInstance{svc: svc, nc: nc, reg: reg}
}

func waitRole(t *testing.T, in *haInstance, want Role) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for in.svc.Role() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: role %s, want %s", in.svc.cfg.Instance, in.svc.Role(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLockLostByChangeStopsWriting: a lock key rewritten by someone else
// (here by hand, as an operator forcing a fail-over would) makes the active
// IP Mapper stop at its next refresh: its endpoints go, its writes are
// refused by the fence and never reach the bucket, and the standby takes
// over.
func TestLockLostByChangeStopsWriting(t *testing.T) {
	b := startBus(t)
	a := startHA(t, b, "a", 600*time.Millisecond)
	waitRole(t, a, RoleActive)
	sb := startHA(t, b, "b", 600*time.Millisecond)
	waitRole(t, sb, RoleStandby)
	if h := sb.svc.HA().Holder; !strings.Contains(h, "a (host") {
		t.Fatalf("standby names holder %q, want instance a", h)
	}

	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	locks, err := js.KeyValue(ctx, DefaultLockBucket)
	if err != nil {
		t.Fatal(err)
	}
	// The operator's forced fail-over: delete the lock key.
	if err := locks.Delete(ctx, session.Bucket); err != nil {
		t.Fatal(err)
	}
	waitRole(t, a, RoleStandby)
	waitRole(t, sb, RoleActive)
	if got := testutil.ToFloat64(a.svc.metrics.lockLost); got != 1 {
		t.Errorf("a's lock lost count %v, want 1", got)
	}
	if got := testutil.ToFloat64(sb.svc.metrics.takeovers); got != 1 {
		t.Errorf("b's take-overs %v, want 1", got)
	}

	// a no longer writes, whatever asks it to.
	errs := a.svc.store.apply(ctx, []write{{ID: "from-a", Value: []byte(`{"id":"from-a","org":"x","allocations":[]}`)}})
	if !errors.Is(errs[0], errNotActive) {
		t.Fatalf("write of a stepped-down instance: %v, want errNotActive", errs[0])
	}
	kv, err := js.KeyValue(ctx, session.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "from-a"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the refused write reached the bucket: %v", err)
	}
	// Every request now reaches b, the only one registered.
	client, err := mapperclient.NewClient(mapperclient.ClientConfig{Conn: b.nc})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		s := session.Session{ID: fmt.Sprint("s", i), Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.0.%d.0/24", i))}}
		if _, err := client.SetSession(ctx, s, 0); err != nil {
			t.Fatalf("set-session %d after fail-over: %v", i, err)
		}
	}
	if n := sb.svc.idx.Load().Len(); n != 20 {
		t.Fatalf("b holds %d sessions, want 20", n)
	}
}

// TestLockRunsOutWhileNATSAway: an active IP Mapper that cannot reach NATS
// for longer than the lock's TTL stops serving and writing by itself —
// before the server could expire its lock for a standby — and comes back
// as standby, then active again (its own expired lock) once NATS is back.
func TestLockRunsOutWhileNATSAway(t *testing.T) {
	b := startBus(t)
	a := startHA(t, b, "a", 600*time.Millisecond)
	waitRole(t, a, RoleActive)
	port := b.srv.Port()
	b.srv.Shutdown()
	waitRole(t, a, RoleStandby)
	if a.svc.Ready() {
		t.Fatal("Ready while standby")
	}
	errs := a.svc.store.apply(context.Background(), []write{{ID: "x", Value: []byte(`{}`)}})
	if !errors.Is(errs[0], errNotActive) {
		t.Fatalf("write after the lease ran out: %v, want errNotActive", errs[0])
	}
	if got := testutil.ToFloat64(a.svc.metrics.lockLost); got != 1 {
		t.Errorf("lock lost count %v, want 1", got)
	}
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: b.dir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	b.srv = srv
	waitRole(t, a, RoleActive)
	if got := testutil.ToFloat64(a.svc.metrics.takeovers); got != 2 {
		t.Errorf("take-overs %v, want 2 (start, and after NATS came back)", got)
	}
}

// TestLockBucketTTLConflict: an IP Mapper configured with another TTL than
// the existing lock bucket's refuses to start with ErrConflict.
func TestLockBucketTTLConflict(t *testing.T) {
	b := startBus(t)
	startHA(t, b, "a", time.Second)
	svc, err := New(Config{Conn: b.nc, LockTTL: 2 * time.Second, Instance: "b"})
	if err != nil {
		t.Fatal(err)
	}
	err = svc.Start(context.Background())
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "same TTL") {
		t.Fatalf("Start with another TTL: %v, want ErrConflict", err)
	}
}

// TestOtherLockBucketConflict: an IP Mapper of the same bucket under
// another lock bucket would take its own lock and write beside the active
// one; it sees the active one answer for its bucket and refuses to start.
func TestOtherLockBucketConflict(t *testing.T) {
	b := startBus(t)
	startHA(t, b, "a", time.Second)
	svc, err := New(Config{Conn: b.nc, LockTTL: time.Second, LockBucket: "other-locks", Instance: "b"})
	if err != nil {
		t.Fatal(err)
	}
	err = svc.Start(context.Background())
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "same lock bucket") {
		t.Fatalf("Start under another lock bucket: %v, want ErrConflict", err)
	}
}

func TestHAConfigChecks(t *testing.T) {
	b := startBus(t)
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Bucket: "a.b"}, "Bucket"},
		{Config{LockBucket: "x y"}, "LockBucket"},
		{Config{LockBucket: "sessions"}, "bucket of their own"},
		{Config{LockTTL: 100 * time.Millisecond}, "LockTTL"},
		{Config{LockTTL: 2 * time.Minute}, "LockTTL"},
	} {
		tt.cfg.Conn = b.nc
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v): %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
}

// TestRefreshAfterOwnLandedWrite: a refresh whose reply was lost (it landed,
// so the key is at a newer revision holding our own token) is not a lost
// lock: the next refresh takes the key back at its revision and the
// instance stays active.
func TestRefreshAfterOwnLandedWrite(t *testing.T) {
	b := startBus(t)
	a := startHA(t, b, "a", 600*time.Millisecond)
	waitRole(t, a, RoleActive)
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	locks, err := js.KeyValue(ctx, DefaultLockBucket)
	if err != nil {
		t.Fatal(err)
	}
	// What a refresh whose reply was lost leaves: our value, a revision
	// the instance does not know.
	e, err := locks.Get(ctx, session.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := locks.Update(ctx, session.Bucket, e.Value(), e.Revision())
	if err != nil {
		t.Fatal(err)
	}
	// Wait until a refresh has gone past it.
	eventually(t, "a refresh after the foreign revision", func() bool {
		e, err := locks.Get(ctx, session.Bucket)
		return err == nil && e.Revision() > rev
	})
	if a.svc.Role() != RoleActive || testutil.ToFloat64(a.svc.metrics.lockLost) != 0 {
		t.Fatalf("role %s, locks lost %v: want still active, none lost", a.svc.Role(), testutil.ToFloat64(a.svc.metrics.lockLost))
	}
}
