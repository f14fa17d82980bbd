package radius

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"layeh.com/radius"

	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/session"
)

// Mapper is what the Server needs of the IP Mapper
// (*mapperclient.Client).
type Mapper interface {
	SetSessionBatchTTL(ctx context.Context, sessions []session.Session, ttl time.Duration) (int, error)
	CleanSessions(ctx context.Context, r mapperclient.CleanRequest) (int, error)
	GetSessions(ctx context.Context, q mapperclient.Query) ([]session.Session, error)
}

// ServerConfig is a Config with what the caller wires in.
type ServerConfig struct {
	Config
	// Mapper stores the sessions; required.
	Mapper Mapper
	// Registerer receives the metrics; nil registers them nowhere.
	Registerer prometheus.Registerer
	// Logger; nil discards.
	Logger *slog.Logger
}

// Sizes of the queues.
const (
	shardQueue   = 8192 // requests waiting per writer
	nasQueue     = 64   // Accounting-On/Off waiting
	dupCacheSize = 1 << 16
)

// Server is the RADIUS accounting server.
type Server struct {
	cfg     Config
	mapper  Mapper
	clients clientTable
	dec     *decoder
	state   *stateCache
	dup     *dupCache
	m       *metrics
	log     *slog.Logger
	orgs    []string // every organisation a NAS's sessions may be in
	seed    maphash.Seed

	conns  []*net.UDPConn
	shards []chan *request
	nas    chan *request
	// lastErr is the last IP Mapper failure, nil once a call succeeds.
	lastErr atomic.Pointer[error]
}

// request is an authenticated Accounting-Request waiting for its write.
type request struct {
	conn  *net.UDPConn
	src   netip.AddrPort
	key   dupKey
	pkt   *radius.Packet
	ev    event
	label string
	seq   uint64 // Accounting-On/Off: the admission sequence at arrival
	org   string // Accounting-On/Off: the client entry's organisation
}

// New validates cfg and builds the Server; Listen binds it.
func New(cfg ServerConfig) (*Server, error) {
	if cfg.Mapper == nil {
		return nil, errors.New("radius: Mapper is required")
	}
	c := cfg.Config.withDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: c, mapper: cfg.Mapper, clients: newClientTable(c.Clients), dec: newDecoder(c),
		state: newStateCache(c.StateSize), dup: newDupCache(dupCacheSize), log: log, seed: maphash.MakeSeed()}
	orgs := map[string]bool{}
	for _, cl := range c.Clients {
		orgs[cl.Org] = true
	}
	for _, o := range c.Realms {
		orgs[o] = true
	}
	for o := range orgs {
		s.orgs = append(s.orgs, o)
	}
	slices.Sort(s.orgs)
	var err error
	if s.m, err = newMetrics(cfg.Registerer, func() float64 { return float64(s.state.len()) }); err != nil {
		return nil, fmt.Errorf("radius: metrics: %w", err)
	}
	n := runtime.GOMAXPROCS(0) * 2
	s.shards = make([]chan *request, n)
	for i := range s.shards {
		s.shards[i] = make(chan *request, shardQueue)
	}
	s.nas = make(chan *request, nasQueue)
	return s, nil
}

// Listen binds every radius.listen address.
func (s *Server) Listen() error {
	for _, l := range s.cfg.Listen {
		ap, _ := netip.ParseAddrPort(l) // validated
		conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		if err != nil {
			s.Close()
			return fmt.Errorf("radius.listen %s: %w", l, err)
		}
		// Bursts (a NAS's Accounting-On is followed by every Start at
		// once) must wait in the socket, not be lost there.
		_ = conn.SetReadBuffer(4 << 20)
		s.conns = append(s.conns, conn)
		s.log.Info("RADIUS accounting listening", "address", conn.LocalAddr().String())
	}
	return nil
}

// Addrs are the bound addresses, in radius.listen order.
func (s *Server) Addrs() []netip.AddrPort {
	out := make([]netip.AddrPort, len(s.conns))
	for i, c := range s.conns {
		out[i] = c.LocalAddr().(*net.UDPAddr).AddrPort()
	}
	return out
}

// Close closes the sockets (Run does when its context ends).
func (s *Server) Close() {
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// Health is nil unless the last IP Mapper call failed: then requests go
// unanswered until it succeeds again.
func (s *Server) Health() error {
	if p := s.lastErr.Load(); p != nil {
		return fmt.Errorf("radius: the IP Mapper did not confirm the last write: %w", *p)
	}
	return nil
}

// Run serves until ctx ends, then closes the sockets and lets the writes
// under way finish (each within write_timeout).
func (s *Server) Run(ctx context.Context) error {
	var readers, writers sync.WaitGroup
	for _, c := range s.conns {
		for range max(2, runtime.GOMAXPROCS(0)) {
			readers.Add(1)
			go func() {
				defer readers.Done()
				s.read(c)
			}()
		}
	}
	for _, q := range s.shards {
		writers.Add(1)
		go func() {
			defer writers.Done()
			s.writer(q)
		}()
	}
	writers.Add(1)
	go func() {
		defer writers.Done()
		for r := range s.nas {
			s.accountingOnOff(r)
		}
	}()
	<-ctx.Done()
	s.Close()
	readers.Wait()
	for _, q := range s.shards {
		close(q)
	}
	close(s.nas)
	writers.Wait()
	return nil
}

func (s *Server) read(c *net.UDPConn) {
	buf := make([]byte, radius.MaxPacketLength+1)
	for {
		n, src, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("RADIUS read", "err", err)
			continue
		}
		s.handle(c, slices.Clone(buf[:n]), src)
	}
}

