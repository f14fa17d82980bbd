// Package ipmapper is the IP Mapper: the authoritative session table of
// svc-pf. It sits between the orgmanager's deploy step, which sends it
// sessions over the NATS micro service "ipmapper" (set-session,
// set-session-batch, get-sessions, clean-sessions; see Client), and every
// filter node's subscriber index, which watches the JetStream key-value
// bucket "sessions" that the IP Mapper alone writes. Each change is in the
// bucket before it is acknowledged; the in-memory table (a
// sessionindex.Index) mirrors the bucket and is reloaded from it on start.
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
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaissmai/bart"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

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
	expiring map[string]time.Time // guarded by mu: ids with an expiry, for the sweeper
	store    *store               // set by Start
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
		Name:        ServiceName,
		Version:     ServiceVersion,
		Description: "svc-pf IP Mapper: authoritative session table",
	})
	if err != nil {
		return fmt.Errorf("ipmapper: add micro service: %w", err)
	}
	g := svc.AddGroup(groupName)
	for _, ep := range []struct {
		name string
		fn   func(context.Context, []byte) ([]byte, string, error)
	}{
		{CmdSetSession, s.setSession},
		{CmdSetSessionBatch, s.setSessionBatch},
		{CmdGetSessions, s.getSessions},
		{CmdCleanSessions, s.cleanSessions},
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
// description headers plus an ErrorReply body).
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
			eb, _ := json.Marshal(ErrorReply{Error: msg})
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
	return truncate(s, 512)
}

func (s *Service) now() time.Time { return s.cfg.Clock().UTC() }

// current returns the live stored session with id, or nil; an expired one
// counts as absent even before the sweeper removes it.
func current(ix *sessionindex.Index, id string, now time.Time) *session.Session {
	sess := indexGet(ix, id)
	if sess == nil || expired(sess, now) {
		return nil
	}
	return sess
}

// commit publishes a new index snapshot. Called with mu held, after the KV
// acknowledged the writes.
func (s *Service) commit(upserts []*session.Session, deletes []string) {
	if len(upserts) == 0 && len(deletes) == 0 {
		return
	}
	s.idx.Store(s.idx.Load().Apply(upserts, deletes))
	for _, u := range upserts {
		if u.ExpiresAt != nil {
			s.expiring[u.ID] = *u.ExpiresAt
		} else {
			delete(s.expiring, u.ID)
		}
	}
	for _, id := range deletes {
		delete(s.expiring, id)
	}
}

func marshalReply(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode reply: %w", err)
	}
	return b, nil
}

