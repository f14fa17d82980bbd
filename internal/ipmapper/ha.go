package ipmapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
)

// errNotActive refuses a write of an instance that does not hold its
// bucket's lock (it lost it, or its lease ran out while NATS was away).
var errNotActive = errors.New("this IP Mapper does not hold its bucket's lock")

// fence is the store's check before every write: only the lock's holder
// writes, and only while its lease is valid. It reads two atomics and the
// monotonic clock.
func (s *Service) fence() error {
	if l := s.lease; l != nil && l.valid() {
		return nil
	}
	return fmt.Errorf("%w (bucket %s)", errNotActive, s.cfg.Bucket)
}

func (s *Service) setRole(r Role) { s.role.Store(&r) }

// Role is what this instance does for its bucket now.
func (s *Service) Role() Role { return *s.role.Load() }

// HAStatus is what /health shows of the active/passive state.
type HAStatus struct {
	Role       Role   `json:"role"`
	Instance   string `json:"instance"`
	LockBucket string `json:"lock_bucket"`
	// Holder is the instance holding the lock, as last seen on standby.
	Holder string `json:"holder,omitempty"`
	// LockError is the last failure to reach the lock bucket, if the last
	// attempt failed.
	LockError string `json:"lock_error,omitempty"`
	// LoadError is why the last load after taking the lock failed.
	LoadError string `json:"load_error,omitempty"`
}

// HA reports the active/passive state.
func (s *Service) HA() HAStatus {
	st := HAStatus{Role: s.Role(), Instance: s.cfg.Instance, LockBucket: s.cfg.LockBucket}
	if st.Role == RoleStandby {
		if h := s.holder.Load(); h != nil {
			st.Holder = h.describe()
		}
	}
	if err := s.lockErr.Load(); err != nil {
		st.LockError = (*err).Error()
	}
	if err := s.loadErr.Load(); err != nil && st.Role != RoleActive {
		st.LoadError = (*err).Error()
	}
	return st
}

// LockError is the last failure to reach the lock bucket, nil when the last
// attempt reached it.
func (s *Service) LockError() error {
	if err := s.lockErr.Load(); err != nil {
		return *err
	}
	return nil
}

func (h *Holder) describe() string {
	if h.Host == "" && h.PID == 0 {
		return h.Instance
	}
	return fmt.Sprintf("%s (host %s, pid %d)", h.Instance, h.Host, h.PID)
}

// term is one period of holding the lock, from taking it to losing or
// releasing it. Its context ends when the lock is lost or the service
// stops; the refresher runs for as long.
type term struct {
	ctx    context.Context
	cancel context.CancelFunc
	began  time.Time
	lost   atomic.Pointer[string] // why the lock was lost; nil if it was not
	done   chan struct{}          // closed when the refresher has returned
}

// beginTerm starts refreshing the lease just taken.
func (s *Service) beginTerm() *term {
	ctx, cancel := context.WithCancel(s.ctx)
	t := &term{ctx: ctx, cancel: cancel, began: time.Now(), done: make(chan struct{})}
	s.holder.Store(nil)
	s.setRole(RoleLoading)
	s.campaign.Go(func() { s.refresher(t) })
	return t
}

// refresher rewrites the lock every LockTTL/3 until the term ends. When the
// lock is lost — someone else changed the key, or no refresh went through
// before the lease ran out — it ends the term at once; writes have already
// stopped by then (the store's fence reads the same lease).
func (s *Service) refresher(t *term) {
	defer close(t.done)
	every := s.cfg.LockTTL / 3
	timer := time.NewTimer(every)
	defer timer.Stop()
	lose := func(reason string) {
		s.lease.drop()
		t.lost.Store(&reason)
		t.cancel()
	}
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-timer.C:
		}
		// A refresh waits no longer than the lease lasts: past that the
		// lock may be someone else's, and waiting only delays the step-down.
		wait := min(every, s.lease.remaining())
		if wait <= 0 {
			lose(fmt.Sprintf("no refresh of the lock went through for longer than its TTL (%s)", s.cfg.LockTTL))
			return
		}
		ctx, cancel := context.WithTimeout(t.ctx, wait)
		err := natsbus.Unreachable(s.cfg.Conn, s.lease.refresh(ctx), "refresh the lock of bucket "+s.cfg.Bucket)
		cancel()
		switch {
		case err == nil:
			s.lockErr.Store(nil)
			timer.Reset(every)
			continue
		case t.ctx.Err() != nil:
			return
		case errors.Is(err, errLockTaken):
			lose(err.Error())
			return
		}
		s.lockErr.Store(&err)
		s.log.Warn("lock refresh failed; retrying until the lease runs out", "err", err, "lease_left", s.lease.remaining().Round(time.Millisecond))
		// Retry soon, and at the latest when the lease runs out.
		timer.Reset(max(min(every/2, s.lease.remaining()), time.Millisecond))
	}
}

