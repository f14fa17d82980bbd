// Command simulator is the load harness of the simulator's performance
// target, ≥ 10 000 simulations/s at p99 ≤ 5 ms (bench/simulator.sh runs it,
// docs/performance.md reports it). It is not part of svc-pf.
//
//	simulator gen   -work DIR -lists DIR [-feed-keys N] [-sessions N] [-orgs N] [-paths N] [-hot N]
//	simulator nats  -work DIR
//	simulator serve -work DIR [-nats URL] [-sessions N] [-orgs N] [-workers N] [-listen ADDR] [-micro [-micro-profile FILE]]
//	simulator load  -addr HOST:PORT -paths FILE [-rate N] [-duration D] [-warmup D] [-conns N] [-timeline FILE]
//	simulator gcjoin -timeline FILE -serve-log FILE -start UNIX_NS
//
// gen builds the feed directory DIR/feed with feedbuild (the real lists of
// -lists, read in place, plus synthetic domains up to -feed-keys keys) and
// writes the request paths wrk picks from: DIR/paths-uniform.txt (clients
// spread over every session) and DIR/paths-hot.txt (clients among -hot
// sessions, whose compiled policies stay in the engine's cache).
//
// nats runs the NATS server (natsbus.StartEmbedded, JetStream in DIR/nats)
// in a process of its own, prints "NATS <url>" on stdout and serves until
// SIGINT/SIGTERM. A simulator node follows a NATS server elsewhere (only
// `svc-pf all` embeds one): in serve's process, the server's JetStream
// store of 131 001 documents would be marked by every GC cycle of the
// simulator's, a cost production does not have.
//
// serve builds the node's read models as a simulator node has them — a
// sessionindex.Index of -sessions synthetic sessions, the real settings read
// model (readmodel/settings) following the "settings" bucket of the NATS
// server at -nats (without -nats, of one embedded in serve's own process)
// filled with documents for many of those sessions, and a real
// feeds.Client loaded from DIR/feed — starts the simulator over them exactly
// as internal/app/simulator.go wires it (simulator.New, Maintain, an
// httpapi router with Mount and MountStandard, httpapi.Listen; the embedded
// default entry file; -workers Lua workers), prints "READY <addr>" on
// stdout and serves until SIGINT/SIGTERM. With -micro it first measures,
// in process and without HTTP, what one simulate costs in each layer.
//
// load offers requests at a fixed rate and reports latencies measured from
// when each request was due (load.go); gcjoin lines those latencies up
// with the server's GC cycles (gcjoin.go).
//
// Sessions, settings and requests are functions of their index, so gen and
// serve agree without sharing anything but the flags.
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/feedbuild"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	settingsmodel "github.com/svc-pf/svc-pf/internal/readmodel/settings"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
	"github.com/svc-pf/svc-pf/internal/settings"
	"github.com/svc-pf/svc-pf/internal/simulator"
)

// APIKey is the api_keys entry the harness configures; wrk sends it.
const APIKey = "bench-key"

