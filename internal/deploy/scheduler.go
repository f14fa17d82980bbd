package deploy

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/svc-pf/svc-pf/internal/orgstore"
)

// job deploys one organisation; it is what the scheduler schedules. Every
// kind of data written under an organisation's version (sessions now,
// settings next) is deployed by one job call that reads one consistent
// view of the store, so the kinds of one version are published together.
// The scheduler never runs two calls for one organisation at once.
type job interface {
	// deploy brings what is deployed of org up to the store's current
	// state; full asks for a republish of everything. It returns the
	// organisation version it deployed, or gone when the organisation no
	// longer exists and what it had deployed was cleaned.
	deploy(ctx context.Context, org string, full bool) (version int64, gone bool, err error)
}

// lister is what the scheduler's scans read: every organisation with its
// version, and the deleted ones whose clean is still pending.
type lister interface {
	listOrgs(ctx context.Context) ([]orgstore.OrgVersion, []orgstore.DeletedOrg, error)
}

// scheduler decides when each organisation is deployed: dirty tracking,
// one queue entry per organisation, coalescing of bursts, retries with
// backoff, and the periodic version scan and full redeploy. It knows
// nothing of what a deploy publishes.
type scheduler struct {
	job     job
	lister  lister
	workers int
	// retryMin and retryMax bound the backoff after a failed deploy.
	retryMin, retryMax                  time.Duration
	versionCheckInterval, fullRedeploys time.Duration
	log                                 *slog.Logger
	now                                 func() time.Time
	metrics                             *metrics
	// started is when the scheduler was made: a change written before it
	// counts as dirty since then (see dirtySinceFor).
	started time.Time

	mu   sync.Mutex
	orgs map[string]*orgState
	// lastErr is the error of the last failed deploy, nil once a deploy
	// succeeds: Ready names it when deploys fall behind.
	lastErr error
	queue   []string
	wake    chan struct{}
	closed  bool
}

// orgState is guarded by scheduler.mu.
type orgState struct {
	// deployedVersion is the version of the last successful deploy since
	// start; deployed is false before it.
	deployedVersion int64
	deployed        bool

	queued, running, again bool
	redeploy               bool
	retry                  *time.Timer
	failures               int
	dirtySince             time.Time
}

// oldestDirty is the age in seconds of the longest-waiting change.
func (s *scheduler) oldestDirty() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var oldest time.Time
	for _, st := range s.orgs {
		if !st.dirtySince.IsZero() && (oldest.IsZero() || st.dirtySince.Before(oldest)) {
			oldest = st.dirtySince
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return s.now().Sub(oldest).Seconds()
}

// dirtySinceFor is when a version written at written, which this scheduler
// learnt of from the database rather than from Notify, became dirty for it:
// the write, but not before the scheduler started, nor in the future.
//
// Why not the write alone: after a restart every organisation is deployed
// again, most of them already held by the IP Mapper since long before (the
// previous process cannot say which); dating them from their last write
// would report every restart as deploys stuck for months, in
// effective-ranges, svcpf_deploy_oldest_dirty_seconds and /health. A write
// by another instance after the start is dated exactly. Zero means unknown:
// the start (or now, if later).
func (s *scheduler) dirtySinceFor(written time.Time) time.Time {
	return DirtySince(written, s.started, s.now())
}

// DirtySince is when a change written at written became dirty for a
// deployer started at started, at now: written, but neither before started
// nor after now (another instance's clock may be ahead). See Status.Started.
func DirtySince(written, started, now time.Time) time.Time {
	t := written
	if t.Before(started) {
		t = started
	}
	if t.After(now) {
		t = now
	}
	return t
}

// lastError is the error of the last deploy when it failed.
func (s *scheduler) lastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// notify records that a write changed org; redeploy asks for a full
// republish on top.
func (s *scheduler) notify(org string, redeploy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked(org)
	st.redeploy = st.redeploy || redeploy
	s.enqueueLocked(org, st, time.Time{})
}

// dirty returns whether org has changes not yet deployed, and since when.
func (s *scheduler) dirty(org string) (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.orgs[org]
	if !ok {
		return false, time.Time{}
	}
	return !st.dirtySince.IsZero(), st.dirtySince
}

func (s *scheduler) stateLocked(org string) *orgState {
	st, ok := s.orgs[org]
	if !ok {
		st = &orgState{}
		s.orgs[org] = st
	}
	return st
}

// enqueueLocked marks org dirty (since since, or now when since is zero)
// and queues it once: a burst of writes while it waits costs one deploy,
// and a write during a running deploy queues one more after it, never a
// concurrent one.
func (s *scheduler) enqueueLocked(org string, st *orgState, since time.Time) {
	if st.dirtySince.IsZero() {
		if since.IsZero() {
			since = s.now()
		}
		st.dirtySince = since
		s.metrics.dirty.Inc()
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
		s.queue = append(s.queue, org)
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// run starts the workers and the periodic scans; it returns when ctx is done
// and every worker has finished its current deploy.
func (s *scheduler) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range s.workers {
		wg.Go(func() { s.worker(ctx) })
	}
	wg.Go(func() { s.scanLoop(ctx) })
	wg.Wait()
	s.mu.Lock()
	s.closed = true
	for _, st := range s.orgs {
		if st.retry != nil {
			st.retry.Stop()
		}
	}
	s.mu.Unlock()
}

func (s *scheduler) worker(ctx context.Context) {
	for {
		org, ok := s.next(ctx)
		if !ok {
			return
		}
		s.deployOne(ctx, org)
	}
}

func (s *scheduler) next(ctx context.Context) (string, bool) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			org := s.queue[0]
			s.queue[0] = ""
			s.queue = s.queue[1:]
			if len(s.queue) > 0 {
				select { // pass the wake-up on to another idle worker
				case s.wake <- struct{}{}:
				default:
				}
			}
			st := s.orgs[org]
			st.queued, st.running = false, true
			s.mu.Unlock()
			return org, true
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", false
		case <-s.wake:
		}
	}
}

