// Package ipmapper is the IP Mapper: the authoritative session table of
// svc-pf. It sits between the orgmanager's deploy step, which sends it
// sessions over the NATS micro service "ipmapper" (set-session,
// set-session-batch, get-sessions, clean-sessions; the wire types are
// package wire, the client and deploy publisher package mapperclient), and
// every filter node's sessions read model, which follows the JetStream
// key-value bucket "sessions" that the IP Mapper alone writes. Each change is in the bucket before it is
// acknowledged; the in-memory table (a sessionindex.Index) mirrors the
// bucket and is reloaded from it on start.
//
// The wire format, merge rules and clean modes are documented in
// docs/ipmapper.md.
package ipmapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
)

// Config configures a Service.
type Config struct {
	// Conn is the NATS connection; the Service does not close it.
	Conn *nats.Conn
	// Bucket is the KV bucket; default session.Bucket.
	Bucket string
	// Replicas of the bucket when the Service creates it; default 1.
	Replicas int
	// SweepInterval is how often expired sessions are removed; default 10s.
	SweepInterval time.Duration
	// WriteTimeout bounds the wait for the KV acks of one request; default 5s.
	WriteTimeout time.Duration
	// PurgeDeletesAfter is the age at which the KV delete markers that
	// removed sessions leave behind are purged from the bucket; default
	// 24h, negative never purges. The purge runs every PurgeDeletesAfter,
	// but at least hourly, so a marker lives at most PurgeDeletesAfter plus
	// one interval. Nodes do not need old markers: a node that was away
	// when one was purged drops the session when it reconciles on resuming.
	PurgeDeletesAfter time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers them nowhere.
	Registerer prometheus.Registerer
	// Clock is the time source for updated_at and expiry; default time.Now.
	Clock func() time.Time
}

// Service is the IP Mapper. Writers (the four handlers' write paths and the
// sweeper) are serialised by mu, so a merge always sees the previous write;
// readers take the current immutable index snapshot without locking.
type Service struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	idx   atomic.Pointer[sessionindex.Index]
	ready atomic.Bool

	mu       sync.Mutex
	expiring map[string]time.Time  // guarded by mu: ids with an expiry, for the sweeper
	store    *store                // set by Start
	loaded   atomic.Pointer[store] // store, for readers that must not wait for mu
	svc      micro.Service

	started atomic.Bool
	ctx     context.Context // lives from Start to Stop; bounds KV writes
	cancel  context.CancelFunc
	loops   sync.WaitGroup // the sweeper and the marker purger
}

// defaultPurgeDeletesAfter is Config.PurgeDeletesAfter's default: long
// enough that a marker is seen by every node that is merely reconnecting,
// short enough that a bucket with much churn does not accumulate them.
const defaultPurgeDeletesAfter = 24 * time.Hour

// New checks cfg and prepares a Service; Start brings it up.
func New(cfg Config) (*Service, error) {
	if cfg.Conn == nil {
		return nil, errors.New("ipmapper: Conn is required")
	}
	if cfg.Bucket == "" {
		cfg.Bucket = session.Bucket
	}
	switch {
	case cfg.Replicas == 0:
		cfg.Replicas = 1
	case cfg.Replicas < 0 || cfg.Replicas > 5:
		return nil, fmt.Errorf("ipmapper: Replicas %d: must be 1..5", cfg.Replicas)
	}
	if cfg.SweepInterval < 0 || cfg.WriteTimeout < 0 {
		return nil, errors.New("ipmapper: SweepInterval and WriteTimeout must not be negative")
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 10 * time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.PurgeDeletesAfter == 0 {
		cfg.PurgeDeletesAfter = defaultPurgeDeletesAfter
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	s := &Service{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "ipmapper"),
		expiring: make(map[string]time.Time),
	}
	s.idx.Store(sessionindex.Empty())
	m, err := newMetrics(cfg.Registerer, func() float64 { return float64(s.idx.Load().Len()) })
	if err != nil {
		return nil, fmt.Errorf("ipmapper: metrics: %w", err)
	}
	s.metrics = m
	return s, nil
}

// Start binds (or creates) the bucket, loads every session from it, removes
// the ones that expired meanwhile, and only then registers the micro service
// and starts the sweeper: a restarted IP Mapper never answers from a partial
// table. ctx bounds the start only. A Start that failed (NATS not reachable,
// say) may be called again.
func (s *Service) Start(ctx context.Context) (err error) {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("ipmapper: already started")
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.cancel()
			s.started.Store(false)
		}
	}()
	st, err := openStore(ctx, s.cfg.Conn, s.cfg.Bucket, s.cfg.Replicas, s.cfg.WriteTimeout, s.log)
	if err != nil {
		return fmt.Errorf("ipmapper: %w", err)
	}
	s.store = st
	s.loaded.Store(st)

	began := time.Now()
	hint := 0
	if status, err := st.kv.Status(ctx); err == nil {
		hint = int(min(status.Values(), 1<<24)) // delete markers included; a hint only
	}
	b := sessionindex.NewBuilder(hint)
	expiring := make(map[string]time.Time)
	loaded, skipped, err := st.load(ctx, func(sess *session.Session) {
		b.Put(sess)
		if sess.ExpiresAt != nil {
			expiring[sess.ID] = *sess.ExpiresAt
		}
	})
	if err != nil {
		return fmt.Errorf("ipmapper: %w", err)
	}
	took := time.Since(began)
	s.metrics.loadDuration.Set(took.Seconds())
	s.metrics.loadSkipped.Add(float64(skipped))
	s.mu.Lock()
	s.idx.Store(b.Index())
	s.expiring = expiring
	s.mu.Unlock()
	s.log.Info("sessions loaded", "bucket", s.cfg.Bucket, "sessions", loaded, "skipped", skipped, "took", took)

	if n, err := s.sweep(); err != nil {
		s.log.Warn("sweep after load", "removed", n, "err", err)
	}

	svc, err := micro.AddService(s.cfg.Conn, micro.Config{
		Name:        wire.ServiceName,
		Version:     wire.ServiceVersion,
		Description: "svc-pf IP Mapper: authoritative session table",
	})
	if err != nil {
		return fmt.Errorf("ipmapper: add micro service: %w", err)
	}
	g := svc.AddGroup(wire.Group)
	for _, ep := range []struct {
		name string
		fn   func(context.Context, []byte) ([]byte, string, error)
	}{
		{wire.CmdSetSession, s.setSession},
		{wire.CmdSetSessionBatch, s.setSessionBatch},
		{wire.CmdGetSessions, s.getSessions},
		{wire.CmdCleanSessions, s.cleanSessions},
	} {
		if err := g.AddEndpoint(ep.name, s.handler(ep.name, ep.fn)); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("ipmapper: add endpoint %s: %w", ep.name, err)
		}
	}
	// Once the server has the subscriptions, a request sent on any
	// connection after Start returns finds the service.
	if err := s.cfg.Conn.FlushTimeout(s.cfg.WriteTimeout); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("ipmapper: flush subscriptions: %w", err)
	}
	s.svc = svc
	s.loops.Go(func() { s.every(s.cfg.SweepInterval, s.sweepTick) })
	if s.cfg.PurgeDeletesAfter > 0 {
		s.loops.Go(func() { s.every(min(s.cfg.PurgeDeletesAfter, time.Hour), s.purgeTick) })
	}
	s.ready.Store(true)
	return nil
}

