// Package deploy is the orgmanager's deploy step (docs/architecture.md,
// Deploy): it sits between the store, the source of truth that REST writes
// change, and the IP Mapper, which receives sessions. A write marks its
// organisation dirty and queues it; workers coalesce bursts per organisation,
// read one consistent snapshot, compute effective ranges and sessions, hand
// the diff against what was deployed to a Publisher, and then update the
// in-process deploy cache that GET effective-ranges reads. Writes never wait
// for it.
//
// Two parts, one file each: the scheduler (scheduler.go) decides when an
// organisation is deployed and knows nothing of what is published; the
// sessions part (sessions.go) derives sessions from one read of the store
// and publishes their diff. Every kind of data written under an
// organisation's version is deployed by the one job the scheduler calls,
// so the kinds of one version go out together.
package deploy

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/ranges"
	"github.com/svc-pf/svc-pf/internal/session"
)

// Diff is one deploy's change set for one organisation, applied by the
// publisher in this order: Set, then the cleans.
type Diff struct {
	Org string
	// Revision is the organisation's deploy revision; every session in Set
	// carries it.
	Revision int64
	// Set holds new sessions and sessions whose allocations changed.
	Set []session.Session
	// CleanIDs are sessions no longer derived from the organisation's data.
	CleanIDs []string
	// CleanSubnets is address space released by prefix removals: sessions of
	// the organisation inside it are cleaned; nothing current lies there.
	CleanSubnets []netip.Prefix
	// CleanBelowRevision, when > 0, cleans the organisation's sessions with
	// a lower revision (a redeploy or the first deploy after start).
	CleanBelowRevision int64
	// CleanOrg cleans every session of the organisation (it was deleted).
	CleanOrg bool
}

// Empty reports whether the diff changes nothing.
func (d *Diff) Empty() bool {
	return len(d.Set) == 0 && len(d.CleanIDs) == 0 && len(d.CleanSubnets) == 0 && d.CleanBelowRevision == 0 && !d.CleanOrg
}

// Publisher hands diffs to the IP Mapper.
type Publisher interface {
	Publish(ctx context.Context, d Diff) error
}

// Discard is the publisher when no IP Mapper is configured: the deploy cache
// still converges, nothing leaves the process.
type Discard struct{}

// Publish does nothing.
func (Discard) Publish(context.Context, Diff) error { return nil }

// Store is what deploys read from the source of truth.
type Store interface {
	ReadOverrides(ctx context.Context, org string, d orgstore.Detail) (orgstore.View, error)
	NextRevision(ctx context.Context, org string) (int64, error)
	OrgVersions(ctx context.Context) ([]orgstore.OrgVersion, error)
	// The deletes whose clean is pending: a restart must not forget them.
	DeletedOrgs(ctx context.Context) ([]orgstore.DeletedOrg, error)
	DeletedOrg(ctx context.Context, org string) (orgstore.DeletedOrg, bool, error)
	ForgetDeletedOrg(ctx context.Context, d orgstore.DeletedOrg) error
	// The global settings layer and its version (read when Settings is set).
	GlobalSettings(ctx context.Context) (orgstore.GlobalSettings, error)
}

// Config configures a Deployer.
type Config struct {
	Store     Store
	Publisher Publisher // nil means Discard
	// Settings is the settings bucket; nil: settings are stored but not
	// published (no NATS configured).
	Settings SettingsKV
	Workers  int // default 4
	// VersionCheckInterval: how often every organisation's version is
	// compared with the deployed one, to heal lost notifications (writes by
	// another orgmanager instance on the same database, a crash before a
	// deploy). 0 disables the periodic scan; one scan always runs at start.
	VersionCheckInterval time.Duration
	// FullRedeployInterval: how often every organisation is republished under
	// a fresh revision, to heal anything lost downstream. 0 disables it.
	FullRedeployInterval time.Duration
	// RetryMin and RetryMax bound the backoff after a failed deploy.
	RetryMin, RetryMax time.Duration
	// PublishTimeout bounds one publish; default 30s.
	PublishTimeout time.Duration
	// MaxDirtyAge makes Ready fail while a change has waited longer than
	// this for its deploy; 0: no bound.
	MaxDirtyAge time.Duration
	// Ping asks the IP Mapper whether it answers (an ErrUnreachable error
	// when not); Run calls it at start and whenever PingInterval passed
	// without a publish, and Ready fails while the last publish or ping
	// found no IP Mapper. nil: no IP Mapper is configured, nothing checked.
	Ping func(ctx context.Context) error
	// PingInterval; default 10s.
	PingInterval time.Duration
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
	Clock        func() time.Time
}

