package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/node"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// natsCluster is three embedded nats-servers routed into one JetStream
// cluster on 127.0.0.1, each with its own store directory. A server can
// be shut down and started again on the same ports and store, as a
// machine of a production cluster restarts.
type natsCluster struct {
	t            *testing.T
	clientPorts  [3]int
	clusterPorts [3]int
	dirs         [3]string
	mu           sync.Mutex
	servers      [3]*server.Server
}

// freePorts asks the kernel for n distinct free ports: all listeners are
// held until every port is known, so none is handed out twice.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

func startNATSCluster(t *testing.T) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t}
	ports := freePorts(t, 6)
	for i := range 3 {
		c.clientPorts[i], c.clusterPorts[i] = ports[i], ports[3+i]
		c.dirs[i] = t.TempDir()
	}
	for i := range 3 {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range 3 {
			c.stop(i)
		}
	})
	return c
}

func (c *natsCluster) options(i int) *server.Options {
	var routes []*url.URL
	for j := range 3 {
		if j != i {
			routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", c.clusterPorts[j])})
		}
	}
	return &server.Options{
		ServerName: fmt.Sprintf("nats-%d", i),
		Host:       "127.0.0.1",
		Port:       c.clientPorts[i],
		JetStream:  true,
		StoreDir:   c.dirs[i],
		Cluster:    server.ClusterOpts{Name: "svcpf-test", Host: "127.0.0.1", Port: c.clusterPorts[i]},
		Routes:     routes,
		NoSigs:     true,
		NoLog:      true,
	}
}

// start starts server i; it retries while its port is still held by the
// previous incarnation's closing sockets.
func (c *natsCluster) start(i int) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		srv, err := server.NewServer(c.options(i))
		if err != nil {
			c.t.Fatalf("nats-%d: %v", i, err)
		}
		go srv.Start()
		if srv.ReadyForConnections(10 * time.Second) {
			c.mu.Lock()
			c.servers[i] = srv
			c.mu.Unlock()
			return
		}
		srv.Shutdown()
		srv.WaitForShutdown()
		if time.Now().After(deadline) {
			c.t.Fatalf("nats-%d not ready on 127.0.0.1:%d", i, c.clientPorts[i])
		}
	}
}

func (c *natsCluster) stop(i int) {
	c.mu.Lock()
	srv := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// url is server i's client URL.
func (c *natsCluster) url(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.clientPorts[i]) }

// urls lists every server, home first: what a client of the cluster is
// configured with, so that it fails over.
func (c *natsCluster) urls(home int) string {
	us := []string{c.url(home)}
	for j := range 3 {
		if j != home {
			us = append(us, c.url(j))
		}
	}
	return strings.Join(us, ",")
}

// connect opens a production connection (natsbus.Connect) to all three
// servers, home first and in that order, so the test knows where each
// client is until a failover moves it.
func (c *natsCluster) connect(home int, name string) *nats.Conn {
	c.t.Helper()
	nc := connectNATS(c.t, c.urls(home), name, nil, false, nats.DontRandomize())
	if got := nc.ConnectedUrl(); got != c.url(home) {
		c.t.Fatalf("%s connected to %s, want %s", name, got, c.url(home))
	}
	return nc
}

// streamLeader names the server leading the bucket's stream, for the log.
func streamLeader(js jetstream.JetStream, bucket string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	info := s.CachedInfo()
	if info.Cluster == nil {
		return "unknown"
	}
	return info.Cluster.Leader
}

// clusterOrg is one organisation a writer owns: what the acknowledged
// writes say it holds.
type clusterOrg struct {
	name      string
	prefix    netip.Prefix
	live      bool
	overrides map[netip.Prefix]string // cidr → username
}

// expected is the sessions the org's acknowledged writes must leave in
// every index: one per override, and the prefix's own (no override covers
// it whole: a writer uses at most 8 of its 16 /28s).
func (o *clusterOrg) expected() []string {
	if !o.live {
		return nil
	}
	want := []string{fmt.Sprintf("[%s]|||", o.prefix)}
	for cidr, user := range o.overrides {
		want = append(want, fmt.Sprintf("[%s]|%s||", cidr, user))
	}
	slices.Sort(want)
	return want
}

// clusterWriter streams writes to its own organisations through the REST
// API and records each acknowledged one.
type clusterWriter struct {
	id     int
	base   string
	client *http.Client
	orgs   []*clusterOrg
	writes atomic.Int64
	// failures are writes that got no 2xx: the orgmanager's writes go to
	// PostgreSQL only, so a NATS outage must not fail any.
	failures []string
	step     int
}