type params struct {
	work     string
	lists    string
	feedKeys int
	sessions int
	orgs     int
	paths    int
	hot      int
	workers  int
	listen   string
	natsURL  string
	micro    bool
	profile  string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: simulator gen|serve|load [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "load", "gcjoin":
		run := map[string]func([]string) error{"load": load, "gcjoin": gcjoin}[os.Args[1]]
		if err := run(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "simulator %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		return
	case "serve":
		// The origin of GODEBUG=gctrace=1's "@S.SSSs" (the runtime starts
		// a fraction of a millisecond earlier), for gcjoin.
		fmt.Printf("START %d\n", time.Now().UnixNano())
	}
	var p params
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	fs.StringVar(&p.work, "work", "", "work directory (feed, NATS store, request paths)")
	fs.StringVar(&p.lists, "lists", "", "directory of the real filter lists (gen)")
	fs.IntVar(&p.feedKeys, "feed-keys", 1_000_000, "keys of the feed: the real lists' plus synthetic ones (gen)")
	fs.IntVar(&p.sessions, "sessions", 1_000_000, "sessions (at most 16 777 216: 10.x.y.z/32)")
	fs.IntVar(&p.orgs, "orgs", 1000, "organisations")
	fs.IntVar(&p.paths, "paths", 200_000, "request paths per file (gen)")
	fs.IntVar(&p.hot, "hot", 10_000, "sessions of the hot request file (gen)")
	fs.IntVar(&p.workers, "workers", 2, "lua.workers (serve)")
	fs.StringVar(&p.listen, "listen", "127.0.0.1:0", "http.address (serve)")
	fs.StringVar(&p.natsURL, "nats", "", "NATS server to publish and follow the settings in; empty: one embedded in this process (serve)")
	fs.BoolVar(&p.micro, "micro", false, "measure the layers of one simulate in process before serving (serve)")
	fs.StringVar(&p.profile, "micro-profile", "", "with -micro: write the CPU profile of the measurements to this file and the allocations to FILE.allocs")
	_ = fs.Parse(os.Args[2:])
	if p.work == "" || p.sessions < 1 || p.sessions > 1<<24 || p.orgs < 1 || p.orgs > p.sessions {
		fmt.Fprintln(os.Stderr, "need -work, 1 ≤ -orgs ≤ -sessions ≤ 16777216")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	switch os.Args[1] {
	case "gen":
		err = gen(p, log)
	case "serve":
		err = serve(p, log)
	case "nats":
		err = runNATS(p)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		log.Error("simulator bench", "err", err)
		os.Exit(1)
	}
}

// ---- the synthetic population -------------------------------------------

// orgOf is session i's organisation: contiguous blocks of sessions, as an
// operator's address ranges are.
func orgOf(p params, i int) string {
	return fmt.Sprintf("org-%04d", int(int64(i)*int64(p.orgs)/int64(p.sessions)))
}

func addrOf(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

func usernameOf(i int) string { return fmt.Sprintf("user-%07d", i) }

// deviceOf is session i's device id; every fourth session has one.
func deviceOf(i int) string {
	if i%4 != 1 {
		return ""
	}
	return fmt.Sprintf("mac:%012x", uint64(i)*0x9e3779b1&0xffffffffffff)
}

// locationOf: two thirds of the sessions are at a location of their org.
func locationOf(i int) string {
	switch i % 3 {
	case 0:
		return "hq"
	case 1:
		return "branch"
	}
	return ""
}

func sessionOf(p params, i int, now time.Time) *session.Session {
	pfx := netip.PrefixFrom(addrOf(i), 32)
	a := identity.Attributes{Username: usernameOf(i), DeviceID: deviceOf(i), Location: locationOf(i)}
	org := orgOf(p, i)
	return &session.Session{ID: session.NewID(identity.Identity{Org: org, Attributes: a}, pfx), Org: org,
		Revision: 1, Allocations: []netip.Prefix{pfx}, Attributes: a, UpdatedAt: now}
}

// Feed codes: 1–4 the real lists' (as bench/feeds.sh builds them), 5–40
// synthetic categories.
const firstSynthetic, lastSynthetic = 5, 40

var tlds = []string{"com", "net", "org", "de", "ru", "info", "io", "xyz", "co.uk", "fr", "nl", "top", "br", "pl", "it", "es"}
var syllables = []string{"ka", "lo", "mi", "net", "zu", "ra", "ve", "to", "shop", "bet", "cdn", "play", "news", "cam", "tube", "pix", "go", "my", "web", "hub"}

// synthName is synthetic feed domain i (unique: its index is a label); i
// beyond the feed's synthetic count gives names the feed does not hold.
func synthName(i int) string {
	r := rand.New(rand.NewPCG(uint64(i), 0x5eed))
	var b strings.Builder
	if r.IntN(10) == 0 {
		b.WriteString([]string{"www.", "img.", "api.", "m."}[r.IntN(4)])
	}
	b.WriteString(syllables[r.IntN(len(syllables))])
	b.WriteString(syllables[r.IntN(len(syllables))])
	b.WriteByte('-')
	b.WriteString(strconv.FormatInt(int64(i), 36))
	b.WriteByte('.')
	b.WriteString(tlds[r.IntN(len(tlds))])
	return b.String()
}

func synthCodes(i int) string {
	r := rand.New(rand.NewPCG(uint64(i), 0xc0de))
	c := firstSynthetic + r.IntN(lastSynthetic-firstSynthetic+1)
	if r.IntN(10) == 0 {
		return fmt.Sprintf("%d;%d", c, firstSynthetic+r.IntN(lastSynthetic-firstSynthetic+1))
	}
	return strconv.Itoa(c)
}

// realSources are bench/feeds.sh's, read in place.
func realSources(lists string) []feedbuild.Source {
	src := func(format string, code uint16, file string) feedbuild.Source {
		return feedbuild.Source{Format: format, Codes: []uint16{code}, Path: filepath.Join(lists, file)}
	}
	return []feedbuild.Source{
		src("adblock", 1, "easylist.txt"), src("adblock", 2, "easyprivacy.txt"), src("adblock", 3, "badware.min.txt"),
		src("domains", 4, "urlhaus-filter-online.txt"), src("adblock", 4, "urlhaus-filter-online.txt"),
	}
}

// ---- gen -----------------------------------------------------------------

func gen(p params, log *slog.Logger) error {
	if p.lists == "" {
		return errors.New("gen needs -lists")
	}
	if err := os.MkdirAll(p.work, 0o755); err != nil {
		return err
	}
	// The real lists' keys, to size the synthetic part and to pick request
	// names from.
	real := feedbuild.Content{}
	for _, s := range realSources(p.lists) {
		if _, err := feedbuild.Import(s, func(e feedbuild.Entry) { real.Add(e.Key(), e.Codes) }); err != nil {
			return err
		}
	}
	nSynth := max(0, p.feedKeys-len(real))
	csvPath := filepath.Join(p.work, "synthetic.csv")
	f, err := os.Create(csvPath)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := range nSynth {
		fmt.Fprintf(w, "%s,%s\n", synthName(i), synthCodes(i))
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return err
	}
	titles := map[uint16]string{1: "advertising", 2: "tracking", 3: "badware", 4: "malware"}
	for c := firstSynthetic; c <= lastSynthetic; c++ {
		titles[uint16(c)] = fmt.Sprintf("category-%d", c)
	}
	t0 := time.Now()
	res, err := feedbuild.Build(context.Background(), feedbuild.BuildConfig{
		Dir: filepath.Join(p.work, "feed"), Name: "bench", Titles: titles, Snapshot: true,
		Sources: append([]feedbuild.Source{{Format: "csv", Path: csvPath}}, realSources(p.lists)...),
	})
	if err != nil {
		return err
	}
	_ = os.Remove(csvPath)
	log.Info("feed built", "keys", res.Keys, "real_list_keys", len(real), "synthetic", nSynth,
		"snapshot_bytes", res.SnapshotSize, "took", time.Since(t0).Round(time.Millisecond))

	var realHosts []string
	for k := range real {
		if !strings.Contains(k, "/") {
			realHosts = append(realHosts, k)
		}
	}
	sort.Strings(realHosts) // deterministic
	if err := writePaths(p, filepath.Join(p.work, "paths-uniform.txt"), 1, nSynth, realHosts, nil); err != nil {
		return err
	}
	hot := make([]int, min(p.hot, p.sessions))
	for k := range hot {
		hot[k] = int(int64(k) * int64(p.sessions) / int64(len(hot)))
	}
	return writePaths(p, filepath.Join(p.work, "paths-hot.txt"), 2, nSynth, realHosts, hot)
}

// writePaths writes p.paths request paths of GET /api/v1/simulate: the
// client by ip (85 %; 2 % of them an address without a session), username
// (10 %) or device id (5 %); the name a synthetic feed entry (40 %, a
// quarter of those one label below it), a real list's (15 %) or a name no
// feed holds (45 %). sessions, when given, are the only clients.
func writePaths(p params, file string, seed uint64, nSynth int, realHosts []string, sessions []int) error {
	r := rand.New(rand.NewPCG(seed, 42))
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for range p.paths {
		i := r.IntN(p.sessions)
		if sessions != nil {
			i = sessions[r.IntN(len(sessions))]
		}
		q := url.Values{}
		switch x := r.IntN(100); {
		case x < 85:
			a := addrOf(i)
			if r.IntN(50) == 0 {
				a = netip.AddrFrom4([4]byte{11, byte(i >> 16), byte(i >> 8), byte(i)})
			}
			q.Set("ip", a.String())
		case x < 95:
			q.Set("username", usernameOf(i))
		default:
			d := deviceOf(i - i%4 + 1)
			if i-i%4+1 >= p.sessions {
				d = deviceOf(1)
			}
			q.Set("deviceid", hex.EncodeToString([]byte(d)))
		}
		var name string
		switch x := r.IntN(100); {
		case x < 40 && nSynth > 0:
			name = synthName(r.IntN(nSynth))
			if r.IntN(4) == 0 {
				name = "a." + name
			}
		case x < 55 && len(realHosts) > 0:
			name = realHosts[r.IntN(len(realHosts))]
		default:
			name = synthName(nSynth + 100_000_000 + r.IntN(1<<30))
		}
		q.Set("domain", name)
		fmt.Fprintf(w, "/api/v1/simulate?%s\n", q.Encode())
	}
	return errors.Join(w.Flush(), f.Close())
}

// ---- serve ---------------------------------------------------------------

// docsFor returns the settings documents of the population: the global
// layer, each org's own, three profiles and two locations per org, a
// username document for every tenth session and a device document for
// every tenth device.
func docsFor(p params, yield func(key string, doc string)) {
	yield(settings.GlobalKey, `{"blocked_categories":[3,4],"blocklist":["global-block.example"]}`)
	r := rand.New(rand.NewPCG(9, 9))
	cats := func(n int) string {
		cs := make([]string, n)
		for k := range cs {
			cs[k] = strconv.Itoa(firstSynthetic + r.IntN(lastSynthetic-firstSynthetic+1))
		}
		return "[" + strings.Join(cs, ",") + "]"
	}
	names := func(prefix string, n int) string {
		ns := make([]string, n)
		for k := range ns {
			ns[k] = fmt.Sprintf("%q", fmt.Sprintf("%s%d.example", prefix, r.IntN(100_000)))
		}
		return "[" + strings.Join(ns, ",") + "]"
	}
	for o := range p.orgs {
		org := fmt.Sprintf("org-%04d", o)
		doc := fmt.Sprintf(`{"blocked_categories":%s,"allowlist":%s,"blocklist":%s,"safe_search":%t,"profile":%d`,
			cats(6), names("allowed", 10), names("blocked", 20), o%3 == 0, o%3)
		switch o % 5 {
		case 0:
			doc += `,"action":{"type":"redirect","a":["192.0.2.1"],"aaaa":["2001:db8::1"]}`
		case 1:
			doc += `,"action":{"type":"nodata"}`
		}
		if o%7 == 0 {
			doc += `,"schedules":[{"days":["mon","tue","wed","thu","fri"],"from":"08:00","to":"15:30","tz":"Europe/Amsterdam","blocked_categories":[10,11,12]}]`
		}
		yield(settings.Key(org, settings.Scope{Kind: settings.ScopeOrg}), doc+"}")
		for pr := 1; pr <= 3; pr++ {
			yield(settings.Key(org, settings.Scope{Kind: settings.ScopeProfile, Profile: pr}),
				fmt.Sprintf(`{"blocked_categories":%s}`, cats(4)))
		}
		yield(settings.Key(org, settings.Scope{Kind: settings.ScopeLocation, Value: "hq"}), `{"blocked_networks":["10.0.0.0/8"]}`)
		yield(settings.Key(org, settings.Scope{Kind: settings.ScopeLocation, Value: "branch"}), fmt.Sprintf(`{"blocklist":%s}`, names("branch", 5)))
	}
	for i := 0; i < p.sessions; i += 10 {
		var doc string
		switch {
		case i%1000 == 0:
			doc = `{"filtering":false}`
		case i%700 == 0:
			doc = `{"paused":true}`
		case i%30 == 0:
			doc = `{"profile":2}`
		default:
			doc = fmt.Sprintf(`{"blocked_categories":%s,"allowlist":%s}`, cats(3), names("kid", 3))
		}
		yield(settings.Key(orgOf(p, i), settings.Scope{Kind: settings.ScopeUsername, Value: usernameOf(i)}), doc)
	}
	for i := 1; i < p.sessions; i += 40 {
		yield(settings.Key(orgOf(p, i), settings.Scope{Kind: settings.ScopeDeviceID, Value: deviceOf(i)}),
			fmt.Sprintf(`{"safe_search":true,"blocked_categories":%s}`, cats(2)))
	}
}

func serve(p params, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	reg := prometheus.NewRegistry() // as app.newRegistry
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Sessions: the subscriber index, built in bulk.
	t0 := time.Now()
	b := sessionindex.NewBuilder(p.sessions)
	now := time.Now().UTC()
	for i := range p.sessions {
		b.Put(sessionOf(p, i, now))
	}
	ix := b.Index()
	b = nil
	log.Info("sessions indexed", "sessions", ix.Len(), "took", time.Since(t0).Round(time.Millisecond))
	forcedGC(log, "sessions")

	// Settings: the real read model following the bucket of the NATS
	// server at -nats, or of one embedded here (as under `svc-pf all`).
	t0 = time.Now()
	natsURL := p.natsURL
	if natsURL == "" {
		srv, err := startNATS(p.work)
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		natsURL = srv.ClientURL()
	}
	nc, err := natsbus.Connect(natsURL, "simulator bench", log, false)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: settings.Bucket, History: 1}); err != nil {
		return err
	}
	ndocs, perr := 0, error(nil)
	docsFor(p, func(key, doc string) {
		if perr != nil {
			return
		}
		d, err := settings.Parse([]byte(doc))
		if err != nil {
			perr = fmt.Errorf("%s: %w", key, err)
			return
		}
		if _, err := js.PublishAsync("$KV."+settings.Bucket+"."+key, []byte(d.String())); err != nil {
			perr = err
			return
		}
		if ndocs++; ndocs%2000 == 0 {
			<-js.PublishAsyncComplete()
		}
	})
	if perr != nil {
		return perr
	}
	<-js.PublishAsyncComplete()
	sm, err := settingsmodel.New(settingsmodel.Config{JetStream: js, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	go func() { _ = sm.Run(ctx) }()
	if err := sm.WaitReady(ctx); err != nil {
		return err
	}
	log.Info("settings loaded", "documents", sm.Snapshot().Len(), "published", ndocs, "took", time.Since(t0).Round(time.Millisecond))
	loaded := "sessions, settings"
	if p.natsURL == "" {
		loaded += " (and the embedded NATS server)"
	}
	forcedGC(log, loaded)

	// Feeds: a real client of the directory gen built.
	t0 = time.Now()
	fc, err := feeds.New(feeds.Config{Feeds: []feeds.FeedConfig{{Name: "bench", URL: filepath.Join(p.work, "feed")}},
		Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	go func() { _ = fc.Run(ctx) }()
	if err := fc.WaitReady(ctx); err != nil {
		return err
	}
	entries := 0
	for _, f := range fc.Set().Feeds() {
		entries += f.Entries
	}
	log.Info("feed loaded", "entries", entries, "took", time.Since(t0).Round(time.Millisecond))
	forcedGC(log, "sessions, settings, feed")

	// The engine and the simulator, as app.StartSimulator wires them (the
	// node's View with no RPZ zone configured).
	view := func() policy.View {
		return policy.View{Sessions: ix, Settings: sm.Snapshot(), Categories: fc.Set()}
	}
	eng, err := policy.NewEngine(policy.EngineConfig{View: view})
	if err != nil {
		return err
	}
	svcLog := log.With("service", "simulator")
	svc, err := simulator.New(simulator.Config{
		Engine: eng, Feeds: fc,
		Sizes:   benchSizes{ix: ix, sm: sm},
		Workers: p.workers, CallTimeout: 5 * time.Second, APIKeys: []string{APIKey}, PProf: true,
		Region: "bench", Version: "bench", Logger: svcLog, Registerer: reg,
	})
	if err != nil {
		return err
	}
	defer svc.Close()
	if err := svc.Maintain(ctx); err != nil {
		return err
	}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: svcLog, Registerer: reg})
	if err != nil {
		return err
	}
	svc.Mount(router)
	httpapi.MountStandard(router, httpapi.StandardConfig{Service: "simulator", Version: "bench", Gatherer: reg,
		Ready: func() error { return nil }, Info: svc.Info})

	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	log.Info("read models loaded", "heap_inuse_mb", ms.HeapInuse>>20, "rss_mb", rssMB("VmRSS"), "peak_rss_mb", rssMB("VmHWM"))

	if p.micro {
		if err := micro(ctx, p, eng, svc, log); err != nil {
			return err
		}
	}

	server, err := httpapi.Listen(httpapi.Config{Address: p.listen}, router, svcLog)
	if err != nil {
		return err
	}
	fmt.Printf("READY %s\n", server.Addr())
	go runtimeStats(ctx, log)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	err = server.Serve(ctx)
	return errors.Join(err, <-done)
}

// forcedGC runs a whole GC cycle and logs how long it took and what it
// found live: with nothing else running, a cycle's wall time is the mark
// work of the heap so far spread over GOMAXPROCS, so the differences
// between the steps of serve say what each read model costs every GC
// cycle under load.
// startNATS starts a NATS server with JetStream over a fresh store in
// work/nats.
func startNATS(work string) (*natsbus.Embedded, error) {
	storeDir := filepath.Join(work, "nats")
	_ = os.RemoveAll(storeDir)
	return natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: storeDir, ServerName: "bench"})
}

// runNATS is the nats mode: the server alone, until a signal.
func runNATS(p params) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := startNATS(p.work)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	fmt.Printf("NATS %s\n", srv.ClientURL())
	<-ctx.Done()
	return nil
}

