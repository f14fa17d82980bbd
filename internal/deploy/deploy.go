// Package deploy is the orgmanager's deploy step (spec 1, DESIGN.md §3): it
// sits between the store, the source of truth that REST writes change, and
// the IP Mapper, which receives sessions. A write marks its organisation
// dirty and queues it; workers coalesce bursts per organisation, read one
// consistent snapshot, compute effective ranges and sessions, hand the diff
// against what was deployed to a Publisher, and then update the in-process
// deploy cache that GET effective-ranges reads. Writes never wait for it.
package deploy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
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
	ListOrgs(ctx context.Context) ([]orgstore.OrgVersion, error)
	// The deletes whose clean is pending: a restart must not forget them.
	DeletedOrgs(ctx context.Context) ([]orgstore.DeletedOrg, error)
	DeletedOrg(ctx context.Context, org string) (orgstore.DeletedOrg, bool, error)
	ForgetDeletedOrg(ctx context.Context, d orgstore.DeletedOrg) error
}

// Config configures a Deployer.
type Config struct {
	Store     Store
	Publisher Publisher // nil means Discard
	Workers   int       // default 4
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
	Logger         *slog.Logger
	Registerer     prometheus.Registerer
	Clock          func() time.Time
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
}

// deployed is what stays of a deployed snapshot: what GET effective-ranges
// shows and what the next deploy's prefix diff needs.
type deployed struct {
	version  int64
	prefixes []netip.Prefix
	ranges   []ranges.Range
}

// Deployer runs the deploy pipeline.
type Deployer struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics

	mu     sync.Mutex
	orgs   map[string]*orgState
	queue  []string
	wake   chan struct{}
	closed bool
}

// orgState is guarded by Deployer.mu.
type orgState struct {
	deployed *deployed
	// held names the sessions the IP Mapper was confirmed to hold for the
	// organisation after the last successful deploy; nil until the first
	// deploy since start, which then republishes in full. Ids suffice: a
	// session's allocation is its source CIDR, which is part of its id.
	held map[string]struct{}
	// unconfirmed names sessions a failed publish may have set anyway: a
	// later deploy cleans them if they are withdrawn meanwhile.
	unconfirmed map[string]struct{}
	revision    int64

	queued, running, again bool
	redeploy               bool
	retry                  *time.Timer
	failures               int
	dirtySince             time.Time
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
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Deployer{cfg: cfg, log: log, now: cfg.Clock, orgs: map[string]*orgState{}, wake: make(chan struct{}, 1)}
	m, err := newMetrics(cfg.Registerer, d.oldestDirty)
	if err != nil {
		return nil, err
	}
	d.metrics = m
	return d, nil
}

// oldestDirty is the age in seconds of the longest-waiting change.
func (d *Deployer) oldestDirty() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var oldest time.Time
	for _, st := range d.orgs {
		if !st.dirtySince.IsZero() && (oldest.IsZero() || st.dirtySince.Before(oldest)) {
			oldest = st.dirtySince
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return d.now().Sub(oldest).Seconds()
}

// Notify records that a write changed org: it is dirty from now until a
// deploy reflects the change. Call it after the write committed.
func (d *Deployer) Notify(org string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.enqueueLocked(org, d.stateLocked(org))
}

// Redeploy queues a republish of every current session of org under a fresh
// revision, followed by a clean of older revisions.
func (d *Deployer) Redeploy(org string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.stateLocked(org)
	st.redeploy = true
	d.enqueueLocked(org, st)
}

// Status returns org's deploy state.
func (d *Deployer) Status(org string) Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.orgs[org]
	if !ok {
		return Status{}
	}
	out := Status{Dirty: !st.dirtySince.IsZero(), DirtySince: st.dirtySince}
	if st.deployed != nil {
		out.Deployed, out.Version, out.Ranges = true, st.deployed.version, st.deployed.ranges
	}
	return out
}

func (d *Deployer) stateLocked(org string) *orgState {
	st, ok := d.orgs[org]
	if !ok {
		st = &orgState{}
		d.orgs[org] = st
	}
	return st
}

