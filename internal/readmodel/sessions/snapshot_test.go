package sessions_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/promtest"
	"github.com/svc-pf/svc-pf/internal/readmodel/sessions"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
)

// TestSnapshotStartEqualsReplay writes sessions through a real IP Mapper,
// with prefixes several sessions hold, sets, overwrites and deletes
// before and after the IP Mapper's snapshot, and checks that a node that
// starts from the snapshot and the stream after it holds exactly what a
// node that replays the whole stream holds: the same sessions, and for
// every shared prefix the same holders in the same order (the one that
// answers, and who answers as each is removed in turn).
func TestSnapshotStartEqualsReplay(t *testing.T) {
	bus := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mapper := startMapper(ctx, t, bus.NC, ipmapper.Config{SnapshotInterval: -1})
	defer func() { _ = mapper.Stop() }()
	client := newClient(t, bus.NC, 30*time.Second)
	set := func(id, prefix, user, producer string, rev int64) {
		t.Helper()
		s := session.Session{ID: id, Org: "acme", Revision: rev, Allocations: []netip.Prefix{netip.MustParsePrefix(prefix)},
			Attributes: identity.Attributes{Username: user}, Producer: producer}
		if _, err := client.SetSession(ctx, s, 0); err != nil {
			t.Fatalf("set %s: %v", id, err)
		}
	}
	del := func(producer string, ids ...string) {
		t.Helper()
		if n, err := client.CleanSessions(ctx, mapperclient.CleanRequest{IDs: ids, Producer: producer}); err != nil || n != len(ids) {
			t.Fatalf("clean %v: %d %v", ids, n, err)
		}
	}
	rad := session.ProducerRADIUS

	// Before the snapshot: three holders of one /32 (b written last), a
	// /24 around it, a /64, plain sessions, one overwritten, one deleted.
	set("a", "100.64.0.1/32", "u-a", rad, 0)
	set("b", "100.64.0.1/32", "u-b", "", 1)
	set("c", "100.64.0.1/32", "u-c", rad, 0)
	set("b", "100.64.0.1/32", "u-b2", "", 2) // b answers, then c, then a
	set("net", "100.64.0.0/24", "u-net", "", 1)
	set("v6", "2001:db8:1:2::/64", "u-v6", rad, 0)
	set("v6-other", "2001:db8:1:2::/64", "u-v6o", "", 1)
	for i := range 20 {
		set(fmt.Sprintf("s%02d", i), fmt.Sprintf("10.1.0.%d/32", i), fmt.Sprintf("u%d", i), rad, 0)
	}
	set("s03", "10.1.0.103/32", "u3-moved", rad, 0)
	del(rad, "s04")
	del(rad, "s05")

	seq, err := mapper.WriteSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if seq == 0 {
		t.Fatal("the snapshot covers no sequence")
	}

	// After it: an older holder written again (a moves to the top), the
	// top holder of the /64 deleted (v6 answers again), a snapshot session
	// overwritten and one deleted, one deleted and set again, new ones.
	set("a", "100.64.0.1/32", "u-a2", rad, 0)
	del("", "v6-other")
	set("s06", "10.1.0.106/32", "u6-moved", rad, 0)
	del(rad, "s07")
	del(rad, "s08")
	set("s08", "10.1.0.8/32", "u8-back", rad, 0)
	set("s05", "10.1.0.5/32", "u5-back", rad, 0)
	set("new", "100.64.0.1/32", "u-new", rad, 0)
	set("new2", "10.2.0.0/16", "u-new2", "", 1)

	startNode := func() (*sessions.Model, *prometheus.Registry) {
		t.Helper()
		reg := prometheus.NewRegistry()
		return startNode(ctx, t, bus.JS, sessions.Config{Registerer: reg}), reg
	}
	seeded, reg := startNode()
	if n := promtest.Value(t, reg, "svcpf_readmodel_snapshot_loads_total"); n != 1 {
		t.Fatalf("the node's load did not start from the snapshot (%v snapshot loads)", n)
	}
	// Without the snapshot, the next node replays the whole stream.
	if err := bus.JS.DeleteObjectStore(ctx, session.Bucket); err != nil {
		t.Fatal(err)
	}
	replayed, reg2 := startNode()
	if n := promtest.Value(t, reg2, "svcpf_readmodel_snapshot_loads_total"); n != 0 {
		t.Fatalf("%v snapshot loads with no snapshot", n)
	}
	sameIndex(t, seeded.Snapshot(), replayed.Snapshot())
	if got := seeded.Snapshot().Len(); got != 25 {
		t.Fatalf("%d sessions, want 25", got)
	}
	if e, ok := seeded.Snapshot().LookupIP(netip.MustParseAddr("2001:db8:1:2::1")); !ok || e.ID() != "v6" {
		t.Fatalf("the /64 answers with %q, want v6 (v6-other was deleted after the snapshot)", e.ID())
	}
}

