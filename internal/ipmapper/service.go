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
// Several IP Mappers may run for one bucket, active/passive: a lock key in
// a small KV bucket (lock.go) lets exactly one of them serve and write; the
// others wait on standby and take over, after loading the table, when the
// active one releases the lock or stops refreshing it.
//
// The wire format, merge rules and clean modes are documented in
// docs/ipmapper.md.
package ipmapper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus"
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
	// SnapshotInterval is how often the active instance writes the table
	// into the snapshot nodes start from (an object named "snapshot" in
	// the Object Store bucket named like Bucket): a node's cold start then
	// reads it and only the stream after it. Default 10m; negative writes
	// none (nodes replay the whole stream). The first is written one
	// interval after the instance became active.
	SnapshotInterval time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics; nil registers them nowhere.
	Registerer prometheus.Registerer
	// Clock is the time source for updated_at and expiry; default time.Now.
	Clock func() time.Time

	// LockBucket is the KV bucket holding the active/passive locks, one key
	// per sessions bucket; default DefaultLockBucket. Every IP Mapper of a
	// bucket must use the same one.
	LockBucket string
	// LockTTL is how long a lock outlives its holder's last refresh, which
	// comes every LockTTL/3: a standby takes over about LockTTL after the
	// active one dies. Default 3s; 300ms..1m. It is the lock bucket's TTL:
	// every IP Mapper using the bucket must set the same.
	LockTTL time.Duration
	// Instance names this instance in the lock value and the logs; default
	// "<hostname>/<pid>".
	Instance string

	// ProbeInterval is how often the active instance probes its own micro
	// service through the queue groups its clients use; default 5s.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe may wait for its answer before the
	// service counts as not answering (Service.ServeError); default
	// WriteTimeout.
	ProbeTimeout time.Duration
}

// DefaultLockBucket is Config.LockBucket's default.
const DefaultLockBucket = "ipmapper-locks"

// Bounds of Config.LockTTL: below 300ms a refresh every TTL/3 competes
// with ordinary NATS latency; above a minute a dead active one leaves the
// bucket unserved for too long.
const (
	defaultLockTTL = 3 * time.Second
	minLockTTL     = 300 * time.Millisecond
	maxLockTTL     = time.Minute
)

// Role is what an IP Mapper is doing for its bucket.
type Role string

const (
	// RoleStarting: Start has not yet reached the lock bucket.
	RoleStarting Role = "starting"
	// RoleStandby: another instance holds the lock; this one waits for it.
	RoleStandby Role = "standby"
	// RoleLoading: this instance holds the lock and is loading the table;
	// it serves once loaded.
	RoleLoading Role = "loading"
	// RoleActive: this instance holds the lock, has loaded the table and
	// serves the micro service.
	RoleActive Role = "active"
)

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
	svc      micro.Service         // registered while active; owned by the campaign
	svcConn  *nats.Conn            // svc's own connection, one per term; owned by the campaign
	probeErr atomic.Pointer[error] // why the last self-probe failed; nil if it was answered

	me      Holder                 // this instance, as its lock value says
	lease   *lease                 // set by Start
	role    atomic.Pointer[Role]   // what this instance does now
	holder  atomic.Pointer[Holder] // on standby: who holds the lock, when known
	lockErr atomic.Pointer[error]  // the last failure to reach the lock, nil once reached
	loadErr atomic.Pointer[error]  // the last failed load after taking the lock

	started  atomic.Bool
	ctx      context.Context // lives from Start to Stop; bounds KV writes
	cancel   context.CancelFunc
	campaign sync.WaitGroup // the lock loop (campaign) and, per term, the refresher
	loops    sync.WaitGroup // while active: the sweeper and the marker purger
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
	if cfg.SweepInterval < 0 || cfg.WriteTimeout < 0 || cfg.ProbeInterval < 0 || cfg.ProbeTimeout < 0 {
		return nil, errors.New("ipmapper: SweepInterval, WriteTimeout, ProbeInterval and ProbeTimeout must not be negative")
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 10 * time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = defaultProbeInterval
	}
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = cfg.WriteTimeout
	}
	if cfg.PurgeDeletesAfter == 0 {
		cfg.PurgeDeletesAfter = defaultPurgeDeletesAfter
	}
	if cfg.SnapshotInterval == 0 {
		cfg.SnapshotInterval = defaultSnapshotInterval
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
	if cfg.LockBucket == "" {
		cfg.LockBucket = DefaultLockBucket
	}
	if cfg.LockTTL == 0 {
		cfg.LockTTL = defaultLockTTL
	}
	if err := wire.ValidBucket(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("ipmapper: Bucket: %w", err)
	}
	if err := wire.ValidBucket(cfg.LockBucket); err != nil {
		return nil, fmt.Errorf("ipmapper: LockBucket: %w", err)
	}
	if cfg.LockBucket == cfg.Bucket {
		return nil, fmt.Errorf("ipmapper: LockBucket %q is the sessions bucket: the locks need a bucket of their own", cfg.LockBucket)
	}
	if cfg.LockTTL < minLockTTL || cfg.LockTTL > maxLockTTL {
		return nil, fmt.Errorf("ipmapper: LockTTL %s: must be %s..%s", cfg.LockTTL, minLockTTL, maxLockTTL)
	}
	host, _ := os.Hostname()
	if cfg.Instance == "" {
		cfg.Instance = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	var token [12]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, fmt.Errorf("ipmapper: instance token: %w", err)
	}
	s := &Service{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "ipmapper", "bucket", cfg.Bucket),
		expiring: make(map[string]time.Time),
		me: Holder{Instance: cfg.Instance, Host: host, PID: os.Getpid(), Bucket: cfg.Bucket,
			Token: hex.EncodeToString(token[:]), Since: time.Now().UTC()},
	}
	s.setRole(RoleStarting)
	s.idx.Store(sessionindex.Empty())
	m, err := newMetrics(cfg.Registerer, func() float64 { return float64(s.idx.Load().Len()) },
		func() float64 {
			if s.Role() == RoleActive {
				return 1
			}
			return 0
		})
	if err != nil {
		return nil, fmt.Errorf("ipmapper: metrics: %w", err)
	}
	s.metrics = m
	return s, nil
}