func (w *clusterWriter) call(method, path string, body any, want int) bool {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, w.base+path, rd)
	if err != nil {
		w.failures = append(w.failures, fmt.Sprintf("%s %s: %v", method, path, err))
		return false
	}
	resp, err := w.client.Do(req)
	if err != nil {
		w.failures = append(w.failures, fmt.Sprintf("%s %s: %v", method, path, err))
		return false
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		w.failures = append(w.failures, fmt.Sprintf("%s %s: %d %s", method, path, resp.StatusCode, data))
		return false
	}
	w.writes.Add(1)
	return true
}

// next makes one write, cycling through the kinds an operator's tooling
// makes: a new organisation with its prefix, overrides added and changed,
// an override deleted, an organisation deleted.
func (w *clusterWriter) next() {
	w.step++
	live := slices.DeleteFunc(slices.Clone(w.orgs), func(o *clusterOrg) bool { return !o.live })
	switch {
	case len(live) < 3 || (w.step%23 == 0 && len(w.orgs) < 200):
		n := len(w.orgs)
		o := &clusterOrg{name: fmt.Sprintf("w%d-org%d", w.id, n),
			prefix:    netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(w.id), byte(n), 0}), 24),
			overrides: map[netip.Prefix]string{}}
		w.orgs = append(w.orgs, o)
		if w.call("PUT", "/org/"+o.name, nil, 200) &&
			w.call("PATCH", "/org/"+o.name+"/prefixes", map[string]any{"add": []string{o.prefix.String()}}, 200) {
			o.live = true
		}
	case w.step%29 == 0:
		o := live[w.step%len(live)]
		if w.call("DELETE", "/org/"+o.name+"?confirm=true", nil, 204) {
			o.live = false
		}
	case w.step%7 == 0:
		o := live[w.step%len(live)]
		for cidr := range o.overrides {
			if w.call("DELETE", "/org/"+o.name+"/overrides?cidr="+cidr.String(), nil, 204) {
				delete(o.overrides, cidr)
			}
			break
		}
	default:
		o := live[w.step%len(live)]
		b := o.prefix.Addr().As4()
		b[3] = byte(16 * (w.step % 8))
		cidr := netip.PrefixFrom(netip.AddrFrom4(b), 28)
		user := fmt.Sprintf("u%d-%d", w.id, w.step)
		if w.call("POST", "/org/"+o.name+"/overrides", map[string]any{"cidr": cidr.String(), "username": user}, 200) {
			o.overrides[cidr] = user
		}
	}
}

// clusterNode is one filter node's read models, as a node builds them,
// on its own connection.
type clusterNode struct {
	name   string
	nc     *nats.Conn
	models *node.Node
}

// index is the node's subscriber index now.
func (n *clusterNode) index() *sessionindex.Index {
	return n.models.View().Sessions.(*sessionindex.Index)
}

func (n *clusterNode) sessions(org string) []string {
	var out []string
	for _, e := range n.index().ByOrg(org) {
		s := e.Session()
		out = append(out, fmt.Sprintf("%v|%s|%s|%s", s.Allocations, s.Username, s.DeviceID, s.Location))
	}
	slices.Sort(out)
	return out
}

