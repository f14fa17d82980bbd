package deploy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrUnreachable marks a Publisher's (or Config.Ping's) error that means no
// IP Mapper answered: NATS is down or not yet connected, nothing listens on
// the IP Mapper's subjects, or a request timed out. Its text starts the
// error, so the log and /health say "IP Mapper unreachable: …" rather than
// what the NATS client happened to report (issue 11: "outbound buffer limit
// exceeded"). Any other error means the IP Mapper answered, if only to
// refuse.
var ErrUnreachable = errors.New("IP Mapper unreachable")

// defaultPingInterval is how often Run asks the IP Mapper whether it
// answers when no publish told it meanwhile (a tenth of it while it does
// not).
const defaultPingInterval = 10 * time.Second

// reachability is what the last publish or ping told of the IP Mapper.
type reachability struct {
	mu  sync.Mutex
	err error // nil: it answered; else an ErrUnreachable error
	at  time.Time
}

// note records the outcome of a publish or ping.
func (r *reachability) note(err error, now time.Time) {
	if err != nil && !errors.Is(err, ErrUnreachable) {
		err = nil // it answered
	}
	r.mu.Lock()
	r.err, r.at = err, now
	r.mu.Unlock()
}

func (r *reachability) get() (time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at, r.err
}

// pingLoop asks the IP Mapper whether it answers, at once and then every
// interval in which no publish or ping said so, so that /health notices an
// IP Mapper gone while no deploy runs; while it does not answer, ten times
// as often, so that /health turns green soon after it is back (an
// unanswered request costs nothing: NATS says "no responders" at once).
func (d *Deployer) pingLoop(ctx context.Context) {
	if d.ping == nil {
		return
	}
	t := time.NewTicker(max(d.pingInterval/10, time.Millisecond))
	defer t.Stop()
	for {
		at, err := d.reach.get()
		if at.IsZero() || err != nil || d.sched.now().Sub(at) >= d.pingInterval {
			pctx, cancel := context.WithTimeout(ctx, d.pingInterval)
			err := d.ping(pctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			d.reach.note(err, d.sched.now())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Ready reports whether deploys work, for the orgmanager's /health: nil, or
// why not — the IP Mapper did not answer the last publish or ping (only
// when a Ping is configured, i.e. an IP Mapper is), or the oldest change
// not yet deployed is older than Config.MaxDirtyAge, with the last deploy
// error. The text is for operators.
func (d *Deployer) Ready() error {
	if d.ping != nil {
		if _, err := d.reach.get(); err != nil {
			return err
		}
	}
	if d.maxDirtyAge <= 0 {
		return nil
	}
	age := time.Duration(d.sched.oldestDirty() * float64(time.Second))
	if age <= d.maxDirtyAge {
		return nil
	}
	// Whole seconds, except under ten, where "0s old" would contradict the
	// bound it is said to exceed.
	if age < 10*time.Second {
		age = age.Round(10 * time.Millisecond)
	} else {
		age = age.Round(time.Second)
	}
	if last := d.sched.lastError(); last != nil {
		return fmt.Errorf("deploys are behind: the oldest change not yet deployed is %s old (deploy.max_dirty_age is %s); last deploy error: %w", age, d.maxDirtyAge, last)
	}
	return fmt.Errorf("deploys are behind: the oldest change not yet deployed is %s old (deploy.max_dirty_age is %s)", age, d.maxDirtyAge)
}
