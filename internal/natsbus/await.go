package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// What every service does when its NATS server does not answer at start
// (the orgmanager, the IP Mapper, the simulator, the resolver, the
// activity collector alike): it starts anyway — its HTTP listener serves,
// /health answers 503 naming the URL it waits for (Await.Err) — logs
// "waiting for NATS" once and then every AwaitConfig.LogEvery, not at
// every attempt, keeps trying with a growing delay (reconnectDelay), and
// does what needs NATS once it answers (WaitConnected), without a
// restart.

// reconnectDelay is Connect's delay before it tries the servers again,
// after the attempts-th round over them failed: 250ms doubling to 2s,
// ±10%, so that a server down for long is not asked four times a second
// by every client, and one back up is found within about 2s. nats.go
// starts counting again after each successful connection.
func reconnectDelay(attempts int) time.Duration {
	d := 2 * time.Second
	if attempts < 4 {
		d = 250 * time.Millisecond << max(attempts-1, 0)
	}
	return d - d/10 + rand.N(d/5+1)
}

// WaitConnected returns nil once nc is connected (at once when it is), or
// an error when ctx ends or nc is closed first. It polls the connection's
// state: cheap, and it needs no handler set when nc was made.
func WaitConnected(ctx context.Context, nc *nats.Conn) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if nc.IsConnected() {
			return nil
		}
		if nc.IsClosed() {
			return errors.New("natsbus: the NATS connection was closed before it connected")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// AwaitConfig configures an Await.
type AwaitConfig struct {
	// Conn is the service's connection (Connect with retryOnFailedConnect);
	// required.
	Conn *nats.Conn
	// URL is nats.url as the logs and /health show it, a password hidden
	// by the caller; required.
	URL string
	// Logger; nil logs nothing.
	Logger *slog.Logger
	// LogEvery is how often "still waiting for NATS" is logged after the
	// first "waiting for NATS"; default 30s.
	LogEvery time.Duration
}

// Await watches a service's NATS connection until it first connects: it
// logs that the service waits for it, and says so on /health (Err).
// Later outages are not its business: each service reports those as it
// must (a node keeps answering from its read models, the IP Mapper's
// writes fail, …). A nil *Await is a service without NATS: Err is nil.
type Await struct {
	cfg       AwaitConfig
	since     time.Time
	connected atomic.Bool
	done      chan struct{}
}

// NewAwait validates cfg and starts watching; the watch ends once the
// connection is up, or closed, or ctx ends.
func NewAwait(ctx context.Context, cfg AwaitConfig) (*Await, error) {
	if cfg.Conn == nil || cfg.URL == "" {
		return nil, errors.New("natsbus: Await needs a connection and its URL")
	}
	if cfg.LogEvery == 0 {
		cfg.LogEvery = 30 * time.Second
	}
	if cfg.LogEvery < 0 {
		return nil, errors.New("natsbus: Await's LogEvery must not be negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &Await{cfg: cfg, since: time.Now(), done: make(chan struct{})}
	if cfg.Conn.IsConnected() {
		a.connected.Store(true)
		close(a.done)
		return a, nil
	}
	cfg.Logger.Warn("waiting for NATS; retrying in the background, the service starts meanwhile",
		"url", cfg.URL, "check", "that the NATS server runs and that nats.url is right")
	go a.watch(ctx)
	return a, nil
}

func (a *Await) watch(ctx context.Context) {
	defer close(a.done)
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	say := time.NewTicker(a.cfg.LogEvery)
	defer say.Stop()
	for {
		nc := a.cfg.Conn
		if nc.IsConnected() {
			a.connected.Store(true)
			a.cfg.Logger.Info("NATS connected", "url", a.cfg.URL, "waited", time.Since(a.since).Round(time.Millisecond))
			return
		}
		if nc.IsClosed() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		case <-say.C:
			a.cfg.Logger.Warn("still waiting for NATS", "url", a.cfg.URL, "waited", time.Since(a.since).Round(time.Second),
				"check", "that the NATS server runs and that nats.url is right")
		}
	}
}

// Err is nil once the connection has been up (and from then on), else
// what /health says: the URL waited for, since when, what to check.
func (a *Await) Err() error {
	if a == nil || a.connected.Load() {
		return nil
	}
	status := strings.ToLower(a.cfg.Conn.Status().String())
	if a.cfg.Conn.Status() == nats.RECONNECTING {
		status = "connecting"
	}
	return fmt.Errorf("waiting for NATS at %s (%s for %s): check that the NATS server runs and that nats.url is right",
		a.cfg.URL, status, time.Since(a.since).Round(time.Second))
}

// Done is closed once the watch is over: the connection came up (Err is
// nil), or it was closed, or the watch's context ended.
func (a *Await) Done() <-chan struct{} { return a.done }