// sameIndex checks that a and b hold the same sessions and, for every
// allocation, answer alike as the answering sessions are removed one by
// one (which shows the order of the holders underneath).
func sameIndex(t *testing.T, a, b *sessionindex.Index) {
	t.Helper()
	all := func(ix *sessionindex.Index) map[string]*session.Session {
		m := map[string]*session.Session{}
		for e := range ix.All {
			m[e.ID()] = e.Session()
		}
		return m
	}
	if sa, sb := all(a), all(b); !reflect.DeepEqual(sa, sb) {
		t.Fatalf("the sessions differ:\n%v\n%v", sa, sb)
	}
	var addrs []netip.Addr
	for e := range a.All {
		for _, p := range e.Session().Allocations {
			addrs = append(addrs, p.Addr())
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	for _, addr := range addrs {
		xa, xb := a, b
		var order []string
		for {
			ea, oka := xa.LookupIP(addr)
			eb, okb := xb.LookupIP(addr)
			if oka != okb || ea.ID() != eb.ID() {
				t.Fatalf("%s: after removing %v, one answers %q (%v), the other %q (%v)", addr, order, ea.ID(), oka, eb.ID(), okb)
			}
			if !oka {
				break
			}
			order = append(order, ea.ID())
			xa, xb = xa.Apply(nil, []string{ea.ID()}), xb.Apply(nil, []string{eb.ID()})
		}
	}
}

// TestUnusableSnapshotFallsBack: a snapshot too old to start from, one
// cut short, and one of the bucket's previous stream (deleted and created
// again) are each given up for a replay of the whole stream, which loads
// what it would have loaded without them.
func TestUnusableSnapshotFallsBack(t *testing.T) {
	bus := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startMapper := func() *ipmapper.Service {
		t.Helper()
		return startMapper(ctx, t, bus.NC, ipmapper.Config{SnapshotInterval: -1, PurgeDeletesAfter: time.Hour})
	}
	mapper := startMapper()
	client := newClient(t, bus.NC, 30*time.Second)
	set := func(id, prefix string) {
		t.Helper()
		s := session.Session{ID: id, Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix(prefix)}}
		if _, err := client.SetSession(ctx, s, 0); err != nil {
			t.Fatalf("set %s: %v", id, err)
		}
	}
	for i := range 10 {
		set(fmt.Sprintf("s%d", i), fmt.Sprintf("10.0.0.%d/32", i))
	}
	if _, err := mapper.WriteSnapshot(ctx); err != nil {
		t.Fatal(err)
	}
	set("after", "10.0.1.0/24")
	if n, err := client.CleanSessions(ctx, mapperclient.CleanRequest{IDs: []string{"s1"}}); err != nil || n != 1 {
		t.Fatalf("clean: %d %v", n, err)
	}

	startNode := func(clock func() time.Time) (*sessions.Model, *prometheus.Registry) {
		t.Helper()
		reg := prometheus.NewRegistry()
		return startNode(ctx, t, bus.JS, sessions.Config{Registerer: reg, Clock: clock}), reg
	}
	seeded, reg := startNode(nil)
	if n := promtest.Value(t, reg, "svcpf_readmodel_snapshot_loads_total"); n != 1 {
		t.Fatalf("%v snapshot loads, want 1", n)
	}

	// Half of PurgeDeletesAfter later, a delete after the snapshot may have
	// lost its marker: the node replays the stream.
	old, reg := startNode(func() time.Time { return time.Now().Add(31 * time.Minute) })
	if n := promtest.Value(t, reg, "svcpf_readmodel_snapshot_loads_total"); n != 0 {
		t.Fatalf("a snapshot past half its validity was used (%v loads)", n)
	}
	sameIndex(t, seeded.Snapshot(), old.Snapshot())
	if _, ok := old.Snapshot().Get("s1"); ok || old.Snapshot().Len() != 10 {
		t.Fatalf("replay: %d sessions, s1 present %v", old.Snapshot().Len(), ok)
	}

	// The object cut short (its digest then matches, its end record is
	// missing): the load fails over to a replay.
	obs, err := bus.JS.ObjectStore(ctx, session.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, "snapshot")
	if err != nil {
		t.Fatal(err)
	}
	data, err := obs.GetBytes(ctx, "snapshot")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: "snapshot", Metadata: info.Metadata}, bytes.NewReader(data[:len(data)-5])); err != nil {
		t.Fatal(err)
	}
	cut, reg := startNode(nil)
	if n := promtest.Value(t, reg, "svcpf_readmodel_snapshot_failures_total"); n != 1 {
		t.Fatalf("%v snapshot failures, want 1", n)
	}
	sameIndex(t, seeded.Snapshot(), cut.Snapshot())

	// The bucket deleted and created again: the snapshot, of its previous
	// stream, is not used.
	if err := mapper.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := bus.JS.DeleteKeyValue(ctx, session.Bucket); err != nil {
		t.Fatal(err)
	}
	mapper = startMapper()
	defer func() { _ = mapper.Stop() }()
	set("fresh", "10.9.0.0/16")
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: "snapshot", Metadata: info.Metadata}, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	fresh, reg := startNode(nil)
	if n := promtest.Value(t, reg, "svcpf_readmodel_snapshot_loads_total"); n != 0 {
		t.Fatalf("a snapshot of the previous stream was used (%v loads)", n)
	}
	if _, ok := fresh.Snapshot().Get("fresh"); !ok || fresh.Snapshot().Len() != 1 {
		t.Fatalf("after the bucket was created again: %d sessions, want only fresh", fresh.Snapshot().Len())
	}
}

