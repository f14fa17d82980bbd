package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/collector"
	"github.com/svc-pf/svc-pf/internal/activity/store"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/natsbus"
)

// ActivityConfig is `svc-pf activity`'s configuration file: the collector
// that moves the nodes' activity from the stream ACTIVITY into the store.
type ActivityConfig struct {
	HTTP httpapi.Config `yaml:"http"`
	Log  LogConfig      `yaml:"log"`
	NATS NATSConfig     `yaml:"nats"`
	// DataDir holds the day files (<data_dir>/activity) when
	// activity.store.url is empty.
	DataDir  string          `yaml:"data_dir"`
	Activity activity.Config `yaml:"activity"`

	// Registry gets the collector's metrics (not a file key): under
	// `svc-pf all` the node listener's, which serves them; nil, a
	// registry of the collector's own listener.
	Registry *prometheus.Registry `yaml:"-"`
}

// DefaultActivityConfig is what runs when the file sets nothing.
func DefaultActivityConfig() ActivityConfig {
	return ActivityConfig{
		HTTP:     httpapi.Config{Address: "127.0.0.1:8084"},
		Log:      LogConfig{Level: "info"},
		DataDir:  defaultDataDir,
		Activity: activity.DefaultConfig(),
	}
}

// Validate checks the configuration before anything starts.
func (c *ActivityConfig) Validate() error {
	var errs []error
	errs = append(errs, prefixed("activity", c.HTTP.Validate()), c.Log.validate(), prefixed("activity", c.Activity.Validate()))
	if c.NATS.URL == "" {
		errs = append(errs, errors.New("nats.url is required: the collector reads the stream ACTIVITY from NATS JetStream"))
	}
	if c.Activity.Store.URL == "" && c.DataDir == "" {
		errs = append(errs, errors.New("data_dir is required when activity.store.url is empty (the day files go to <data_dir>/activity)"))
	}
	return errors.Join(errs...)
}

// ActivityDir is the default directory of the day files under dataDir.
func ActivityDir(dataDir string) string { return filepath.Join(dataDir, "activity") }

// RunActivity runs the standalone collector until ctx ends.
func RunActivity(ctx context.Context, cfg ActivityConfig, v Version, log *slog.Logger) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nc, aw, err := connectBus(ctx, cfg.NATS.URL, "svc-pf activity", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	a, err := StartActivity(ctx, cfg, nc, v, log)
	if err != nil {
		return err
	}
	a.natsWait = aw
	if err := a.Run(ctx); err != nil {
		return err
	}
	log.Info("svc-pf activity stopped")
	return nil
}

// Activity is the collector with its store and, standalone, its
// health/metrics listener.
type Activity struct {
	Store     *store.Store
	Collector *collector.Collector
	server    *httpapi.Server
	log       *slog.Logger
	// natsWait is the standalone collector's wait for its NATS server
	// (connectBus), nil under `svc-pf all`: set before Run.
	natsWait *natsbus.Await
}

// StartActivity opens the store, builds the collector and binds the
// listener (none when cfg.HTTP.Address is empty: under `svc-pf all`,
// where the node listener reports its health).
func StartActivity(ctx context.Context, cfg ActivityConfig, nc *nats.Conn, v Version, log *slog.Logger) (*Activity, error) {
	log = log.With("service", "activity")
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := store.Open(octx, store.Config{URL: cfg.Activity.Store.URL, DefaultDir: ActivityDir(cfg.DataDir),
		Retention: cfg.Activity.Retention})
	if err != nil {
		return nil, err
	}
	reg := cfg.Registry
	if reg == nil {
		reg = newRegistry()
	}
	col, err := collector.New(collector.Config{JS: js, Activity: cfg.Activity, Store: st, Registerer: reg, Logger: log})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	a := &Activity{Store: st, Collector: col, log: log}
	if cfg.HTTP.Address == "" {
		return a, nil
	}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log, Registerer: reg})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "activity", Version: string(v), Gatherer: reg,
		Ready: func() error {
			if err := a.natsWait.Err(); err != nil {
				return err
			}
			return col.Health()
		},
		Info: func() any {
			return map[string]any{"nats": nc.ConnectedUrlRedacted(), "store": st.Kind(), "stream": activity.Stream,
				"consumer": collector.Consumer}
		},
	})
	if a.server, err = httpapi.Listen(cfg.HTTP, router, log); err != nil {
		_ = st.Close()
		return nil, err
	}
	log.Info("activity collector listening", "address", a.server.Addr().String(), "store", st.Kind())
	return a, nil
}

// Addr is the listener's address (nil without one).
func (a *Activity) Addr() net.Addr {
	if a.server == nil {
		return nil
	}
	return a.server.Addr()
}

// Run collects (and serves the listener) until ctx ends, then closes the
// store.
func (a *Activity) Run(ctx context.Context) error {
	defer func() {
		if err := a.Store.Close(); err != nil {
			a.log.Warn("activity store close", "err", err)
		}
	}()
	if a.server == nil {
		return a.Collector.Run(ctx)
	}
	done := make(chan error, 1)
	go func() {
		// Until NATS first answers, its Await says so (log, /health).
		if !awaitDone(ctx, a.natsWait) {
			done <- nil
			return
		}
		done <- a.Collector.Run(ctx)
	}()
	err := a.server.Serve(ctx)
	if cerr := <-done; cerr != nil {
		err = errors.Join(err, fmt.Errorf("collector: %w", cerr))
	}
	return err
}