func (s *Server) drop(reason string) { s.m.dropped.WithLabelValues(reason).Inc() }

// handle takes one datagram: it is dropped (and counted) unless it is an
// Accounting-Request from a known NAS with a valid Request Authenticator.
// Nothing is answered before its write is confirmed.
func (s *Server) handle(c *net.UDPConn, b []byte, src netip.AddrPort) {
	h, err := checkHeader(b)
	if err != nil {
		s.drop(dropMalformed)
		return
	}
	b = b[:h.length]
	if radius.Code(b[0]) != radius.CodeAccountingRequest {
		s.drop(dropNotAccounting)
		return
	}
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	cl := s.clients.lookup(src.Addr())
	if cl == nil {
		s.drop(dropUnknownNAS)
		return
	}
	if !radius.IsAuthenticRequest(b, cl.secret) {
		s.drop(dropBadAuthenticator)
		return
	}
	pkt, err := radius.Parse(b, cl.secret)
	if err != nil {
		s.drop(dropMalformed)
		return
	}
	ev, err := s.dec.decode(pkt, src.Addr(), cl)
	if err != nil {
		s.drop(dropMalformed)
		s.log.Debug("RADIUS request dropped", "nas", src.Addr().String(), "err", err)
		return
	}
	r := &request{conn: c, src: src, pkt: pkt, ev: ev, label: statusLabel(ev.status), org: cl.org}
	r.key = dupKey{src: src, ident: b[1], auth: pkt.Authenticator}
	switch st, reply := s.dup.check(r.key, r.label); st {
	case dupPending:
		s.drop(dropDuplicateInFlight)
		return
	case dupReplied:
		s.m.requests.WithLabelValues(r.label, resultDuplicate).Inc()
		s.send(r, reply)
		return
	}
	switch ev.status {
	case statusStart, statusInterim, statusStop:
		if !s.state.admit(&r.ev) {
			s.reply(r, resultStale)
			return
		}
		s.m.inFlight.Inc()
		select {
		case s.shards[maphash.String(s.seed, ev.id)%uint64(len(s.shards))] <- r:
		default:
			s.m.inFlight.Dec()
			s.dup.fail(r.key)
			s.m.requests.WithLabelValues(r.label, resultOverload).Inc()
		}
	case statusAccountingOn, statusAccountingOff:
		r.seq = s.state.now()
		s.m.inFlight.Inc()
		select {
		case s.nas <- r:
		default:
			s.m.inFlight.Dec()
			s.dup.fail(r.key)
			s.m.requests.WithLabelValues(r.label, resultOverload).Inc()
		}
	default:
		// Nothing to store (tunnel accounting, Failed): answered, or
		// the NAS would retransmit it for ever.
		s.reply(r, resultIgnored)
	}
}

// reply answers r and remembers the answer for its retransmissions.
func (s *Server) reply(r *request, result string) {
	b, err := r.pkt.Response(radius.CodeAccountingResponse).Encode()
	if err != nil {
		// An empty response always encodes; keep the NAS retrying.
		s.dup.fail(r.key)
		s.log.Error("RADIUS response encode", "err", err)
		return
	}
	s.dup.done(r.key, b)
	// Counted before it is sent: a NAS that has its answer finds it
	// counted.
	s.m.requests.WithLabelValues(r.label, result).Inc()
	s.send(r, b)
}

func (s *Server) send(r *request, b []byte) {
	if _, err := r.conn.WriteToUDPAddrPort(b, r.src); err != nil && !errors.Is(err, net.ErrClosed) {
		s.log.Warn("RADIUS response send", "nas", r.src.String(), "err", err)
	}
}