// Start binds (or creates) the sessions bucket and the lock bucket and
// tries once to take the bucket's lock. Holding it, Start loads every
// session, removes the ones that expired meanwhile, and only then registers
// the micro service and starts the sweeper: an IP Mapper never answers from
// a partial table. Not holding it, Start returns with the instance on
// standby (Role), and it keeps trying in the background, activating the
// same way once it takes the lock. ctx bounds the start only. A Start that
// failed (NATS not reachable, say) may be called again; one that failed
// with ErrConflict will fail again until the deployment changes.
func (s *Service) Start(ctx context.Context) (err error) {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("ipmapper: already started")
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.cancel()
			s.campaign.Wait()
			s.setRole(RoleStarting)
			s.started.Store(false)
		}
	}()
	st, err := openStore(ctx, s.cfg.Conn, s.cfg.Bucket, s.cfg.Replicas, s.cfg.WriteTimeout, s.log, s.fence)
	if err != nil {
		return fmt.Errorf("ipmapper: %w", natsbus.Unreachable(s.cfg.Conn, err, "open bucket "+s.cfg.Bucket))
	}
	lockKV, err := openLockBucket(ctx, st.js, s.cfg.LockBucket, s.cfg.LockTTL, s.cfg.Replicas)
	if err != nil {
		return fmt.Errorf("ipmapper: %w", natsbus.Unreachable(s.cfg.Conn, err, "open lock bucket "+s.cfg.LockBucket))
	}
	l, err := newLease(lockKV, s.cfg.Bucket, s.cfg.LockTTL, s.me)
	if err != nil {
		return fmt.Errorf("ipmapper: %w", err)
	}
	s.store = st
	s.loaded.Store(st)
	s.lease = l
	held, holder, err := l.acquire(ctx)
	if err != nil {
		return fmt.Errorf("ipmapper: %w", natsbus.Unreachable(s.cfg.Conn, err, "take the lock of bucket "+s.cfg.Bucket))
	}
	s.lockErr.Store(nil)
	if !held {
		s.onStandby(holder)
		s.campaign.Go(func() { s.run(nil) })
		return nil
	}
	t := s.beginTerm()
	// The first load is bounded by the caller's ctx too.
	actx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	if err := s.activate(actx, t); err != nil {
		t.cancel()
		s.endTerm(t)
		return err
	}
	s.campaign.Go(func() { s.run(t) })
	return nil
}

// Ready reports whether this instance holds the lock, has loaded the table
// and serves the micro service.
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

// Stop stops serving and writing, releases the lock (so that a standby
// takes over at once rather than after the lock's TTL) and stops the
// background work. The connection stays open.
func (s *Service) Stop() error {
	if !s.started.Load() || s.cancel == nil {
		return nil
	}
	s.cancel()
	s.campaign.Wait()
	return nil
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
		if req.Headers().Get(wire.HeaderProbe) != "" {
			// The self-probe (probe.go): that this handler runs is the
			// answer; it is no request of a client.
			if err := req.Respond(nil); err != nil {
				s.log.Debug("answer a probe", "command", cmd, "err", err)
			}
			return
		}
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