// TestEmptySnapshotThenUpdates: a snapshot of an empty table is a start
// like any other: the node is ready, caught up, and follows what comes
// after it.
func TestEmptySnapshotThenUpdates(t *testing.T) {
	bus := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mapper := startMapper(ctx, t, bus.NC, ipmapper.Config{SnapshotInterval: -1})
	defer func() { _ = mapper.Stop() }()
	client := newClient(t, bus.NC, 10*time.Second)
	// A session set and removed: the table is empty, the stream is not.
	s := session.Session{ID: "gone", Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix("10.0.0.9/32")}}
	if _, err := client.SetSession(ctx, s, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := client.CleanSessions(ctx, mapperclient.CleanRequest{IDs: []string{"gone"}}); err != nil || n != 1 {
		t.Fatalf("clean: %d %v", n, err)
	}
	seq, err := mapper.WriteSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := startNode(ctx, t, bus.JS, sessions.Config{Registerer: reg})
	if n := promtest.Value(t, reg, "svcpf_readmodel_snapshot_loads_total"); n != 1 || m.Snapshot().Len() != 0 {
		t.Fatalf("%v snapshot loads, %d sessions; want 1 and 0", n, m.Snapshot().Len())
	}
	// Applied up to the snapshot's sequence, though it held no session: a
	// resume starts after it.
	if got := promtest.Value(t, reg, "svcpf_readmodel_stream_sequence"); got != float64(seq) {
		t.Fatalf("stream sequence applied %v, want the snapshot's %d", got, seq)
	}
	s = session.Session{ID: "later", Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}}
	if _, err := client.SetSession(ctx, s, 0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := m.Snapshot().Get("later"); ok && m.Lag() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session written after the snapshot did not arrive (lag %s)", m.Lag())
		}
	}
}