// Status is an organisation's deploy state as GET effective-ranges shows it.
type Status struct {
	// Deployed is false before the first deploy; Version and Ranges are
	// then zero.
	Deployed bool
	// Version and Ranges are the last deployed snapshot's (read only).
	Version    int64
	Ranges     []ranges.Range
	Dirty      bool
	DirtySince time.Time
	// Started is when the deployer started. A version the database holds
	// and the deployer has not yet learnt of is dirty since
	// DirtySince(its updated_at, Started, now).
	Started time.Time
}

// Deployer runs the deploy pipeline: the scheduler over one job per
// organisation, with a sessions part and a settings part.
type Deployer struct {
	sched    *scheduler
	sessions *sessionDeploys

	maxDirtyAge  time.Duration
	ping         func(ctx context.Context) error
	pingInterval time.Duration
	reach        *reachability
}

// New returns a Deployer; Run starts its workers.
func New(cfg Config) (*Deployer, error) {
	if cfg.Store == nil {
		return nil, errors.New("deploy: Store is required")
	}
	if cfg.Publisher == nil {
		cfg.Publisher = Discard{}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 100 * time.Millisecond
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 30 * time.Second
	}
	if cfg.PublishTimeout <= 0 {
		cfg.PublishTimeout = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = defaultPingInterval
	}
	if cfg.MaxDirtyAge < 0 {
		return nil, errors.New("deploy: MaxDirtyAge must not be negative")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sched := &scheduler{
		lister:               storeLister{store: cfg.Store, global: cfg.Settings != nil},
		workers:              cfg.Workers,
		retryMin:             cfg.RetryMin,
		retryMax:             cfg.RetryMax,
		versionCheckInterval: cfg.VersionCheckInterval,
		fullRedeploys:        cfg.FullRedeployInterval,
		log:                  log,
		now:                  cfg.Clock,
		started:              cfg.Clock(),
		orgs:                 map[string]*orgState{},
		wake:                 make(chan struct{}, 1),
	}
	m, err := newMetrics(cfg.Registerer, sched.oldestDirty)
	if err != nil {
		return nil, err
	}
	sched.metrics = m
	reach := &reachability{}
	sessions := &sessionDeploys{
		store: cfg.Store, publisher: cfg.Publisher, publishTimeout: cfg.PublishTimeout,
		metrics: m, orgs: map[string]*sessionState{}, reach: reach, now: cfg.Clock,
	}
	j := &orgJob{store: cfg.Store, sessions: sessions, log: log}
	if cfg.Settings != nil {
		j.settings = &settingsDeploys{kv: cfg.Settings, store: cfg.Store, publishTimeout: cfg.PublishTimeout,
			metrics: m, held: map[string]map[string]string{}}
	}
	sched.job = j
	return &Deployer{sched: sched, sessions: sessions, maxDirtyAge: cfg.MaxDirtyAge,
		ping: cfg.Ping, pingInterval: cfg.PingInterval, reach: reach}, nil
}

// Notify records that a write changed org: it is dirty from now until a
// deploy reflects the change. Call it after the write committed.
func (d *Deployer) Notify(org string) { d.sched.notify(org, false) }

// NotifyGlobal records that the global settings layer changed.
func (d *Deployer) NotifyGlobal() { d.sched.notify(globalSlot, false) }

// Redeploy queues a republish of every current session of org under a fresh
// revision, followed by a clean of older revisions.
func (d *Deployer) Redeploy(org string) { d.sched.notify(org, true) }

// Status returns org's deploy state.
func (d *Deployer) Status(org string) Status {
	// Dirty first: a deploy publishes its snapshot before it clears dirty,
	// so "not dirty" here always comes with the snapshot that settled it.
	out := Status{Started: d.sched.started}
	out.Dirty, out.DirtySince = d.sched.dirty(org)
	if snap, ok := d.sessions.deployed(org); ok {
		out.Deployed, out.Version, out.Ranges = true, snap.version, snap.ranges
	}
	return out
}

// Run starts the workers and the periodic scans; it returns when ctx is done
// and every worker has finished its current deploy.
func (d *Deployer) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() { defer close(done); d.pingLoop(ctx) }()
	d.sched.run(ctx)
	<-done
}

// storeLister reads the scheduler's scans from the Store; with global, the
// global settings layer is one more entry (globalSlot) with its version.
type storeLister struct {
	store  Store
	global bool
}

func (l storeLister) listOrgs(ctx context.Context) ([]orgstore.OrgVersion, []orgstore.DeletedOrg, error) {
	orgs, err := l.store.OrgVersions(ctx)
	if err != nil {
		return nil, nil, err
	}
	if l.global {
		g, err := l.store.GlobalSettings(ctx)
		if err != nil {
			return nil, nil, err
		}
		orgs = append(orgs, orgstore.OrgVersion{ID: globalSlot, Version: g.Version})
	}
	deleted, err := l.store.DeletedOrgs(ctx)
	if err != nil {
		return nil, nil, err
	}
	return orgs, deleted, nil
}

var _ Store = (*orgstore.Store)(nil)