// enqueueLocked marks org dirty and queues it once: a burst of writes while
// it waits costs one deploy, and a write during a running deploy queues one
// more after it, never a concurrent one.
func (d *Deployer) enqueueLocked(org string, st *orgState) {
	if st.dirtySince.IsZero() {
		st.dirtySince = d.now()
		d.metrics.dirty.Inc()
	}
	if st.retry != nil {
		// New work supersedes a pending retry; the backoff restarts from
		// the failure count if this attempt fails too.
		st.retry.Stop()
		st.retry = nil
	}
	switch {
	case st.running:
		st.again = true
	case !st.queued:
		st.queued = true
		d.queue = append(d.queue, org)
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// Run starts the workers and the periodic scans; it returns when ctx is done
// and every worker has finished its current deploy.
func (d *Deployer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range d.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.worker(ctx)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.scanLoop(ctx)
	}()
	wg.Wait()
	d.mu.Lock()
	d.closed = true
	for _, st := range d.orgs {
		if st.retry != nil {
			st.retry.Stop()
		}
	}
	d.mu.Unlock()
}

func (d *Deployer) worker(ctx context.Context) {
	for {
		org, ok := d.next(ctx)
		if !ok {
			return
		}
		d.deployOne(ctx, org)
	}
}

func (d *Deployer) next(ctx context.Context) (string, bool) {
	for {
		d.mu.Lock()
		if len(d.queue) > 0 {
			org := d.queue[0]
			d.queue[0] = ""
			d.queue = d.queue[1:]
			if len(d.queue) > 0 {
				select { // pass the wake-up on to another idle worker
				case d.wake <- struct{}{}:
				default:
				}
			}
			st := d.orgs[org]
			st.queued, st.running = false, true
			d.mu.Unlock()
			return org, true
		}
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", false
		case <-d.wake:
		}
	}
}

// deployOne runs one deploy of org and settles its state.
func (d *Deployer) deployOne(ctx context.Context, org string) {
	d.mu.Lock()
	st := d.orgs[org]
	redeploy := st.redeploy
	st.redeploy = false
	base := baseline{held: st.held, unconfirmed: st.unconfirmed, deployed: st.deployed, revision: st.revision}
	d.mu.Unlock()

	start := d.now()
	res, err := d.attempt(ctx, org, redeploy, base)

	d.mu.Lock()
	defer d.mu.Unlock()
	st.running = false
	switch {
	case err != nil:
		d.metrics.failures.Inc()
		if res.diff != nil && st.held != nil {
			if st.unconfirmed == nil {
				st.unconfirmed = map[string]struct{}{}
			}
			for _, s := range res.diff.Set {
				st.unconfirmed[s.ID] = struct{}{}
			}
		}
		// A failed full republish is retried in full (held stays nil).
		st.redeploy = st.redeploy || redeploy
		st.failures++
		if ctx.Err() != nil || d.closed {
			return
		}
		delay := d.backoff(st.failures)
		d.log.Warn("deploy failed; retrying", "org", org, "attempt", st.failures, "retry_in", delay, "err", err)
		if st.again {
			st.again = false
			d.enqueueLocked(org, st)
			return
		}
		var t *time.Timer
		t = time.AfterFunc(delay, func() {
			d.mu.Lock() // held by this goroutine until t is assigned
			defer d.mu.Unlock()
			if !d.closed && st.retry == t {
				st.retry = nil
				d.enqueueLocked(org, st)
			}
		})
		st.retry = t
	case res.deleted:
		// The organisation is gone and its sessions are cleaned; forget it
		// unless it was written again meanwhile (recreated).
		if st.again {
			st.again = false
			st.held, st.deployed, st.revision, st.unconfirmed = nil, nil, 0, nil
			d.enqueueLocked(org, st)
			return
		}
		d.settledLocked(st, start)
		delete(d.orgs, org)
	default:
		st.failures = 0
		snap := res.snapshot
		st.deployed = &deployed{version: snap.Version, prefixes: snap.Prefixes, ranges: snap.Ranges}
		st.held = make(map[string]struct{}, len(snap.Sessions))
		for id := range snap.Sessions {
			st.held[id] = struct{}{}
		}
		st.revision = res.diff.Revision
		st.unconfirmed = nil
		if st.again || st.redeploy {
			st.again = false
			d.enqueueLocked(org, st)
			return
		}
		d.settledLocked(st, start)
	}
}

func (d *Deployer) settledLocked(st *orgState, start time.Time) {
	if !st.dirtySince.IsZero() {
		d.metrics.lag.Observe(d.now().Sub(st.dirtySince).Seconds())
		d.metrics.dirty.Dec()
	}
	st.dirtySince = time.Time{}
	d.metrics.duration.Observe(d.now().Sub(start).Seconds())
}

func (d *Deployer) backoff(failures int) time.Duration {
	delay := d.cfg.RetryMin
	for i := 1; i < failures && delay < d.cfg.RetryMax; i++ {
		delay *= 2
	}
	return min(delay, d.cfg.RetryMax)
}

type result struct {
	snapshot *Snapshot
	diff     *Diff
	deleted  bool
}

// baseline is what a deploy diffs against, copied out of orgState. Only
// one deploy of an organisation runs at a time and orgState's maps change
// only after it ends, so the deploy reads them without the lock.
type baseline struct {
	held        map[string]struct{}
	unconfirmed map[string]struct{}
	deployed    *deployed
	revision    int64
}

