package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"layeh.com/radius/rfc2866"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/collector"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	internalradius "github.com/svc-pf/svc-pf/internal/radius"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/settings"
	"github.com/svc-pf/svc-pf/internal/simulator"
)

// natsStartCase is one service started while its NATS server is down.
type natsStartCase struct {
	name string
	// run starts the service as its command does, its HTTP listener on
	// httpAddr, NATS at natsURL; dnsAddr is a free address for the
	// resolver's DNS.
	run func(ctx context.Context, t *testing.T, natsURL, httpAddr, dnsAddr string, log *slog.Logger) error
	// up prepares what the service needs beside the server once NATS
	// runs (the buckets the IP Mapper and the orgmanager would create, an
	// IP Mapper for the orgmanager), and returns a stop for it.
	up func(ctx context.Context, t *testing.T, url string, js jetstream.JetStream) func()
	// works checks the service does its NATS work once NATS is up.
	works func(t *testing.T, base, dnsAddr string, nc *nats.Conn)
}

// nodeBuckets creates the buckets a node follows, as the IP Mapper and
// the orgmanager would.
func nodeBuckets(ctx context.Context, t *testing.T, _ string, js jetstream.JetStream) func() {
	for _, b := range []string{session.Bucket, settings.Bucket} {
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b}); err != nil {
			t.Fatal(err)
		}
	}
	return func() {}
}

// ipMapperUp starts an IP Mapper on the NATS server at url, for the
// services that store through one (the orgmanager's deploys, RADIUS).
func ipMapperUp(ctx context.Context, t *testing.T, url string, _ jetstream.JetStream) func() {
	nc, err := natsbus.Connect(url, "ipmapper", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultIPMapperConfig()
	cfg.HTTP.Address, cfg.Auth.Mode = "127.0.0.1:0", AuthNone
	m, err := StartIPMapper(cfg, nc, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ipmapper: %v", err)
		}
		nc.Close()
	}
}

