package ipmapper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus"
)

// The micro service of a term runs on a NATS connection of its own, opened
// when the term activates and closed when it ends. Stopping a micro service
// drains its subscriptions, and nats.go loses a drain that starts while the
// connection is reconnecting — which is exactly when a term ends after an
// outage longer than the lock TTL: the UNSUB is not sent, the reconnect
// sends the draining subscription again, and the drain then drops it on the
// client only. The server kept a member of each endpoint's queue group
// whose requests the client discarded, for as long as the connection
// lived: about half of all requests timed out, for good, while the next
// term served beside it. A connection that closes takes every subscription
// with it on the server, whatever state it was in, so the subscriptions of
// a term end with the term. TestIPMapperAnswersAfterNATSRestart (package
// app) kills a real nats-server under a running IP Mapper to check it.

// dialServiceConn opens the connection of a term's micro service with the
// options of Config.Conn.
func (s *Service) dialServiceConn() (*nats.Conn, error) {
	o := s.cfg.Conn.Opts
	if o.Name != "" {
		o.Name += " (micro service)"
	}
	// The lock was just taken over NATS: a server that cannot be reached
	// now fails the activation, which the campaign retries.
	o.RetryOnFailedConnect = false
	// Config.Conn reports the outages; the self-probe covers this one.
	o.DisconnectedCB, o.DisconnectedErrCB, o.ReconnectedCB = nil, nil, nil
	return o.Connect()
}

// stopServing stops the term's micro service and closes its connection:
// requests already received are still answered (writes are refused by
// then, the fence having closed) while the connection is up; a connection
// that is reconnecting closes at once.
func (s *Service) stopServing() {
	if s.svc == nil {
		return
	}
	conn := s.svcConn
	closed := conn.StatusChanged(nats.CLOSED)
	if err := s.svc.Stop(); err != nil {
		s.log.Warn("unregister micro service", "err", err)
	}
	if err := conn.Drain(); err == nil {
		select {
		case <-closed:
		case <-time.After(s.cfg.WriteTimeout):
		}
	}
	conn.Close() // a no-op once drained; closes one the drain did not
	s.svc, s.svcConn = nil, nil
}

// defaultProbeInterval is Config.ProbeInterval's default.
const defaultProbeInterval = 5 * time.Second

// probesPerEndpoint is how many probes a round sends to each endpoint. The
// server hands each request to one member of the endpoint's queue group at
// random: with one silent member beside this one, a round of four per
// endpoint (sixteen in all) misses it with a chance of 1 in 65 536.
const probesPerEndpoint = 4

// probeLoop probes the micro service at once and every ProbeInterval
// while the term lasts.
func (s *Service) probeLoop(ctx context.Context) {
	s.probe(ctx)
	s.every(ctx, s.cfg.ProbeInterval, func() { s.probe(ctx) })
}

// probe sends one round of probes (wire.HeaderProbe) to every endpoint on
// Config.Conn, through the subjects and queue groups the clients use, and
// records in probeErr whether each was answered within ProbeTimeout. It
// checks what the clients get, not what this instance believes: a
// subscription the server still delivers to but nobody answers — of this
// process or of any other — shows as a probe unanswered.
func (s *Service) probe(term context.Context) {
	ctx, cancel := context.WithTimeout(term, s.cfg.ProbeTimeout)
	defer cancel()
	cmds := wire.Commands()
	errs := make([]error, len(cmds)*probesPerEndpoint)
	var wg sync.WaitGroup
	for i := range errs {
		msg := &nats.Msg{Subject: wire.Subject(s.cfg.Bucket, cmds[i%len(cmds)]), Header: nats.Header{wire.HeaderProbe: []string{"1"}}}
		wg.Go(func() {
			if _, err := s.cfg.Conn.RequestMsgWithContext(ctx, msg); err != nil {
				errs[i] = fmt.Errorf("%s: %w", msg.Subject, err)
			}
		})
	}
	wg.Wait()
	if term.Err() != nil {
		return // the term ended: the next one probes afresh
	}
	missed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			missed++
			if first == nil {
				first = err
			}
		}
	}
	if missed == 0 {
		if s.probeErr.Swap(nil) != nil {
			s.log.Info("the micro service answers its probes again")
		}
		return
	}
	s.metrics.probeMissed.Add(float64(missed))
	if errors.Is(first, context.DeadlineExceeded) {
		first = fmt.Errorf("%w (no answer within %s)", first, s.cfg.ProbeTimeout)
	}
	err := fmt.Errorf("the micro service did not answer %d of %d probes sent to its own endpoints (first: %w)",
		missed, len(errs), natsbus.Unreachable(s.cfg.Conn, first, "probe the micro service"))
	if s.probeErr.Swap(&err) == nil {
		s.log.Error("the micro service does not answer all requests; /health is 503 until it does", "err", err)
	}
}

// ServeError reports why the active instance's micro service counts as not
// answering its clients, or nil: set when a round of self-probes was not
// answered in full, cleared by the next round that is. Nil when not active.
func (s *Service) ServeError() error {
	if s.Role() != RoleActive {
		return nil
	}
	if p := s.probeErr.Load(); p != nil {
		return *p
	}
	return nil
}