// deployOne runs one deploy of org and settles its state.
func (s *scheduler) deployOne(ctx context.Context, org string) {
	s.mu.Lock()
	st := s.orgs[org]
	redeploy := st.redeploy
	st.redeploy = false
	s.mu.Unlock()

	start := s.now()
	version, gone, err := s.job.deploy(ctx, org, redeploy)

	s.mu.Lock()
	defer s.mu.Unlock()
	st.running = false
	switch {
	case err != nil:
		s.metrics.failures.Inc()
		s.lastErr = err
		// A failed full republish is retried in full.
		st.redeploy = st.redeploy || redeploy
		st.failures++
		if ctx.Err() != nil || s.closed {
			return
		}
		delay := s.backoff(st.failures)
		s.log.Warn("deploy failed; retrying", "org", org, "attempt", st.failures, "retry_in", delay, "err", err)
		if st.again {
			st.again = false
			s.enqueueLocked(org, st, time.Time{})
			return
		}
		var t *time.Timer
		t = time.AfterFunc(delay, func() {
			s.mu.Lock() // held by this goroutine until t is assigned
			defer s.mu.Unlock()
			if !s.closed && st.retry == t {
				st.retry = nil
				s.enqueueLocked(org, st, time.Time{})
			}
		})
		st.retry = t
	case gone:
		// The organisation is gone and cleaned; forget it unless it was
		// written again meanwhile (recreated).
		if st.again {
			st.again = false
			st.deployed, st.deployedVersion = false, 0
			s.enqueueLocked(org, st, time.Time{})
			return
		}
		s.lastErr = nil
		s.settledLocked(st, start)
		delete(s.orgs, org)
	default:
		s.lastErr = nil
		st.failures = 0
		st.deployed, st.deployedVersion = true, version
		if st.again || st.redeploy {
			st.again = false
			s.enqueueLocked(org, st, time.Time{})
			return
		}
		s.settledLocked(st, start)
	}
}

func (s *scheduler) settledLocked(st *orgState, start time.Time) {
	if !st.dirtySince.IsZero() {
		s.metrics.lag.Observe(s.now().Sub(st.dirtySince).Seconds())
		s.metrics.dirty.Dec()
	}
	st.dirtySince = time.Time{}
	s.metrics.duration.Observe(s.now().Sub(start).Seconds())
}

func (s *scheduler) backoff(failures int) time.Duration {
	delay := s.retryMin
	for i := 1; i < failures && delay < s.retryMax; i++ {
		delay *= 2
	}
	return min(delay, s.retryMax)
}

// scanLoop runs the start-up scan and then the periodic version check and
// full redeploy.
func (s *scheduler) scanLoop(ctx context.Context) {
	s.scan(ctx, false)
	tick := func(every time.Duration) <-chan time.Time {
		if every <= 0 {
			return nil
		}
		t := time.NewTicker(every)
		go func() { <-ctx.Done(); t.Stop() }()
		return t.C
	}
	versionTick, redeployTick := tick(s.versionCheckInterval), tick(s.fullRedeploys)
	for {
		select {
		case <-ctx.Done():
			return
		case <-versionTick:
			s.scan(ctx, false)
		case <-redeployTick:
			s.scan(ctx, true)
		}
	}
}

// scan queues every organisation whose database version differs from the
// deployed one, every deleted organisation whose clean is pending (also
// across restarts, and deletes by another instance), and with redeployAll
// every organisation for a full republish.
func (s *scheduler) scan(ctx context.Context, redeployAll bool) {
	orgs, deleted, err := s.lister.listOrgs(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("deploy version scan failed", "err", err)
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	exists := make(map[string]bool, len(orgs))
	queued := 0
	for _, o := range orgs {
		exists[o.ID] = true
		st := s.stateLocked(o.ID)
		if redeployAll {
			st.redeploy = true
		}
		// A pending retry keeps its backoff; it will see the same state.
		if (redeployAll || !st.deployed || st.deployedVersion != o.Version) && st.retry == nil {
			since := time.Time{} // a full redeploy changes nothing: dirty from now
			if !st.deployed || st.deployedVersion != o.Version {
				since = s.dirtySinceFor(o.UpdatedAt)
			}
			s.enqueueLocked(o.ID, st, since)
			queued++
		}
	}
	for _, del := range deleted {
		// Re-created since: its own deploy cleans the older revisions.
		if st := s.stateLocked(del.ID); !exists[del.ID] && st.retry == nil {
			s.enqueueLocked(del.ID, st, s.dirtySinceFor(time.Time{}))
			queued++
		}
	}
	if queued > 0 {
		s.log.Debug("deploy scan queued organisations", "count", queued, "full_redeploy", redeployAll)
	}
}