// Ready reports whether the table is loaded and the service answers.
func (s *Service) Ready() bool { return s.ready.Load() }

// WriteError reports why the bucket fails writes, or nil: set by a failed
// KV write (JetStream unreachable, out of storage, acks timing out) and
// cleared by the next acknowledged one. Nothing is retried for it here:
// every failed write has a caller that retries (the orgmanager's deploys,
// the sweeper's next run), and the first to go through clears it.
func (s *Service) WriteError() error {
	// Not under mu: a write holds it for as long as its acks take, and
	// /health must answer meanwhile.
	st := s.loaded.Load()
	if st == nil {
		return nil
	}
	f := st.failing.Load()
	if f == nil {
		return nil
	}
	return fmt.Errorf("KV writes to bucket %s failing since %s: %w", s.cfg.Bucket, f.since.UTC().Format(time.RFC3339), f.err)
}

// Stop unregisters the micro service and stops the sweeper. The connection
// stays open.
func (s *Service) Stop() error {
	if !s.started.Load() || s.cancel == nil {
		return nil
	}
	s.ready.Store(false)
	var err error
	if s.svc != nil {
		err = s.svc.Stop()
	}
	s.cancel()
	s.loops.Wait()
	return err
}

// requestError carries the status code a refused request is answered with.
type requestError struct {
	code int
	err  error
}

func (e *requestError) Error() string { return e.err.Error() }
func (e *requestError) Unwrap() error { return e.err }

func invalid(err error) error { return &requestError{code: 400, err: err} }

func invalidf(format string, a ...any) error { return invalid(fmt.Errorf(format, a...)) }

// handler wraps a command: metrics, and the error reply (status code and
// description headers plus a wire.ErrorReply body).
func (s *Service) handler(cmd string, fn func(context.Context, []byte) ([]byte, string, error)) micro.HandlerFunc {
	return func(req micro.Request) {
		began := time.Now()
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.WriteTimeout)
		defer cancel()
		body, result, err := fn(ctx, req.Data())
		if err != nil {
			code := 500
			var re *requestError
			if errors.As(err, &re) {
				code = re.code
			}
			result = resultError
			if code < 500 {
				result = resultInvalid
				s.log.Debug("request refused", "command", cmd, "err", err)
			} else {
				s.log.Error("request failed", "command", cmd, "err", err)
			}
			msg := err.Error()
			eb, _ := json.Marshal(wire.ErrorReply{Error: msg})
			if rerr := req.Error(strconv.Itoa(code), headerSafe(msg), eb); rerr != nil {
				s.log.Warn("send error reply", "command", cmd, "err", rerr)
			}
		} else if rerr := req.Respond(body); rerr != nil {
			s.log.Warn("send reply", "command", cmd, "err", rerr)
			result = resultError
		}
		s.metrics.requests.WithLabelValues(cmd, result).Inc()
		s.metrics.duration.WithLabelValues(cmd).Observe(time.Since(began).Seconds())
	}
}

// headerSafe makes an error text fit a NATS header value: one line, bounded.
func headerSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return wire.Truncate(s, 512)
}

func (s *Service) now() time.Time { return s.cfg.Clock().UTC() }
