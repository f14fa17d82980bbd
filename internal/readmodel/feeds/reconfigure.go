package feeds

import (
	"context"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Reconfiguration: a running node may be given a new `feeds:` list (a
// reload) without a restart. A feed whose entry is unchanged keeps its
// loaded version and its poller's state; a new entry, or a changed one
// (another URL, interval, delay…), starts empty and loads as at start
// (Status says "not loaded" until it has, so /health tells the truth); a
// removed entry stops and its metrics series go.

// Reconfigure validates list as New would and returns the commit that
// puts it in force. An invalid list is an error and changes nothing; so
// does not calling commit. commit stops the feeds' pollers (each returns
// once its poll in progress sees its context end), swaps the feeds and
// starts the pollers again when Run is running.
func (c *Client) Reconfigure(list []FeedConfig) (commit func(), err error) {
	states, err := c.newStates(list)
	if err != nil {
		return nil, err
	}
	return func() { c.reconfigure(states) }, nil
}

func (c *Client) reconfigure(next []*feedState) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	for _, stop := range c.stops {
		stop()
	}
	c.stops = nil
	c.followers.Wait()

	c.pubMu.Lock()
	old, oldSet := c.feeds, c.set.Load()
	set := &Set{feeds: make([]*loadedFeed, len(next))}
	var fresh []*feedState
	for i, f := range next {
		j := slices.IndexFunc(old, func(o *feedState) bool { return o.cfg == f.cfg })
		if j < 0 {
			fresh = append(fresh, f)
			continue
		}
		// The same entry: keep what it loaded and knows.
		next[i] = old[j]
		next[i].pos = i
		set.feeds[i] = oldSet.feeds[j]
	}
	// The series of every poller that goes, then the new pollers' (a
	// changed entry's start again from version 0).
	for _, o := range old {
		if !slices.Contains(next, o) {
			c.m.drop(o.cfg.Name)
		}
	}
	for _, f := range fresh {
		f.m = c.m.feed(f.cfg.Name)
		f.status.Name = f.cfg.Name
	}
	c.feeds = next
	c.set.Store(set)
	if !slices.Contains(set.feeds, nil) {
		c.readyOnce.Do(func() { close(c.ready) })
	}
	c.pubMu.Unlock()

	if c.runCtx != nil {
		c.startFollowers()
	}
}

// startFollowers starts one poll goroutine per feed under Run's context;
// runMu is held.
func (c *Client) startFollowers() {
	for _, f := range c.feeds {
		ctx, cancel := context.WithCancel(c.runCtx)
		c.stops = append(c.stops, cancel)
		c.followers.Go(func() { c.follow(ctx, f) })
	}
}

// drop deletes one feed's series.
func (m *metrics) drop(name string) {
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{m.version, m.entries, m.lastSuccess,
		m.failures, m.updateSeconds, m.fetchedBytes, m.lineageResets} {
		v.DeletePartialMatch(prometheus.Labels{"feed": name})
	}
}