func (s *Service) setSession(ctx context.Context, data []byte) ([]byte, string, error) {
	req, err := decodeSetSession(data)
	if err != nil {
		return nil, "", invalid(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	merged, changed, err := merge(current(s.idx.Load(), req.Session.ID, now), &req.Session, req.TTLSeconds, now)
	if err != nil {
		return nil, "", invalid(err)
	}
	if changed {
		value, err := json.Marshal(merged)
		if err != nil {
			return nil, "", fmt.Errorf("encode session: %w", err)
		}
		if errs := s.store.apply(ctx, []write{{ID: merged.ID, Value: value}}); errs[0] != nil {
			s.metrics.kvWriteErrors.Inc()
			s.reconcile([]string{merged.ID})
			return nil, "", fmt.Errorf("store session %s: %w", merged.ID, errs[0])
		}
		s.commit([]*session.Session{&merged}, nil)
		s.metrics.sessionsSet.Inc()
	}
	body, err := marshalReply(SetSessionReply{Session: merged})
	return body, resultOK, err
}

func (s *Service) setSessionBatch(ctx context.Context, data []byte) ([]byte, string, error) {
	req, err := decodeSetSessionBatch(data)
	if err != nil {
		return nil, "", invalid(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	ix := s.idx.Load()

	// A batch may name an id more than once: later items merge over earlier
	// ones, and the id is written once, with its final value. Items whose
	// merge depends on that write share its fate.
	type slot struct {
		sess  *session.Session
		items []int
	}
	slots := make(map[string]*slot)
	var order []*slot
	var itemErrs []ItemError
	stored := 0
	result := resultOK
	for i := range req.Sessions {
		in := &req.Sessions[i]
		if err := validateSession(in); err != nil {
			itemErrs = append(itemErrs, ItemError{Index: i, ID: truncate(in.ID, 140), Error: err.Error()})
			continue
		}
		sl := slots[in.ID]
		cur := current(ix, in.ID, now)
		if sl != nil {
			cur = sl.sess
		}
		merged, changed, err := merge(cur, in, req.TTLSeconds, now)
		if err != nil {
			itemErrs = append(itemErrs, ItemError{Index: i, ID: in.ID, Error: err.Error()})
			continue
		}
		switch {
		case sl != nil:
			sl.sess = &merged
			sl.items = append(sl.items, i)
		case changed:
			sl = &slot{sess: &merged, items: []int{i}}
			slots[in.ID] = sl
			order = append(order, sl)
		default:
			stored++
		}
	}
	if len(itemErrs) > 0 {
		result = resultInvalid
	}

	writes := make([]write, len(order))
	for i, sl := range order {
		value, err := json.Marshal(sl.sess)
		if err != nil {
			return nil, "", fmt.Errorf("encode session: %w", err)
		}
		writes[i] = write{ID: sl.sess.ID, Value: value}
	}
	errs := s.store.apply(ctx, writes)
	upserts := make([]*session.Session, 0, len(order))
	var failed []string
	for i, sl := range order {
		if errs[i] != nil {
			s.metrics.kvWriteErrors.Inc()
			failed = append(failed, sl.sess.ID)
			result = resultError
			for _, item := range sl.items {
				itemErrs = append(itemErrs, ItemError{Index: item, ID: sl.sess.ID, Error: "store session: " + errs[i].Error()})
			}
			continue
		}
		upserts = append(upserts, sl.sess)
		stored += len(sl.items)
	}
	s.commit(upserts, nil)
	s.metrics.sessionsSet.Add(float64(len(upserts)))
	if len(failed) > 0 {
		s.log.Error("set-session-batch: KV writes failed", "failed", len(failed), "of", len(order))
		s.reconcile(failed)
	}

	slices.SortFunc(itemErrs, func(a, b ItemError) int { return a.Index - b.Index })
	reply := SetSessionBatchReply{Stored: stored, Failed: len(itemErrs), Errors: itemErrs}
	if len(reply.Errors) > maxReplyItemErrors {
		reply.Errors = reply.Errors[:maxReplyItemErrors]
	}
	body, err := marshalReply(reply)
	return body, result, err
}

// replyOverhead is kept free in a get-sessions reply for the envelope and
// the headers NATS adds.
const replyOverhead = 1024

func (s *Service) getSessions(_ context.Context, data []byte) ([]byte, string, error) {
	q, err := decodeGetSessions(data)
	if err != nil {
		return nil, "", invalid(err)
	}
	ix := s.idx.Load()
	now := s.now()
	var found []sessionindex.Entry
	switch q.kind {
	case "id":
		if e, ok := ix.Get(q.value); ok {
			found = append(found, e)
		}
	case "ip":
		if e, ok := lookupLive(ix, q.ip, now); ok {
			found = append(found, e)
		}
	case "org":
		found = ix.ByOrg(q.value)
	case "username":
		found = ix.ByUsername(q.value)
	case "deviceid":
		found = ix.ByDeviceID(q.value)
	}
	live := found[:0]
	for _, e := range found {
		if !entryExpired(e, now) && e.ID() > q.after {
			live = append(live, e)
		}
	}
	slices.SortFunc(live, func(a, b sessionindex.Entry) int { return strings.Compare(a.ID(), b.ID()) })

	// Encoded by hand so the page can stop where the next session would
	// push the reply over the connection's maximum payload.
	maxPayload := int(s.cfg.Conn.MaxPayload())
	budget := maxPayload - replyOverhead
	var buf strings.Builder
	buf.WriteString(`{"sessions":[`)
	next := ""
	for i, e := range live {
		b, err := json.Marshal(e.Session())
		if err != nil {
			return nil, "", fmt.Errorf("encode session: %w", err)
		}
		if i > 0 && buf.Len()+len(b)+1 > budget {
			next = live[i-1].ID()
			break
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(b)
	}
	buf.WriteString(`]`)
	if next != "" {
		nb, _ := json.Marshal(next)
		buf.WriteString(`,"next":`)
		buf.Write(nb)
	}
	buf.WriteString(`}`)
	// Only a page's first session is written without checking the budget
	// (a page holds at least one), so only it can make the reply too large
	// to send. Sending it anyway would fail in Respond and leave the client
	// waiting for its timeout; an error reply says what is wrong, and a
	// success reply carries no headers, so the real limit is the payload.
	if buf.Len() > maxPayload {
		return nil, "", fmt.Errorf("session %s is too large for a get-sessions reply: %d bytes, the NATS max payload is %d",
			live[0].ID(), buf.Len(), maxPayload)
	}
	return []byte(buf.String()), resultOK, nil
}

func (s *Service) cleanSessions(ctx context.Context, data []byte) ([]byte, string, error) {
	req, mode, err := decodeCleanSessions(data)
	if err != nil {
		return nil, "", invalid(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ix := s.idx.Load()

	// ids are sessions the table holds; stray ones only the bucket holds.
	var ids, stray []string
	switch mode {
	case cleanByOrg, cleanByRevision:
		for _, e := range ix.ByOrg(req.Org) {
			if mode == cleanByOrg || e.Revision() < req.RevisionBelow {
				ids = append(ids, e.ID())
			}
		}
	case cleanBySubnets:
		subnets := new(bart.Table[struct{}])
		for _, p := range req.Subnets {
			subnets.Insert(p, struct{}{})
		}
		// "Within": an allocation is selected when a subnet contains it
		// (LookupPrefix finds a subnet equal to or shorter than it that
		// covers it). A subnet inside a wider allocation does not select
		// it: the orgmanager cleans by the subnets it removed, and a
		// session whose allocation only overlaps one still has addresses
		// in the organisation's remaining prefixes.
		inSubnet := func(a netip.Prefix) bool {
			_, ok := subnets.LookupPrefix(a)
			return ok
		}
		for _, e := range ix.ByOrg(req.Org) {
			if slices.ContainsFunc(e.Allocations(), inSubnet) {
				ids = append(ids, e.ID())
			}
		}
	case cleanByIDs:
		seen := make(map[string]bool, len(req.IDs))
		var unknown []string
		for _, id := range req.IDs {
			if seen[id] {
				continue
			}
			seen[id] = true
			e, ok := ix.Get(id)
			if !ok {
				unknown = append(unknown, id)
				continue
			}
			if req.Org != "" && e.Org() != req.Org {
				// Refused as a whole: a mismatch means the caller's view is
				// wrong, and removing the rest would act on that wrong view.
				return nil, "", invalidf("%v: session %s is not in org %q", ErrOtherOrg, id, req.Org)
			}
			ids = append(ids, id)
		}
		// An id the table does not hold may still be in the bucket: a
		// write whose failure was reported can have landed after all
		// (reconcile could not re-read it while NATS was away). Every node
		// serves such a value, so it is deleted too; it is not counted,
		// as the table never held it.
		if stray, err = s.strayKeys(ctx, unknown, req.Org); err != nil {
			return nil, "", fmt.Errorf("removed 0 of %d sessions: %w", len(ids), err)
		}
	}

	removed, err := s.remove(ctx, ids)
	if err == nil && len(stray) > 0 {
		_, err = s.remove(ctx, stray)
	}
	s.metrics.removedClean.Add(float64(len(removed)))
	if err != nil {
		return nil, "", fmt.Errorf("removed %d of %d sessions, then: %w", len(removed), len(ids), err)
	}
	body, err := marshalReply(CleanSessionsReply{Removed: len(removed)})
	return body, resultOK, err
}

// strayCheckWorkers bounds the concurrent reads of strayKeys: a long list
// of unknown ids (a retried clean whose first attempt went through) costs
// a few round trips of waiting, not one per id.
const strayCheckWorkers = 16

// strayKeys returns those of ids (none held by the table) that the bucket
// still holds a value for, in order. With org set, a value is returned
// only if it is a session of org: the caller named the ids as that org's,
// and a stray value of another org (or one that is not a session at all)
// is left for an operator rather than deleted on that claim.
//
// Checked with a read rather than deleted blindly: a blind delete would
// send a delete to every node's watch and leave a marker in the bucket for
// each id that was never stored (a retried clean, a caller's stale list),
// while a read costs one round trip here and strays are rare. Called with
// mu held, so no write of these ids can come in between.
func (s *Service) strayKeys(ctx context.Context, ids []string, org string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	found := make([]bool, len(ids))
	errs := make([]error, len(ids))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(ids), strayCheckWorkers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ids) || ctx.Err() != nil {
					return
				}
				found[i], errs[i] = s.store.holds(ctx, ids[i], org)
			}
		})
	}
	wg.Wait()
	var stray []string
	for i, id := range ids {
		if errs[i] != nil {
			return nil, fmt.Errorf("check session %s in the bucket: %w", id, errs[i])
		}
		if found[i] {
			stray = append(stray, id)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("check unknown sessions in the bucket: %w", err)
	}
	if len(stray) > 0 {
		s.log.Warn("clean-sessions: deleting sessions the table did not hold but the bucket did", "count", len(stray))
	}
	return stray, nil
}

// remove deletes ids from the bucket and then from the table, keeping the
// two in step: an id whose delete was not acknowledged stays in both. It
// returns the removed ids and the first write error. Called with mu held.
func (s *Service) remove(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	writes := make([]write, len(ids))
	for i, id := range ids {
		writes[i] = write{ID: id}
	}
	errs := s.store.apply(ctx, writes)
	removed := make([]string, 0, len(ids))
	var failed []string
	var first error
	for i, err := range errs {
		if err != nil {
			s.metrics.kvWriteErrors.Inc()
			failed = append(failed, ids[i])
			if first == nil {
				first = fmt.Errorf("delete session %s: %w", ids[i], err)
			}
			continue
		}
		removed = append(removed, ids[i])
	}
	s.commit(nil, removed)
	if len(failed) > 0 {
		s.reconcile(failed)
	}
	return removed, first
}

// reconcile re-reads the keys whose write failed and makes the table match
// the bucket for them. A write can fail from here yet be stored (the ack
// lost in a disconnect, or late past the timeout), and a table that drifted
// from the bucket would merge and clean against a state no node has. Best
// effort: it stops at the first failed read, since the bus is then down and
// every further read would only wait out its timeout. Called with mu held.
func (s *Service) reconcile(ids []string) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.WriteTimeout)
	defer cancel()
	ix := s.idx.Load()
	var upserts []*session.Session
	var deletes []string
	for _, id := range ids {
		e, err := s.store.kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, ok := ix.Get(id); ok {
				deletes = append(deletes, id)
			}
			continue
		}
		if err != nil {
			s.log.Warn("cannot re-read session after a failed write; the table may lag the bucket until the next write of it", "id", id, "err", err)
			break
		}
		stored, err := session.Decode(id, e.Value())
		if err != nil {
			// Every node drops a key whose value it cannot use as a
			// session; so does the table.
			if _, ok := ix.Get(id); ok {
				deletes = append(deletes, id)
			}
			continue
		}
		if cur, ok := ix.Get(id); !ok || !sameContent(cur.Session(), stored) || !cur.UpdatedAt().Equal(stored.UpdatedAt) {
			upserts = append(upserts, stored)
		}
	}
	if len(upserts)+len(deletes) > 0 {
		s.log.Warn("table reconciled with the bucket after failed writes that did land", "updated", len(upserts), "removed", len(deletes))
		s.commit(upserts, deletes)
	}
}