// endTerm stops serving and writing for a term that ended (lost, stopped,
// or a failed activation) and, unless the lock was lost, releases it. It
// reports whether the lock was lost.
func (s *Service) endTerm(t *term) (lost bool) {
	t.cancel()
	<-t.done
	reason := t.lost.Load()
	// Writes stop first: the fence closes with the lease, before the
	// endpoints go.
	rev := s.lease.rev.Load()
	s.lease.drop()
	wasActive := s.Role() == RoleActive
	s.ready.Store(false)
	s.stopServing()
	s.loops.Wait()
	// A write in flight holds mu until its acks are back: the lock is
	// released only once nothing of this term can still be sent.
	s.mu.Lock()
	//lint:ignore SA2001 an empty critical section is the barrier
	s.mu.Unlock()
	s.setRole(RoleStandby)
	if reason != nil {
		s.metrics.lockLost.Inc()
		s.log.Error("lost the lock: stopped serving and writing; back on standby", "reason", *reason,
			"was_active", wasActive, "held_for", time.Since(t.began).Round(time.Millisecond), "lock_bucket", s.cfg.LockBucket)
		return true
	}
	if rev == 0 {
		return false
	}
	s.lease.rev.Store(rev)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.LockTTL)
	defer cancel()
	if err := s.lease.release(ctx); err != nil {
		s.log.Warn("release the lock; a standby takes over once it expires", "err", err, "ttl", s.cfg.LockTTL)
		return false
	}
	s.log.Info("released the lock", "lock_bucket", s.cfg.LockBucket)
	return false
}

// run is the campaign: it serves a term while it lasts, then waits on
// standby and tries to take the lock every LockTTL/3 until it does, until
// the service stops.
func (s *Service) run(t *term) {
	// failed counts activations in a row that failed (a load cut short, a
	// conflict): each doubles the wait before the next attempt, up to
	// maxActivationBackoff, so a persistent conflict does not churn the
	// lock and the logs.
	failed := 0
	for {
		wait := s.cfg.LockTTL / 3
		if t != nil {
			<-t.ctx.Done()
			if s.endTerm(t) {
				// The lock was taken or deleted under it: an operator's
				// forced fail-over, or a standby that saw it expire. Wait
				// a whole TTL before trying again, so that a standby
				// (trying every TTL/3) takes it, and this instance only
				// when there is none.
				wait = s.cfg.LockTTL
			}
			t = nil
		}
		if failed > 0 {
			wait = min(wait<<min(failed, 10), maxActivationBackoff)
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(wait):
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.LockTTL)
		held, holder, err := s.lease.acquire(ctx)
		err = natsbus.Unreachable(s.cfg.Conn, err, "take the lock of bucket "+s.cfg.Bucket)
		cancel()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			if s.lockErr.Swap(&err) == nil {
				s.log.Warn("on standby and cannot reach the lock; retrying", "err", err, "lock_bucket", s.cfg.LockBucket)
			}
			continue
		}
		if s.lockErr.Swap(nil) != nil {
			s.log.Info("lock bucket reachable again", "lock_bucket", s.cfg.LockBucket)
		}
		if !held {
			s.onStandby(holder)
			continue
		}
		s.log.Info("took the lock; loading the table", "lock_bucket", s.cfg.LockBucket)
		t = s.beginTerm()
		if err := s.activate(t.ctx, t); err != nil {
			failed++
			if t.lost.Load() == nil {
				s.log.Warn("took the lock but could not activate; releasing it", "err", err, "failed_in_a_row", failed)
			}
			t.cancel()
			continue
		}
		failed = 0
	}
}

// maxActivationBackoff bounds the wait after failed activations.
const maxActivationBackoff = 30 * time.Second

// onStandby records who holds the lock and logs it when that changes.
func (s *Service) onStandby(h *Holder) {
	s.setRole(RoleStandby)
	if h == nil {
		return
	}
	if prev := s.holder.Swap(h); prev == nil || prev.Token != h.Token {
		s.log.Info("on standby: another IP Mapper holds the lock of this bucket", "holder", h.describe(),
			"lock_bucket", s.cfg.LockBucket, "instance", s.cfg.Instance)
	}
}

