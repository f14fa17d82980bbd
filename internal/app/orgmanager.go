package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/svc-pf/svc-pf/docs"
	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/orgmanager"
	"github.com/svc-pf/svc-pf/internal/orgstore"
)

// Version is the build's version string, set by the command.
type Version string

// OrgManager is a started orgmanager: listener bound, store open.
type OrgManager struct {
	store    *orgstore.Store
	deployer *deploy.Deployer
	server   *httpapi.Server
	log      *slog.Logger
}

// StartOrgManager opens the store, builds the deploy pipeline (publishing to
// the IP Mapper over nc when it is not nil) and binds the HTTP listener.
func StartOrgManager(ctx context.Context, cfg OrgManagerConfig, nc *nats.Conn, version Version, log *slog.Logger) (*OrgManager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log = log.With("service", "orgmanager")
	reg := newRegistry()

	store, err := orgstore.Open(ctx, orgstore.Config{URL: cfg.Database.URL})
	if err != nil {
		return nil, err
	}
	var publisher deploy.Publisher = deploy.Discard{}
	if nc != nil {
		client, err := mapperclient.NewClient(mapperclient.ClientConfig{Conn: nc, Timeout: cfg.Deploy.PublishTimeout})
		if err != nil {
			store.Close()
			return nil, err
		}
		publisher = mapperclient.Publisher{Client: client}
	}
	deployer, err := deploy.New(deploy.Config{
		Store: store, Publisher: publisher, Workers: cfg.Deploy.Workers,
		VersionCheckInterval: cfg.Deploy.VersionCheckInterval, FullRedeployInterval: cfg.Deploy.FullRedeployInterval,
		RetryMin: cfg.Deploy.RetryMin, RetryMax: cfg.Deploy.RetryMax, PublishTimeout: cfg.Deploy.PublishTimeout,
		Logger: log, Registerer: reg,
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	api, err := orgmanager.New(orgmanager.Config{Store: store, Deployer: deployer, Logger: log})
	if err != nil {
		store.Close()
		return nil, err
	}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log, Registerer: reg})
	if err != nil {
		store.Close()
		return nil, err
	}
	api.Register(router)
	docs.Register(router, "orgmanager")
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "orgmanager", Version: string(version), Gatherer: reg,
		Ready: func() error {
			pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return store.Ping(pctx)
		},
		Info: func() any {
			return map[string]any{"database": store.Dialect(), "ip_mapper": nc != nil}
		},
		Links: map[string]string{"API (OpenAPI 3)": "/openapi.yaml", "API reference": "https://github.com/svc-pf/svc-pf/blob/main/docs/orgmanager.md"},
	})
	server, err := httpapi.Listen(cfg.HTTP, router, log)
	if err != nil {
		store.Close()
		return nil, err
	}
	log.Info("orgmanager listening", "address", server.Addr().String(), "database", redactURL(cfg.Database.URL),
		"ip_mapper", nc != nil)
	return &OrgManager{store: store, deployer: deployer, server: server, log: log}, nil
}

// Addr is the HTTP listener's address.
func (o *OrgManager) Addr() net.Addr { return o.server.Addr() }

// Run serves until ctx ends, then stops the deploy workers and closes the
// store.
func (o *OrgManager) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deployed := make(chan struct{})
	go func() {
		defer close(deployed)
		o.deployer.Run(ctx)
	}()
	err := o.server.Serve(ctx)
	cancel()
	<-deployed
	return errors.Join(err, o.store.Close())
}

// newRegistry is a private registry with the Go runtime and process
// collectors, one per listener.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