// writer writes one shard's requests in arrival order: whatever queued
// up while the previous call was under way goes in the next, up to
// max_batch. A session's requests always share a shard, so they reach
// the IP Mapper in the order they were admitted.
func (s *Server) writer(q chan *request) {
	batch := make([]*request, 0, s.cfg.MaxBatch)
	for first := range q {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < s.cfg.MaxBatch {
			select {
			case r, ok := <-q:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		s.writeBatch(batch)
	}
}

// writeBatch writes runs of Start/Interim as one set-session-batch and
// runs of Stop as one clean by ids, in order, and answers each request
// whose write the IP Mapper confirmed.
func (s *Server) writeBatch(batch []*request) {
	for len(batch) > 0 {
		stop := batch[0].ev.status == statusStop
		n := 1
		for n < len(batch) && (batch[n].ev.status == statusStop) == stop {
			n++
		}
		run := batch[:n]
		batch = batch[n:]
		if stop {
			s.clean(run)
		} else {
			s.set(run)
		}
	}
}

func (s *Server) set(run []*request) {
	sessions := make([]session.Session, len(run))
	for i, r := range run {
		sessions[i] = r.ev.sess
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
	defer cancel()
	t0 := time.Now()
	_, err := s.mapper.SetSessionBatchTTL(ctx, sessions, s.cfg.SessionTTL)
	s.observe("set", t0, len(run), err)
	var be *mapperclient.BatchError
	if errors.As(err, &be) && be.Failed == len(be.Items) {
		// Only the listed items failed: the others are stored.
		failed := make(map[int]string, len(be.Items))
		for _, it := range be.Items {
			failed[it.Index] = it.Error
		}
		for i, r := range run {
			if msg, ok := failed[i]; ok {
				s.log.Warn("RADIUS session refused by the IP Mapper", "nas", r.ev.nas, "session", r.ev.id, "err", msg)
				s.fail(r, resultRefused)
				continue
			}
			s.done(r)
		}
		return
	}
	s.finish(run, err)
}

func (s *Server) clean(run []*request) {
	ids := make([]string, 0, len(run))
	for _, r := range run {
		if !slices.Contains(ids, r.ev.id) {
			ids = append(ids, r.ev.id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
	defer cancel()
	t0 := time.Now()
	_, err := s.mapper.CleanSessions(ctx, mapperclient.CleanRequest{IDs: ids, Producer: session.ProducerRADIUS})
	s.observe("clean", t0, len(run), err)
	s.finish(run, err)
}

func (s *Server) observe(op string, t0 time.Time, n int, err error) {
	res := "ok"
	if err != nil {
		res = "error"
		s.lastErr.Store(&err)
	} else {
		s.lastErr.Store(nil)
	}
	s.m.write.WithLabelValues(op, res).Observe(time.Since(t0).Seconds())
	s.m.batch.Observe(float64(n))
}

// finish answers every request of run when err is nil, none otherwise.
func (s *Server) finish(run []*request, err error) {
	if err == nil {
		for _, r := range run {
			s.done(r)
		}
		return
	}
	result := classify(err)
	s.log.Warn("RADIUS write not confirmed; the NAS will retransmit", "requests", len(run), "result", result, "err", err)
	for _, r := range run {
		s.fail(r, result)
	}
}

// done answers r. In flight until counted, so that a reader of the
// metrics never sees it in neither.
func (s *Server) done(r *request) {
	s.reply(r, resultAcknowledged)
	s.m.inFlight.Dec()
}

// fail leaves r unanswered; its retransmission will be written again.
func (s *Server) fail(r *request, result string) {
	s.dup.fail(r.key)
	s.m.requests.WithLabelValues(r.label, result).Inc()
	s.m.inFlight.Dec()
}

// classify names the result of a failed IP Mapper call.
func classify(err error) string {
	var re *mapperclient.RemoteError
	var be *mapperclient.BatchError
	switch {
	case errors.As(err, &re) && re.Code == 400, errors.As(err, &be):
		return resultRefused
	case errors.Is(err, mapperclient.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return resultUnavailable
	}
	return resultMapperError
}

// accountingOnOff removes every session of the NAS that sent r (it has
// rebooted, or is going down): the sessions whose opaque_id names the NAS,
// found through get-sessions by organisation, since the IP Mapper selects
// by nothing narrower that a RADIUS session carries. Sessions begun after
// r arrived are spared.
func (s *Server) accountingOnOff(r *request) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.WriteTimeout)
	defer cancel()
	opaque := nasOpaqueID(r.ev.nas)
	var ids []string
	t0 := time.Now()
	var err error
	for _, org := range s.orgs {
		var found []session.Session
		if found, err = s.mapper.GetSessions(ctx, mapperclient.Query{Org: org}); err != nil {
			break
		}
		for _, ss := range found {
			// By opaque_id alone: it is this producer's mark, and the clean
			// below carries the producer, so the IP Mapper removes none of
			// another producer's sessions whatever their opaque_id.
			if ss.OpaqueID == opaque && !s.state.admittedAfter(ss.ID, r.seq) {
				ids = append(ids, ss.ID)
			}
		}
	}
	s.observe("list", t0, 1, err)
	if err == nil && len(ids) > 0 {
		t0 = time.Now()
		_, err = s.mapper.CleanSessions(ctx, mapperclient.CleanRequest{IDs: ids, Producer: session.ProducerRADIUS})
		s.observe("clean", t0, 1, err)
	}
	if err != nil {
		s.finish([]*request{r}, err)
		return
	}
	s.state.stopNAS(r.ev.nas, ids)
	s.log.Info("RADIUS "+r.label+": the NAS's sessions removed", "nas", r.ev.nas, "sessions", len(ids))
	s.done(r)
}