// mapperSessions is what the IP Mapper's GET /sessions says it holds for org.
func mapperSessions(base, org string) ([]string, error) {
	resp, err := http.Get(base + "/sessions?limit=1000&org=" + url.QueryEscape(org))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var reply struct {
		Sessions []session.Session `json:"sessions"`
		Total    int               `json:"total"`
		Error    string            `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil || resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET /sessions?org=%s: %d %v %s", org, resp.StatusCode, err, reply.Error)
	}
	var out []string
	for _, s := range reply.Sessions {
		out = append(out, fmt.Sprintf("%v|%s|%s|%s", s.Allocations, s.Username, s.DeviceID, s.Location))
	}
	slices.Sort(out)
	return out, nil
}

// TestNATSClusterNodeLossDuringWrites is the scale path (docs/architecture.md)
// end to end: a three-node NATS cluster with the sessions and settings buckets
// at three replicas, the orgmanager on PostgreSQL, the IP Mapper, and two
// nodes' read models, each service on a different NATS server and given
// all three. Writers stream organisations, prefixes, overrides and deletes
// through the REST API while first the server of the IP Mapper and the
// orgmanager, then the server of one node, is shut down and started again
// on its ports and store. Afterwards every organisation settles
// (dirty:false) and both nodes' indexes and the IP Mapper's table hold
// exactly what the acknowledged writes say: nothing lost, nothing
// duplicated, nothing of a deleted organisation. docs/operations.md,
// "Production layout", describes what it shows.
func TestNATSClusterNodeLossDuringWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the cluster test runs for 15-30 s; CI runs it without -short, with the PostgreSQL URL set (.ci/run lists it among the tests that must not skip)")
	}
	dbURL := storetest.URL(t, storetest.Postgres)
	began := time.Now()
	cl := startNATSCluster(t)

	// The cluster takes a moment to elect its JetStream meta leader; the
	// services below create their buckets with three replicas themselves
	// (sessions.replicas, settings.replicas), which needs that leader.
	admin := cl.connect(2, "admin")
	adminJS, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := adminJS.AccountInfo(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream cluster not ready after 30s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("cluster ready in %v", time.Since(began).Round(time.Millisecond))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	// The IP Mapper and the orgmanager on nats-0, node A on nats-1, node B
	// on nats-2.
	mcfg := DefaultIPMapperConfig()
	testMapperAuth(t, &mcfg)
	mcfg.HTTP.Address = "127.0.0.1:0"
	mcfg.Sessions.Replicas = 3
	// The IP Mapper's and the orgmanager's logs, shown when the test fails
	// or converging took long.
	var svcLog syncBuffer
	svcLogger := slog.New(slog.NewTextHandler(&svcLog, &slog.HandlerOptions{Level: slog.LevelInfo}))
	mapperNC := cl.connect(0, "ipmapper")
	mapper, err := StartIPMapper(mcfg, mapperNC, "test", svcLogger)
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if err := mapper.Run(ctx); err != nil {
			t.Errorf("IP Mapper Run: %v", err)
		}
	})
	mapperBase := "http://" + mapper.Addr().String()

	// The nodes' read models log what they do on a failover (a resume,
	// a reconcile, a reload); shown when the test fails.
	var nodeLog syncBuffer
	var nodes []*clusterNode
	for i, name := range []string{"node-a", "node-b"} {
		nc := cl.connect(i+1, name)
		m, err := node.New(node.Config{NATS: nc, Registerer: prometheus.NewRegistry(),
			Logger: slog.New(slog.NewTextHandler(&nodeLog, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", name)})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, &clusterNode{name: name, nc: nc, models: m})
		wg.Go(func() {
			if err := m.Run(ctx); err != nil {
				t.Errorf("%s read models: %v", name, err)
			}
		})
	}

	ocfg := DefaultOrgManagerConfig()
	withTestToken(t, &ocfg)
	ocfg.HTTP.Address = "127.0.0.1:0"
	ocfg.Database.URL = dbURL
	ocfg.Settings.Replicas = 3
	ocfg.Deploy.RetryMin, ocfg.Deploy.RetryMax = 20*time.Millisecond, 500*time.Millisecond
	ocfg.Deploy.PublishTimeout = 2 * time.Second
	omNC := cl.connect(0, "orgmanager")
	om, err := StartOrgManager(ctx, ocfg, omNC, "test", svcLogger)
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if err := om.Run(ctx); err != nil {
			t.Errorf("orgmanager Run: %v", err)
		}
	})
	base := "http://" + om.Addr().String()

	for _, n := range nodes {
		// Its sessions and settings buckets loaded: the node is ready.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			err := n.models.Ready()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: buckets never loaded: %v", n.name, err)
			}
		}
	}

	// Writers: each owns its organisations and writes one request after
	// another, with a short pause between them: a stream of writes, not a
	// load test. Flat out, three writers under -race starve the three
	// in-process NATS servers of the CPU their Raft heartbeats need on a
	// loaded 2-core machine, and the test would show that instead.
	writers := make([]*clusterWriter, 3)
	stopWriting := make(chan struct{})
	var writing sync.WaitGroup
	for i := range writers {
		w := &clusterWriter{id: i, base: base, client: &http.Client{Timeout: 30 * time.Second}}
		writers[i] = w
		writing.Go(func() {
			for {
				select {
				case <-stopWriting:
					return
				case <-time.After(5 * time.Millisecond):
				}
				w.next()
			}
		})
	}
	total := func() int64 {
		var n int64
		for _, w := range writers {
			n += w.writes.Load()
		}
		return n
	}
	sessionsJS, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}

	// outage shuts server i down for a while under the writers, then starts
	// it again on its ports and store directory.
	outage := func(i int, serves string) {
		time.Sleep(1500 * time.Millisecond)
		leader := streamLeader(sessionsJS, "sessions")
		before, at := total(), time.Now()
		cl.stop(i)
		time.Sleep(2 * time.Second)
		during := total() - before
		cl.start(i)
		t.Logf("nats-%d (serving %s; sessions stream leader was %s) down for %v; %d writes acknowledged meanwhile",
			i, serves, leader, time.Since(at).Round(time.Millisecond), during)
	}
	outage(0, "the IP Mapper and the orgmanager")
	outage(1, "node A")
	time.Sleep(1500 * time.Millisecond)
	close(stopWriting)
	writing.Wait()
	stopped := time.Now()

	var orgs []*clusterOrg
	for _, w := range writers {
		for _, f := range w.failures {
			t.Errorf("writer %d: write not acknowledged: %s", w.id, f)
		}
		orgs = append(orgs, w.orgs...)
	}
	live, deleted := 0, 0
	for _, o := range orgs {
		if o.live {
			live++
		} else {
			deleted++
		}
	}

	// Converged: every live organisation deployed, and both indexes and
	// the IP Mapper's table exactly what the writes say, with no session
	// of any other organisation.
	settled := func() string {
		for _, o := range orgs {
			if !o.live {
				continue
			}
			resp, err := http.Get(base + "/org/" + o.name + "/effective-ranges")
			if err != nil {
				return err.Error()
			}
			var rr struct{ Dirty bool }
			err = json.NewDecoder(resp.Body).Decode(&rr)
			resp.Body.Close()
			if err != nil || rr.Dirty {
				return o.name + " still dirty"
			}
		}
		return ""
	}
	converged := func() string {
		want := 0
		for _, o := range orgs {
			exp := o.expected()
			want += len(exp)
			for _, n := range nodes {
				if got := n.sessions(o.name); !slices.Equal(got, exp) {
					return fmt.Sprintf("%s: %s holds %q, want %q", n.name, o.name, got, exp)
				}
			}
			got, err := mapperSessions(mapperBase, o.name)
			if err != nil {
				return err.Error()
			}
			if !slices.Equal(got, exp) {
				return fmt.Sprintf("IP Mapper: %s holds %q, want %q", o.name, got, exp)
			}
		}
		for _, n := range nodes {
			if got := n.models.SessionCount(); got != want {
				return fmt.Sprintf("%s holds %d sessions, want %d", n.name, got, want)
			}
		}
		return ""
	}
	deadline = time.Now().Add(45 * time.Second)
	for {
		why := settled()
		if why == "" {
			why = converged()
		}
		if why == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("not converged 45s after the writes stopped: %s", why)
			for _, o := range orgs {
				diagnose(t, o, nodes, mapperBase, sessionsJS)
			}
			t.Fatalf("node logs:\n%s\nIP Mapper and orgmanager logs:\n%s", nodeLog.String(), svcLog.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if took := time.Since(stopped); took > 15*time.Second {
		t.Logf("converging took %v; node logs:\n%s\nIP Mapper and orgmanager logs:\n%s", took.Round(time.Millisecond), nodeLog.String(), svcLog.String())
	}
	t.Logf("%d writes acknowledged by 3 writers (%d organisations live, %d deleted); converged %v after the last write; %v in all",
		total(), live, deleted, time.Since(stopped).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	conns := map[string]*nats.Conn{"IP Mapper": mapperNC, "orgmanager": omNC, nodes[0].name: nodes[0].nc, nodes[1].name: nodes[1].nc}
	for name, nc := range conns {
		t.Logf("%s: on %s, %d reconnects", name, nc.ConnectedUrl(), nc.Stats().Reconnects)
	}
	// Both buckets were created by the services with the replicas their
	// configs name: a NATS server lost must not lose a bucket.
	for _, bucket := range []string{session.Bucket, settings.Bucket} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := adminJS.Stream(ctx, "KV_"+bucket)
		if err == nil {
			if r := st.CachedInfo().Config.Replicas; r != 3 {
				t.Errorf("bucket %s has %d replicas, want 3", bucket, r)
			}
		} else {
			t.Errorf("bucket %s: %v", bucket, err)
		}
		cancel()
	}
	// The outages really moved the clients of the servers shut down.
	for _, name := range []string{"IP Mapper", "orgmanager", nodes[0].name} {
		if conns[name].Stats().Reconnects == 0 {
			t.Errorf("%s never reconnected: its server's outage did not reach it", name)
		}
	}
}

// diagnose logs, for an organisation whose views disagree, what each node,
// the IP Mapper and the bucket hold of it.
func diagnose(t *testing.T, o *clusterOrg, nodes []*clusterNode, mapperBase string, js jetstream.JetStream) {
	t.Helper()
	exp := o.expected()
	a, b := nodes[0].sessions(o.name), nodes[1].sessions(o.name)
	m, err := mapperSessions(mapperBase, o.name)
	if slices.Equal(a, exp) && slices.Equal(b, exp) && err == nil && slices.Equal(m, exp) {
		return
	}
	t.Logf("%s (live %v): want %q\n  %s %q\n  %s %q\n  IP Mapper %q (%v)", o.name, o.live, exp,
		nodes[0].name, a, nodes[1].name, b, m, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, session.Bucket)
	if err != nil {
		t.Logf("  bucket: %v", err)
		return
	}
	for _, n := range nodes {
		for _, e := range n.index().ByOrg(o.name) {
			id := e.ID()
			entry, err := kv.Get(ctx, id)
			if err != nil {
				hist, herr := kv.History(ctx, id)
				var ops []string
				for _, h := range hist {
					ops = append(ops, fmt.Sprintf("%v@%d", h.Operation(), h.Revision()))
				}
				t.Logf("  %s holds %s: bucket says %v; history %v %v", n.name, id, err, ops, herr)
				continue
			}
			t.Logf("  %s holds %s: bucket has revision %d", n.name, id, entry.Revision())
		}
	}
}

// TestBucketsRebuiltAfterLoss: what docs/operations.md says about backups
// — the NATS buckets need none, the database is the source of truth. Both
// buckets are deleted while the IP Mapper and the orgmanager are down; an
// IP Mapper started on the empty bucket and an orgmanager started again
// (its first deploy of every organisation republishes everything) fill
// them again: the sessions in the bucket, in the IP Mapper's table and in
// the node's index, and the settings documents, global one included.
func TestBucketsRebuiltAfterLoss(t *testing.T) {
	p := newPlatform(t, storetest.URL(t, storetest.SQLite))
	js, err := jetstream.New(p.connect("admin"))
	if err != nil {
		t.Fatal(err)
	}
	keys := func(bucket string) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			return []string{err.Error()}
		}
		kl, err := kv.ListKeys(ctx)
		if err != nil {
			return []string{err.Error()}
		}
		var out []string
		for k := range kl.Keys() {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	alice := settings.Key("acme", settings.Scope{Kind: settings.ScopeUsername, Value: "alice"})
	wantSettings := []string{alice, settings.GlobalKey}
	slices.Sort(wantSettings)
	expectBuckets := func() {
		t.Helper()
		p.eventually("settings bucket", func() bool { return slices.Equal(keys(settings.Bucket), wantSettings) },
			func() string { return fmt.Sprintf("%q, want %q", keys(settings.Bucket), wantSettings) })
		p.eventually("sessions bucket", func() bool { return len(keys(session.Bucket)) == 2 },
			func() string { return fmt.Sprintf("keys %q, want the 2 sessions of acme", keys(session.Bucket)) })
	}

	p.call("PUT", "/org/acme", nil, 200)
	p.call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"10.0.0.0/24"}}, 200)
	p.call("POST", "/org/acme/overrides", map[string]any{"cidr": "10.0.0.0/26", "username": "alice"}, 200)
	p.call("PUT", "/org/acme/settings?username=alice", map[string]any{"blocked_categories": []int{3}}, 200)
	p.call("PUT", "/settings", map[string]any{"safe_search": true}, 200)
	want := []string{"[10.0.0.0/26]|alice||", "[10.0.0.0/24]|||"}
	p.expectIndex("acme", want...)
	expectBuckets()

	p.stopOrgManager()
	p.stopMapper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, b := range []string{session.Bucket, settings.Bucket} {
		if err := js.DeleteKeyValue(ctx, b); err != nil {
			t.Fatalf("delete bucket %s: %v", b, err)
		}
	}

	p.startMapper()
	p.startOrgManager()
	p.expectIndex("acme", want...)
	expectBuckets()
	p.waitSettled("acme")
}