// attempt computes and publishes one deploy. held is nil on the first
// deploy since start: the IP Mapper's contents are unknown, so everything is
// republished under a fresh revision and older revisions are cleaned, which
// leaves no stale and no duplicate session whatever happened before.
func (d *Deployer) attempt(ctx context.Context, org string, redeploy bool, base baseline) (result, error) {
	view, err := d.cfg.Store.ReadOverrides(ctx, org, orgstore.Identity)
	if errors.Is(err, orgstore.ErrOrgNotFound) {
		return d.cleanDeleted(ctx, org)
	}
	if err != nil {
		return result{}, fmt.Errorf("read %s: %w", org, err)
	}
	snap := Compute(org, view)

	diff := Diff{Org: org, Revision: base.revision}
	if redeploy || base.held == nil {
		if diff.Revision, err = d.cfg.Store.NextRevision(ctx, org); errors.Is(err, orgstore.ErrOrgNotFound) {
			// Deleted between the two reads; the next deploy cleans it.
			return result{}, err
		} else if err != nil {
			return result{}, fmt.Errorf("next revision of %s: %w", org, err)
		}
		diff.Set = sortedSessions(snap.Sessions)
		diff.CleanBelowRevision = diff.Revision
	} else {
		diff.Set, diff.CleanIDs = diffSessions(base.held, base.unconfirmed, snap.Sessions)
		if base.deployed != nil {
			diff.CleanSubnets = releasedSubnets(base.deployed.prefixes, snap.Prefixes)
		}
	}
	for i := range diff.Set {
		diff.Set[i].Revision = diff.Revision
	}
	if err := d.publish(ctx, diff); err != nil {
		return result{diff: &diff}, err
	}
	return result{snapshot: snap, diff: &diff}, nil
}

// cleanDeleted cleans every session of a deleted organisation, then forgets
// the store's record of the delete. The record is read before the clean, so
// a later delete of the same id (another record) stays pending.
func (d *Deployer) cleanDeleted(ctx context.Context, org string) (result, error) {
	rec, pending, err := d.cfg.Store.DeletedOrg(ctx, org)
	if err != nil {
		return result{}, fmt.Errorf("read delete of %s: %w", org, err)
	}
	if err := d.publish(ctx, Diff{Org: org, CleanOrg: true}); err != nil {
		return result{}, err
	}
	if pending {
		if err := d.cfg.Store.ForgetDeletedOrg(ctx, rec); err != nil {
			// The clean is done; the next scan repeats it, which is harmless.
			d.log.Warn("forgetting a cleaned organisation failed", "org", org, "err", err)
		}
	}
	return result{deleted: true}, nil
}

func (d *Deployer) publish(ctx context.Context, diff Diff) error {
	if diff.Empty() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.PublishTimeout)
	defer cancel()
	if err := d.cfg.Publisher.Publish(ctx, diff); err != nil {
		return fmt.Errorf("publish %s: %w", diff.Org, err)
	}
	d.metrics.sessionsSet.Add(float64(len(diff.Set)))
	d.metrics.sessionsCleaned.Add(float64(len(diff.CleanIDs)))
	return nil
}

// scanLoop runs the start-up scan and then the periodic version check and
// full redeploy.
func (d *Deployer) scanLoop(ctx context.Context) {
	d.scan(ctx, false)
	tick := func(every time.Duration) <-chan time.Time {
		if every <= 0 {
			return nil
		}
		t := time.NewTicker(every)
		go func() { <-ctx.Done(); t.Stop() }()
		return t.C
	}
	versionTick, redeployTick := tick(d.cfg.VersionCheckInterval), tick(d.cfg.FullRedeployInterval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-versionTick:
			d.scan(ctx, false)
		case <-redeployTick:
			d.scan(ctx, true)
		}
	}
}

// scan queues every organisation whose database version differs from the
// deployed one, every deleted organisation whose clean is pending (also
// across restarts, and deletes by another instance), and with redeployAll
// every organisation for a full republish.
func (d *Deployer) scan(ctx context.Context, redeployAll bool) {
	orgs, err := d.cfg.Store.ListOrgs(ctx)
	var deleted []orgstore.DeletedOrg
	if err == nil {
		deleted, err = d.cfg.Store.DeletedOrgs(ctx)
	}
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("deploy version scan failed", "err", err)
		}
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	exists := make(map[string]bool, len(orgs))
	queued := 0
	for _, o := range orgs {
		exists[o.ID] = true
		st := d.stateLocked(o.ID)
		if redeployAll {
			st.redeploy = true
		}
		// A pending retry keeps its backoff; it will see the same state.
		if (redeployAll || st.deployed == nil || st.deployed.version != o.Version) && st.retry == nil {
			d.enqueueLocked(o.ID, st)
			queued++
		}
	}
	for _, del := range deleted {
		// Re-created since: its own deploy cleans the older revisions.
		if st := d.stateLocked(del.ID); !exists[del.ID] && st.retry == nil {
			d.enqueueLocked(del.ID, st)
			queued++
		}
	}
	if queued > 0 {
		d.log.Debug("deploy scan queued organisations", "count", queued, "full_redeploy", redeployAll)
	}
}