// every runs fn every interval until the service stops.
func (s *Service) every(interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

func (s *Service) sweepTick() {
	if n, err := s.sweep(); err != nil {
		s.log.Warn("sweep expired sessions", "removed", n, "err", err)
	} else if n > 0 {
		s.log.Debug("swept expired sessions", "removed", n)
	}
}

// sweep removes every session whose expiry has passed. A failed delete is
// retried on the next sweep.
func (s *Service) sweep() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var ids []string
	for id, exp := range s.expiring {
		if !exp.After(now) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	slices.Sort(ids)
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.WriteTimeout)
	defer cancel()
	removed, err := s.remove(ctx, ids)
	s.metrics.removedExpired.Add(float64(len(removed)))
	return len(removed), err
}

// purgeTimeout bounds one purge run: listing the bucket's keys (headers
// only) and one purge request per old marker.
const purgeTimeout = 5 * time.Minute

func (s *Service) purgeTick() {
	// Markers carry the server's timestamp, so their age is measured on
	// the wall clock, not on Config.Clock.
	n, err := s.purgeDeletes(time.Now().Add(-s.cfg.PurgeDeletesAfter))
	switch {
	case err != nil:
		s.log.Warn("purge old delete markers", "purged", n, "err", err)
	case n > 0:
		s.log.Info("purged old delete markers", "purged", n)
	}
}

// purgeDeletes removes from the bucket the delete markers created before
// cutoff. It does not take mu: each purge is bounded by its marker's
// sequence (see store.purgeMarkers), so a write of the same key made
// meanwhile is never lost, and the table, which holds no removed ids, is
// not involved.
func (s *Service) purgeDeletes(cutoff time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(s.ctx, purgeTimeout)
	defer cancel()
	markers, err := s.store.deleteMarkers(ctx, cutoff)
	if err != nil {
		return 0, err
	}
	n, err := s.store.purgeMarkers(ctx, markers)
	s.metrics.markersPurged.Add(float64(n))
	return n, err
}