func forcedGC(log *slog.Logger, loaded string) {
	runtime.GC() // the garbage of loading, so that the timed cycle marks only what stays
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/heap:bytes"}}
	metrics.Read(s)
	cpu0 := s[0].Value.Float64()
	t0 := time.Now()
	runtime.GC()
	took := time.Since(t0)
	metrics.Read(s)
	log.Info("forced GC", "loaded", loaded, "wall_ms", took.Milliseconds(),
		"gc_cpu_ms", int((s[0].Value.Float64()-cpu0)*1000), "heap_live_mb", s[1].Value.Uint64()>>20,
		"scannable_heap_mb", s[2].Value.Uint64()>>20)
}

// runtimeStats logs the heap and the GC's share of the CPU every 10 s, for
// the script to report next to a run's figures.
func runtimeStats(ctx context.Context, log *slog.Logger) {
	names := []string{"/gc/heap/live:bytes", "/memory/classes/heap/objects:bytes", "/gc/cycles/total:gc-cycles",
		"/cpu/classes/gc/total:cpu-seconds", "/cpu/classes/total:cpu-seconds"}
	samples := make([]metrics.Sample, len(names))
	for i, n := range names {
		samples[i].Name = n
	}
	read := func() (live, objects, cycles uint64, gcCPU, allCPU float64) {
		metrics.Read(samples)
		return samples[0].Value.Uint64(), samples[1].Value.Uint64(), samples[2].Value.Uint64(),
			samples[3].Value.Float64(), samples[4].Value.Float64()
	}
	_, _, c0, g0, a0 := read()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		live, objects, c1, g1, a1 := read()
		share := 0.0
		if a1 > a0 {
			share = (g1 - g0) / (a1 - a0)
		}
		log.Info("runtime", "heap_live_mb", live>>20, "heap_objects_mb", objects>>20, "gc_cycles_10s", c1-c0,
			"gc_cpu_share", fmt.Sprintf("%.0f%%", share*100), "rss_mb", rssMB("VmRSS"))
		c0, g0, a0 = c1, g1, a1
	}
}

