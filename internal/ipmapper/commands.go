package ipmapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gaissmai/bart"

	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
)

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
	s.retryUncertain()
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
	body, err := marshalReply(wire.SetSessionReply{Session: merged})
	return body, resultOK, err
}

// maxReplyItemErrors bounds the item errors one batch reply lists, so the
// reply always fits in a NATS message however small the items were; Failed
// still counts all of them.
const maxReplyItemErrors = 1000

func (s *Service) setSessionBatch(ctx context.Context, data []byte) ([]byte, string, error) {
	req, err := decodeSetSessionBatch(data)
	if err != nil {
		return nil, "", invalid(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retryUncertain()
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
	var itemErrs []wire.ItemError
	stored := 0
	result := resultOK
	for i := range req.Sessions {
		in := &req.Sessions[i]
		if err := validateSession(in); err != nil {
			itemErrs = append(itemErrs, wire.ItemError{Index: i, ID: wire.Truncate(in.ID, 140), Error: err.Error()})
			continue
		}
		sl := slots[in.ID]
		cur := current(ix, in.ID, now)
		if sl != nil {
			cur = sl.sess
		}
		merged, changed, err := merge(cur, in, req.TTLSeconds, now)
		if err != nil {
			itemErrs = append(itemErrs, wire.ItemError{Index: i, ID: in.ID, Error: err.Error()})
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
				itemErrs = append(itemErrs, wire.ItemError{Index: item, ID: sl.sess.ID, Error: "store session: " + errs[i].Error()})
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

	slices.SortFunc(itemErrs, func(a, b wire.ItemError) int { return a.Index - b.Index })
	reply := wire.SetSessionBatchReply{Stored: stored, Failed: len(itemErrs), Errors: itemErrs}
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
	live := s.match(q)

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

// match returns the live sessions q selects whose id sorts after q.after,
// in id order, from the current snapshot: get-sessions and Find answer the
// same.
func (s *Service) match(q getQuery) []sessionindex.Entry {
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
	return live
}

// Query selects sessions for Find, with get-sessions' meaning: exactly one
// of the fields is set.
type Query struct {
	ID       string
	IP       netip.Addr
	Org      string
	Username string
	DeviceID string
	// After skips the sessions whose id sorts at or before it (paging).
	After string
	// With ByProducer, only Producer's sessions are selected ("" is the
	// orgmanager's): a filter on top of the selector.
	ByProducer bool
	Producer   string
}

// Found is one page of Find.
type Found struct {
	Sessions []session.Session
	// Total counts every match after Query.After, not only this page.
	Total int
	// Next is the id to pass as After for the next page; empty on the last.
	Next string
}

// Find answers an operator's query from the table (the read-only view the
// IP Mapper's HTTP listener serves): at most limit sessions in id order.
// It reads the current snapshot and never waits for a write.
func (s *Service) Find(q Query, limit int) (Found, error) {
	var gq getQuery
	n := 0
	for _, f := range []struct{ kind, value string }{
		{"id", q.ID}, {"org", q.Org}, {"username", q.Username}, {"deviceid", q.DeviceID},
	} {
		if f.value != "" {
			n++
			gq.kind, gq.value = f.kind, f.value
		}
	}
	if q.IP.IsValid() {
		if q.IP.Zone() != "" {
			return Found{}, invalidf("invalid ip %q: zones are not looked up", q.IP)
		}
		n++
		gq.kind, gq.ip = "ip", q.IP.Unmap()
	}
	if n != 1 {
		return Found{}, invalid(errors.New("exactly one of id, ip, org, username, deviceid is required"))
	}
	if limit <= 0 {
		return Found{}, invalidf("limit %d: must be positive", limit)
	}
	if q.ByProducer && !session.ValidProducer(q.Producer) {
		return Found{}, invalidf("invalid producer %q", q.Producer)
	}
	gq.after = q.After
	live := s.match(gq)
	if q.ByProducer {
		live = slices.DeleteFunc(live, func(e sessionindex.Entry) bool { return e.Producer() != q.Producer })
	}
	out := Found{Total: len(live), Sessions: make([]session.Session, 0, min(limit, len(live)))}
	for _, e := range live[:min(limit, len(live))] {
		out.Sessions = append(out.Sessions, *e.Session())
	}
	if len(live) > limit {
		out.Next = live[limit-1].ID()
	}
	return out, nil
}

// IsInvalid reports whether err from Find is a refused query (400) rather
// than a failure.
func IsInvalid(err error) bool {
	var re *requestError
	return errors.As(err, &re) && re.code < 500
}

func (s *Service) cleanSessions(ctx context.Context, data []byte) ([]byte, string, error) {
	req, mode, err := decodeCleanSessions(data)
	if err != nil {
		return nil, "", invalid(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retryUncertain()
	ix := s.idx.Load()

	// ids are sessions the table holds; stray ones only the bucket holds.
	var ids, stray []string
	switch mode {
	// Every selector takes only the request's producer's sessions: the
	// orgmanager's deploy (producer "") never removes what RADIUS
	// accounting wrote, nor the other way round.
	case wire.CleanByOrg, wire.CleanByRevision:
		for _, e := range ix.ByOrg(req.Org) {
			if e.Producer() != req.Producer {
				continue
			}
			if mode == wire.CleanByOrg || e.Revision() < req.RevisionBelow {
				ids = append(ids, e.ID())
			}
		}
	case wire.CleanBySubnets:
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
			if e.Producer() == req.Producer && slices.ContainsFunc(e.Allocations(), inSubnet) {
				ids = append(ids, e.ID())
			}
		}
	case wire.CleanByIDs:
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
			if e.Producer() != req.Producer {
				// Refused as a whole too, for the same reason: ids are
				// the caller's own sessions, and one of another
				// producer's means its list is not what it thinks.
				return nil, "", invalidf("%v: session %s is producer %s's, not %s's", ErrOtherProducer, id,
					producerName(e.Producer()), producerName(req.Producer))
			}
			ids = append(ids, id)
		}
		// An id the table does not hold may still be in the bucket: a
		// write whose failure was reported can have landed after all
		// (reconcile could not re-read it while NATS was away). Every node
		// serves such a value, so it is deleted too; it is not counted,
		// as the table never held it.
		if stray, err = s.strayKeys(ctx, unknown, req.Org, req.Producer); err != nil {
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
	body, err := marshalReply(wire.CleanSessionsReply{Removed: len(removed)})
	return body, resultOK, err
}

// strayCheckWorkers bounds the concurrent reads of strayKeys: a long list
// of unknown ids (a retried clean whose first attempt went through) costs
// a few round trips of waiting, not one per id.
const strayCheckWorkers = 16

// strayKeys returns those of ids (none held by the table) that the bucket
// still holds a value for, in order. A value is returned only if it is a
// session of producer and, with org set, of org: the caller named the ids
// as its own, and a stray value of another org or producer (or one that
// is not a session at all) is left for an operator rather than deleted on
// that claim.
//
// Checked with a read rather than deleted blindly: a blind delete would
// send a delete to every node's watch and leave a marker in the bucket for
// each id that was never stored (a retried clean, a caller's stale list),
// while a read costs one round trip here and strays are rare. Called with
// mu held, so no write of these ids can come in between.
func (s *Service) strayKeys(ctx context.Context, ids []string, org, producer string) ([]string, error) {
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
				found[i], errs[i] = s.store.holds(ctx, ids[i], org, producer)
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
