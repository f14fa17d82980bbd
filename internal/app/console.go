package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/console"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/nodehealth"
	"github.com/svc-pf/svc-pf/internal/orgmanager"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/simulator"
)

// ConsoleDeps are what the web console needs beyond the organisation
// operations; not file keys. The console is mounted on the orgmanager's
// listener when Auth is set; Tokens, Audit and AuditLog each light up
// their page.
type ConsoleDeps struct {
	Auth     console.Authenticator
	Tokens   console.Tokens
	Audit    console.Auditor
	AuditLog console.AuditReader
	// SignInGuard wraps the console's sign-in POST (the limit on repeated
	// failures).
	SignInGuard func(http.HandlerFunc) http.HandlerFunc
	// Simulator answers the "why" and feeds pages; nil reaches the
	// simulator's NATS API (with SimulatorAPIKey as X-API-Key when its
	// api_keys are set), when the orgmanager has NATS.
	Simulator       console.Simulator
	SimulatorAPIKey string
}

// withDefaults fills what a test has not set with the orgmanager's own
// parts: its tokens for sign-in and the tokens page, its auditor for the
// console's writes, its store for the audit page, its guard's limit on
// failed sign-ins.
func (d *ConsoleDeps) withDefaults(tokens *access.Tokens, auditor *access.Auditor, store *orgstore.Store, guard *access.Guard) {
	if d.Auth == nil {
		d.Auth = tokens
	}
	if d.Tokens == nil {
		d.Tokens = tokens
	}
	if d.Audit == nil {
		d.Audit = auditor
	}
	if d.AuditLog == nil {
		d.AuditLog = storeAudit{store: store}
	}
	if d.SignInGuard == nil {
		d.SignInGuard = guard.LimitFailures
	}
}

// storeAudit reads the audit for the console: the store's reads, the ones
// GET /audit and GET /org/{org}/audit answer from.
type storeAudit struct{ store *orgstore.Store }

func (s storeAudit) Audit(ctx context.Context, q access.AuditQuery) ([]access.AuditRecord, error) {
	return s.store.AuditRecords(ctx, q)
}

// inProcessSimulator is the simulator of `svc-pf all`, called in the
// process. StartAll sets all.Simulator before Run starts any listener, so
// a request always finds it.
type inProcessSimulator struct{ all *All }

func (s inProcessSimulator) service() (*simulator.Service, error) {
	if s.all.Simulator == nil {
		return nil, errors.New("the simulator has not started")
	}
	return s.all.Simulator.Service, nil
}

func (s inProcessSimulator) Simulate(ctx context.Context, params url.Values) ([]byte, error) {
	svc, err := s.service()
	if err != nil {
		return nil, err
	}
	b, err := svc.Simulate(ctx, params)
	var bad *simulator.BadRequest
	if errors.As(err, &bad) {
		return nil, &console.BadInput{Msg: bad.Msg}
	}
	return b, err
}

func (s inProcessSimulator) Info(ctx context.Context) ([]byte, error) {
	svc, err := s.service()
	if err != nil {
		return nil, err
	}
	return svc.InfoJSON(ctx)
}

// newConsole builds the console over the API's own operations.
func newConsole(cfg OrgManagerConfig, api *orgmanager.API, store *orgstore.Store, nc *nats.Conn,
	mapper *mapperclient.Client, nodes orgmanager.NodeLister, log *slog.Logger) (*console.Console, error) {
	cc := console.Config{Ops: api.Ops(), Auth: cfg.Console.Auth, Orgs: storeOrgs{store: store},
		Tokens: cfg.Console.Tokens, Audit: cfg.Console.Audit, AuditLog: cfg.Console.AuditLog,
		SignInGuard: cfg.Console.SignInGuard, Activity: cfg.ActivityReader, Logger: log}
	if nc != nil {
		cc.Simulator = natsSimulator{nc: nc, key: cfg.Console.SimulatorAPIKey, timeout: 10 * time.Second}
		cc.Sessions = mapper
		// The Nodes page reads what GET /nodes answers, from the same lister.
		cc.Nodes = nodes
	}
	if cfg.Console.Simulator != nil {
		cc.Simulator = cfg.Console.Simulator
	}
	return console.New(cc)
}

// natsSimulator reaches the simulator's NATS API (docs/simulator.md,
// NATS) for the console's "why" and feeds pages of a standalone
// orgmanager.
type natsSimulator struct {
	nc      *nats.Conn
	key     string
	timeout time.Duration
}

func (s natsSimulator) call(ctx context.Context, endpoint string, payload []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	msg := nats.NewMsg(simulator.NATSGroup + "." + endpoint)
	msg.Data = payload
	if s.key != "" {
		msg.Header.Set("X-API-Key", s.key)
	}
	reply, err := s.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, errors.New("no simulator answers on NATS")
		}
		return nil, fmt.Errorf("simulator: %w", err)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		var body struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(reply.Data, &body)
		if body.Error == "" {
			body.Error = reply.Header.Get(micro.ErrorHeader)
		}
		if code == "400" {
			return nil, &console.BadInput{Msg: body.Error}
		}
		return nil, fmt.Errorf("simulator answered %s: %s", code, body.Error)
	}
	return reply.Data, nil
}

func (s natsSimulator) Simulate(ctx context.Context, params url.Values) ([]byte, error) {
	m := map[string]string{}
	for k, v := range params {
		m[k] = v[0]
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return s.call(ctx, simulator.NATSSimulate, b)
}

func (s natsSimulator) Info(ctx context.Context) ([]byte, error) {
	return s.call(ctx, simulator.NATSInfo, nil)
}

// kvNodes reads the nodes' heartbeats from their NATS bucket, for GET
// /nodes and the console's Nodes page alike.
type kvNodes struct{ js jetstream.JetStream }

func (k kvNodes) Nodes(ctx context.Context) ([]nodehealth.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return nodehealth.List(ctx, k.js, time.Now())
}

// storeOrgs lists organisations for the console through the store's
// keyset pages, the ones GET /org reads.
type storeOrgs struct{ store *orgstore.Store }

func (s storeOrgs) ListOrgs(ctx context.Context, after string, limit int) ([]console.OrgSummary, string, error) {
	page, next, err := s.store.ListOrgs(ctx, after, limit)
	if err != nil {
		return nil, "", err
	}
	out := make([]console.OrgSummary, len(page))
	for i, o := range page {
		out[i] = console.OrgSummary{ID: o.ID, Version: o.Version, UpdatedAt: o.UpdatedAt}
	}
	return out, next, nil
}

// consoleURL is where a browser finds the console on the orgmanager's
// listener.
func consoleURL(cfg httpapi.Config, addr net.Addr) string {
	scheme := "http"
	if cfg.TLS.Enabled() {
		scheme = "https"
	}
	return scheme + "://" + addr.String() + console.Prefix
}