// rssMB reads a Vm* line of /proc/self/status, in MB.
func rssMB(field string) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb >> 10
		}
	}
	return -1
}

// ---- in-process figures --------------------------------------------------

// micro measures one simulate layer by layer, without HTTP, on one
// goroutine: the engine alone (Evaluate: identity, cached or compiled
// policy, decision), the whole built-in call through a Lua worker
// (svc.Do: request table → Lua → svcpf.simulate_user → body table → Go),
// and encoding that body as JSON; for the hot and the uniform request files.
// It also times the DNS path (PolicyFor + DecideInto, a reused Decision)
// over the same view and clients.
func micro(ctx context.Context, p params, eng *policy.Engine, svc *simulator.Service, log *slog.Logger) error {
	if p.profile != "" {
		f, err := os.Create(p.profile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
			if a, err := os.Create(p.profile + ".allocs"); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(a, 0)
				_ = a.Close()
			}
		}()
	}
	for _, kind := range []string{"hot", "uniform"} {
		reqs, err := readRequests(filepath.Join(p.work, "paths-"+kind+".txt"))
		if err != nil {
			return err
		}
		for _, r := range reqs { // the cache as a node that served these clients has it
			q := query(r)
			eng.Evaluate(&q)
		}
		k := 0
		next := func() *simulator.Request { k++; return reqs[k%len(reqs)] }
		report := func(what string, ns, allocs float64) {
			log.Info("micro", "requests", kind, "what", what, "ns_per_op", int(ns), "allocs_per_op", int(allocs))
			fmt.Printf("MICRO %-7s %-40s %9.0f ns/op %7.0f allocs/op\n", kind, what, ns, allocs)
		}
		ns, al := measure(func() { q := query(next()); eng.Evaluate(&q) })
		report("engine.Evaluate", ns, al)
		ns, al = measure(func() { _, _ = svc.Do(ctx, simulator.CallSimulateUser, next()) })
		report("svc.Do(simulate_user): Lua + built-in", ns, al)
		ns, al = measure(func() {
			body, _ := svc.Do(ctx, simulator.CallSimulateUser, next())
			_, _ = json.Marshal(body)
		})
		report("svc.Do + json.Marshal(body)", ns, al)
		var buf []byte
		ns, al = measure(func() {
			body, _ := svc.Do(ctx, simulator.CallSimulateUser, next())
			buf, _ = simulator.AppendBody(buf[:0], simulator.CallSimulateUser, body)
		})
		report("svc.Do + simulator.AppendBody (HTTP's)", ns, al)
		// As the resolver does it: a reused Decision and Input.
		d := policy.Decision{Trace: make([]policy.TraceEntry, 0, policy.TraceCap), Categories: make([]feed.Category, 0, 8)}
		var in policy.Input
		ns, al = measure(func() {
			r := next()
			v := eng.View()
			pol, _, _ := eng.PolicyFor(&v, r.IP)
			in = policy.Input{Domain: r.Domain, Time: time.Now(), RPZ: v.RPZ}
			policy.DecideInto(&d, &in, pol, v.Categories)
		})
		report("PolicyFor+DecideInto (DNS path, by ip)", ns, al)
	}
	return nil
}