var natsStartCases = []natsStartCase{
	{
		name: "simulator",
		run: func(ctx context.Context, _ *testing.T, url, httpAddr, _ string, log *slog.Logger) error {
			cfg := DefaultSimulatorConfig()
			cfg.HTTP.Address, cfg.NATS.URL = httpAddr, url
			return RunSimulator(ctx, cfg, "test", log, false)
		},
		up: nodeBuckets,
		works: func(t *testing.T, _, _ string, nc *nats.Conn) {
			// The NATS API was registered after the fact.
			var reply *nats.Msg
			natstest.Eventually(t, "a lookup over NATS", func() (bool, string) {
				var err error
				reply, err = nc.Request(simulator.NATSGroup+"."+simulator.NATSDomain, []byte(`{"domain":"example.com"}`), time.Second)
				return err == nil, fmt.Sprint(err)
			})
			var out map[string]any
			if err := json.Unmarshal(reply.Data, &out); err != nil || out["domain"] != "example.com" {
				t.Fatalf("lookup over NATS: %s (%v)", reply.Data, err)
			}
		},
	},
	{
		name: "ipmapper",
		run: func(ctx context.Context, _ *testing.T, url, httpAddr, _ string, log *slog.Logger) error {
			cfg := DefaultIPMapperConfig()
			cfg.HTTP.Address, cfg.NATS.URL, cfg.Auth.Mode = httpAddr, url, AuthNone
			return RunIPMapper(ctx, cfg, "test", log)
		},
		up: func(context.Context, *testing.T, string, jetstream.JetStream) func() { return func() {} },
		works: func(t *testing.T, base, _ string, _ *nats.Conn) {
			if code, body := httpGet(t, base+"/health"); code != http.StatusOK || !strings.Contains(body, `"role":"active"`) {
				t.Fatalf("/health: %d %s", code, body)
			}
		},
	},
	{
		name: "resolver",
		run: func(ctx context.Context, t *testing.T, url, httpAddr, dnsAddr string, log *slog.Logger) error {
			cfg := DefaultResolverConfig()
			cfg.HTTP.Address, cfg.NATS.URL, cfg.DNS.Listen = httpAddr, url, []string{dnsAddr}
			cfg.Forwarders = []string{startUpstream(t)}
			return RunResolver(ctx, cfg, "test", log)
		},
		up: nodeBuckets,
		works: func(t *testing.T, _, dnsAddr string, _ *nats.Conn) {
			m := dnsFrom(t, "127.0.0.1", dnsAddr, "www.example.test", dns.TypeA, dns.ClassINET)
			if m == nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
				t.Fatalf("DNS once NATS is up: %v", m)
			}
		},
	},
	{
		name: "activity",
		run: func(ctx context.Context, t *testing.T, url, httpAddr, _ string, log *slog.Logger) error {
			cfg := DefaultActivityConfig()
			cfg.HTTP.Address, cfg.NATS.URL, cfg.DataDir = httpAddr, url, t.TempDir()
			return RunActivity(ctx, cfg, "test", log)
		},
		up: func(context.Context, *testing.T, string, jetstream.JetStream) func() { return func() {} },
		works: func(t *testing.T, _, _ string, nc *nats.Conn) {
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			natstest.Eventually(t, "the collector's consumer", func() (bool, string) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_, err := js.Consumer(ctx, activity.Stream, collector.Consumer)
				return err == nil, fmt.Sprint(err)
			})
		},
	},
	{
		name: "orgmanager",
		run: func(ctx context.Context, t *testing.T, url, httpAddr, _ string, log *slog.Logger) error {
			cfg := DefaultOrgManagerConfig()
			cfg.HTTP.Address, cfg.NATS.URL = httpAddr, url
			cfg.Database.URL = "sqlite:" + filepath.Join(t.TempDir(), "org.db")
			// Not the default data/admin.token: nothing under the package.
			cfg.Auth.Mode, cfg.Auth.BootstrapTokenFile = AuthNone, filepath.Join(t.TempDir(), "admin.token")
			return RunOrgManager(ctx, cfg, "test", log)
		},
		// The orgmanager is healthy when its IP Mapper answers: start one.
		up: ipMapperUp,
		works: func(t *testing.T, base, _ string, nc *nats.Conn) {
			req, _ := http.NewRequest(http.MethodPut, base+"/settings", strings.NewReader(`{"blocklist":["x.test"]}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("PUT /settings: %v %v", resp, err)
			}
			resp.Body.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			natstest.Eventually(t, "the global settings deployed", func() (bool, string) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				kv, err := js.KeyValue(ctx, settings.Bucket)
				if err != nil {
					return false, err.Error()
				}
				e, err := kv.Get(ctx, settings.GlobalKey)
				if err != nil {
					return false, err.Error()
				}
				return string(e.Value()) == `{"blocklist":["x.test"]}`, string(e.Value())
			})
		},
	},
	{
		// dnsAddr's port serves as the accounting port (UDP).
		name: "radius",
		run: func(ctx context.Context, _ *testing.T, url, httpAddr, dnsAddr string, log *slog.Logger) error {
			cfg := DefaultRadiusConfig()
			cfg.HTTP.Address, cfg.NATS.URL = httpAddr, url
			cfg.Radius = internalradius.Config{Listen: []string{dnsAddr},
				Clients: []internalradius.ClientConfig{{Network: "127.0.0.1", Secret: e2eRadiusSecret, Org: "acme"}}}
			return RunRadius(ctx, cfg, "test", log)
		},
		// RADIUS stores its sessions through the IP Mapper.
		up: ipMapperUp,
		works: func(t *testing.T, _, dnsAddr string, _ *nats.Conn) {
			// Answered only once the IP Mapper stored the session.
			radiusExchange(t, netip.MustParseAddrPort(dnsAddr), rfc2866.AcctStatusType_Value_Start, "nats-late-1", "dave", "192.0.2.77")
		},
	},
}

// TestServicesWaitForNATSAtStart: every service started while nothing
// listens at its nats.url starts anyway: its /health answers 503 naming
// the URL it waits for, the password hidden; it logs "waiting for NATS"
// once (not at every attempt) and does not exit. Once a NATS server
// comes up on that port, each turns healthy by itself and does its NATS
// work (the simulator answers a lookup over NATS, the IP Mapper serves,
// the resolver answers DNS from its loaded node, the collector has its
// consumer, the orgmanager deploys, RADIUS answers an Accounting Start
// once stored), and says in its log that it connected.
func TestServicesWaitForNATSAtStart(t *testing.T) {
	for _, tc := range natsStartCases {
		t.Run(tc.name, func(t *testing.T) {
			ports := freePorts(t, 3)
			url := fmt.Sprintf("nats://svc:s3cret@127.0.0.1:%d", ports[0])
			httpAddr, dnsAddr := fmt.Sprintf("127.0.0.1:%d", ports[1]), fmt.Sprintf("127.0.0.1:%d", ports[2])
			base := "http://" + httpAddr
			var logs natstest.LogBuffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- tc.run(runCtx, t, url, httpAddr, dnsAddr, log) }()

			want := fmt.Sprintf("waiting for NATS at nats://svc:***@127.0.0.1:%d", ports[0])
			var body string
			natstest.Eventually(t, "/health naming the NATS URL", func() (bool, string) {
				select {
				case err := <-done:
					t.Fatalf("%s exited while NATS was down: %v", tc.name, err)
				default:
				}
				var code int
				code, body = httpGet(t, base+"/health")
				return code == http.StatusServiceUnavailable && strings.Contains(body, want), fmt.Sprint(code, body)
			})
			// A while longer down: still up, still saying so, logged once.
			time.Sleep(1500 * time.Millisecond)
			if code, body := httpGet(t, base+"/health"); code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
				t.Fatalf("/health after 1.5s without NATS: %d %s", code, body)
			}
			if l := logs.String(); strings.Count(l, "waiting for NATS") != 1 || strings.Contains(l, "s3cret") ||
				!strings.Contains(l, strings.TrimPrefix(want, "waiting for NATS at ")) {
				t.Fatalf("log: want one \"waiting for NATS\" naming the URL without its password:\n%s", l)
			}
			if strings.Contains(body, "s3cret") {
				t.Fatalf("/health shows the password: %s", body)
			}

			srv, nc, js := startNATSOn(t, ports[0])
			defer tc.up(ctx, t, srv.ClientURL(), js)()

			waitHealth(t, base, http.StatusOK, 30*time.Second)
			tc.works(t, base, dnsAddr, nc)
			if !strings.Contains(logs.String(), "NATS connected") {
				t.Fatalf("no \"NATS connected\" in the log:\n%s", logs.String())
			}
			stop()
			if err := <-done; err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		})
	}
}

// startNATSOn starts an embedded NATS server on port (the one a service
// was told to wait for) and connects to it; both close when t ends.
func startNATSOn(t *testing.T, port int) (*natsbus.Embedded, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{Port: port, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := natsbus.Connect(srv.ClientURL(), "test", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return srv, nc, js
}

// TestAllWaitsForExternalNATS: under `svc-pf all`, the sections that may
// name a NATS server of their own (ipmapper, orgmanager, simulator) wait
// for one that does not answer at start as the standalone services do:
// the process starts, each of their /health answers 503 naming the URL
// (never "ok" while the server is unreachable), the log names it once per
// section; once the server comes up the IP Mapper and the orgmanager turn
// healthy and the simulator's /health stops naming it.
func TestAllWaitsForExternalNATS(t *testing.T) {
	port := freePorts(t, 1)[0]
	url := fmt.Sprintf("nats://svc:s3cret@127.0.0.1:%d", port)
	want := fmt.Sprintf("waiting for NATS at nats://svc:***@127.0.0.1:%d", port)
	cfg := testAllConfig(t)
	cfg.IPMapper.NATS.URL, cfg.OrgManager.NATS.URL, cfg.Simulator.NATS.URL = url, url, url
	var logs natstest.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all, err := StartAll(ctx, cfg, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- all.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	bases := map[string]string{
		"ipmapper":   "http://" + all.IPMapper.Addr().String(),
		"orgmanager": "http://" + all.OrgManager.Addr().String(),
		"simulator":  "http://" + all.Simulator.Addr().String(),
	}
	for name, base := range bases {
		natstest.Eventually(t, name+"'s /health naming the NATS URL", func() (bool, string) {
			select {
			case err := <-done:
				t.Fatalf("svc-pf all exited while its sections' NATS was down: %v", err)
			default:
			}
			code, body := httpGet(t, base+"/health")
			return code == http.StatusServiceUnavailable && strings.Contains(body, want) && !strings.Contains(body, "s3cret"),
				fmt.Sprint(code, body)
		})
	}
	l := logs.String()
	for _, name := range []string{"ipmapper", "orgmanager", "simulator"} {
		line := `msg="waiting for NATS; retrying in the background, the service starts meanwhile" service=` + name
		if strings.Count(l, line) != 1 || strings.Contains(l, "s3cret") {
			t.Fatalf("log: want one %q naming the URL without its password:\n%s", line, l)
		}
	}

	startNATSOn(t, port)
	waitHealth(t, bases["ipmapper"], http.StatusOK, 30*time.Second)
	waitHealth(t, bases["orgmanager"], http.StatusOK, 30*time.Second)
	natstest.Eventually(t, "the simulator's /health no longer waiting for NATS", func() (bool, string) {
		_, body := httpGet(t, bases["simulator"]+"/health")
		return !strings.Contains(body, "waiting for NATS"), body
	})
}
