package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testClock is a hand-set clock: the dirty ages Ready compares are made
// large by moving it, not by waiting.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *testClock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// waitReady waits until Ready's error contains want ("" for nil).
func waitReady(t *testing.T, d *Deployer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := d.Ready()
		if want == "" && err == nil || want != "" && err != nil && strings.Contains(err.Error(), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ready() = %v; want %q", err, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestReady(t *testing.T) {
	unreachable := fmt.Errorf("%w: not connected to NATS", ErrUnreachable)
	refused := errors.New("ipmapper: 500: KV write failed")
	for _, tc := range []struct {
		name string
		// ping: whether an IP Mapper is configured (Config.Ping set).
		ping bool
		// fail is what the publisher (and the ping) return while broken.
		fail error
		// age is how far the clock moves while broken.
		age time.Duration
		// want is in Ready's error while broken; "" means Ready stays nil.
		want []string
	}{
		{name: "IP Mapper unreachable", ping: true, fail: unreachable,
			want: []string{"IP Mapper unreachable: not connected to NATS"}},
		{name: "IP Mapper refuses, deploys behind", ping: true, fail: refused, age: 6 * time.Minute,
			want: []string{"deploys are behind", "6m0s old", "deploy.max_dirty_age is 5m0s", "KV write failed"}},
		{name: "IP Mapper refuses, within the bound", ping: true, fail: refused, age: 4 * time.Minute},
		{name: "no IP Mapper configured: unreachable is not checked", fail: unreachable},
		{name: "no IP Mapper configured, deploys behind", fail: unreachable, age: time.Hour,
			want: []string{"deploys are behind", "1h0m0s old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			var pingErr atomic.Pointer[error]
			none := error(nil)
			pingErr.Store(&none)
			cfg := Config{Clock: clk.now, MaxDirtyAge: 5 * time.Minute, PingInterval: 5 * time.Millisecond}
			if tc.ping {
				cfg.Ping = func(context.Context) error { return *pingErr.Load() }
			}
			f := newFixture(t, cfg)
			waitReady(t, f.d, "")

			f.pub.failWith(tc.fail)
			pingErr.Store(&tc.fail)
			f.org("acme", "10.0.0.0/8")
			// Wait for a failed attempt, so that what Ready sees is the
			// failure, then age the change.
			for f.pub.callCount() == 0 {
				time.Sleep(time.Millisecond)
			}
			clk.advance(tc.age)
			if len(tc.want) == 0 {
				if err := f.d.Ready(); err != nil {
					t.Fatalf("Ready() = %v; want nil", err)
				}
			}
			for _, w := range tc.want {
				waitReady(t, f.d, w)
			}

			// Repaired: the retry deploys, and Ready is nil again.
			f.pub.failWith(nil)
			pingErr.Store(&none)
			f.settle("acme")
			waitReady(t, f.d, "")
		})
	}
}

// TestPingNoticesIPMapperGone: with nothing to deploy, the periodic ping is
// what tells Ready that the IP Mapper stopped answering, and came back.
func TestPingNoticesIPMapperGone(t *testing.T) {
	var down atomic.Bool
	f := newFixture(t, Config{PingInterval: 5 * time.Millisecond, Ping: func(context.Context) error {
		if down.Load() {
			return fmt.Errorf("%w: nats: no responders available for request", ErrUnreachable)
		}
		return nil
	}})
	waitReady(t, f.d, "")
	down.Store(true)
	waitReady(t, f.d, "IP Mapper unreachable: nats: no responders")
	down.Store(false)
	waitReady(t, f.d, "")
}