// query is the engine's question for r, as the simulate_user built-in asks
// it.
func query(r *simulator.Request) policy.Query {
	return policy.Query{
		Input: policy.Input{Domain: r.Domain, Path: r.Path, AnswerAddr: r.RulesIP, Time: time.Now()},
		IP:    r.IP, Username: r.Username, DeviceID: r.DeviceID,
		Profile: r.Profile, HasProfile: r.HasProfile, Settings: r.Settings,
	}
}

func readRequests(file string) ([]*simulator.Request, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []*simulator.Request
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		_, raw, _ := strings.Cut(l, "?")
		q, err := url.ParseQuery(raw)
		if err != nil {
			return nil, err
		}
		r, err := simulator.ParseSimulate(q)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// measure runs f for about two seconds and returns the time and the heap
// allocations per call.
func measure(f func()) (nsPerOp, allocsPerOp float64) {
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	n, t0 := 0, time.Now()
	for time.Since(t0) < 2*time.Second {
		for range 100 {
			f()
		}
		n += 100
	}
	el := time.Since(t0)
	runtime.ReadMemStats(&m1)
	return float64(el.Nanoseconds()) / float64(n), float64(m1.Mallocs-m0.Mallocs) / float64(n)
}

// benchSizes sizes the bench's models as the node sizes its read models
// (simulator.Sizes).
type benchSizes struct {
	ix *sessionindex.Index
	sm *settingsmodel.Model
}

func (b benchSizes) SessionCount() int          { return b.ix.Len() }
func (b benchSizes) SettingsDocumentCount() int { return b.sm.Snapshot().Len() }