// activate loads the table, checks that no other IP Mapper serves the
// bucket, registers the micro service and starts the sweeper and the
// purger; ctx ends when the lock is lost, which aborts it.
func (s *Service) activate(ctx context.Context, t *term) (err error) {
	defer func() {
		if err != nil {
			s.loadErr.Store(&err)
		} else {
			s.loadErr.Store(nil)
		}
	}()
	st := s.store
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
	s.log.Info("sessions loaded", "sessions", loaded, "skipped", skipped, "took", took)

	if n, err := s.sweep(); err != nil {
		s.log.Warn("sweep after load", "removed", n, "err", err)
	}
	if err := s.checkNoOtherServer(ctx); err != nil {
		return err
	}

	conn, err := s.dialServiceConn()
	if err != nil {
		return fmt.Errorf("ipmapper: connect the micro service: %w", err)
	}
	svc, err := micro.AddService(conn, micro.Config{
		Name:        wire.ServiceName,
		Version:     wire.ServiceVersion,
		Description: "svc-pf IP Mapper: authoritative session table of bucket " + s.cfg.Bucket,
		Metadata: map[string]string{wire.MetadataBucket: s.cfg.Bucket, wire.MetadataLockBucket: s.cfg.LockBucket,
			wire.MetadataInstance: s.cfg.Instance},
	})
	if err != nil {
		conn.Close()
		return fmt.Errorf("ipmapper: add micro service: %w", err)
	}
	// From here the term owns both: endTerm stops them, which a failed
	// activation ends in too.
	s.svc, s.svcConn = svc, conn
	g := svc.AddGroup(wire.Group(s.cfg.Bucket))
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
			return fmt.Errorf("ipmapper: add endpoint %s: %w", ep.name, err)
		}
	}
	// Once the server has the subscriptions, a request sent on any
	// connection after Start returns finds the service.
	if err := conn.FlushTimeout(s.cfg.WriteTimeout); err != nil {
		return fmt.Errorf("ipmapper: flush subscriptions: %w", natsbus.Unreachable(conn, err, "register the micro service"))
	}
	s.probeErr.Store(nil)
	s.loops.Go(func() { s.probeLoop(t.ctx) })
	s.loops.Go(func() { s.every(t.ctx, s.cfg.SweepInterval, s.sweepTick) })
	if s.cfg.PurgeDeletesAfter > 0 {
		s.loops.Go(func() { s.every(t.ctx, min(s.cfg.PurgeDeletesAfter, time.Hour), s.purgeTick) })
	}
	if s.cfg.SnapshotInterval > 0 {
		s.loops.Go(func() { s.every(t.ctx, s.cfg.SnapshotInterval, func() { s.snapshotTick(t.ctx) }) })
	}
	s.ready.Store(true)
	s.setRole(RoleActive)
	s.metrics.takeovers.Inc()
	s.log.Info("active: holding the lock, table loaded, serving", "instance", s.cfg.Instance, "sessions", loaded,
		"load_took", took.Round(time.Millisecond), "since_lock_taken", time.Since(t.began).Round(time.Millisecond),
		"lock_bucket", s.cfg.LockBucket)
	return nil
}

// conflictProbeWait is how long activation collects the answers of the
// other IP Mappers on this NATS ($SRV.PING.ipmapper).
const conflictProbeWait = 250 * time.Millisecond

// checkNoOtherServer asks every IP Mapper on this NATS who it is, before
// this one registers. Holding the lock, this one should be the only server
// of its bucket; another one answering is a deployment error the lock
// cannot catch: an IP Mapper of the same bucket on another lock bucket, or
// one of version 1, which has fixed subjects and no lock at all (and whose
// bucket cannot be told). Either would write the bucket beside this one.
func (s *Service) checkNoOtherServer(ctx context.Context) error {
	nc := s.cfg.Conn
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("ipmapper: probe other IP Mappers: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	subject, err := micro.ControlSubject(micro.PingVerb, wire.ServiceName, "")
	if err != nil {
		return err
	}
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return fmt.Errorf("ipmapper: probe other IP Mappers: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, conflictProbeWait)
	defer cancel()
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) {
				// Every IP Mapper answers at once; the others are done.
				// No responders: there is no IP Mapper at all.
				return nil
			}
			return fmt.Errorf("ipmapper: probe other IP Mappers: %w", err)
		}
		var p micro.Ping
		if json.Unmarshal(msg.Data, &p) != nil || p.Name != wire.ServiceName {
			continue
		}
		if !strings.HasPrefix(p.Version, "2.") {
			return fmt.Errorf("%w: an IP Mapper of version %s (id %s) answers on this NATS: it serves the fixed subjects ipmapper.<command> without a lock and may write this bucket; stop or upgrade it before starting this one",
				ErrConflict, p.Version, p.ID)
		}
		if p.Metadata[wire.MetadataBucket] == s.cfg.Bucket {
			return fmt.Errorf("%w: IP Mapper %s (id %s) already serves bucket %s under lock bucket %q while this one holds the lock in %q: every IP Mapper of a bucket must use the same lock bucket",
				ErrConflict, p.Metadata[wire.MetadataInstance], p.ID, s.cfg.Bucket, p.Metadata[wire.MetadataLockBucket], s.cfg.LockBucket)
		}
	}
}
