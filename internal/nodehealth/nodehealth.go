// Package nodehealth is how the orgmanager learns which filter nodes exist
// and how they are: each node (the resolver, the simulator, the node of
// `svc-pf all`) writes a small heartbeat under its name to the JetStream
// KV bucket svcpf_nodes every interval (Announcer); the orgmanager reads
// the bucket back (List) for its GET /nodes and its console's Nodes page.
//
// Its place in the data flow: node.Node (Ready, Status) → Announcer → KV
// "svcpf_nodes" → List → the orgmanager's REST handler and console page.
// A node that stops beating shows as stale after StaleBeats intervals and
// leaves the bucket once its last beat is older than the bucket's MaxAge
// (BucketBeats intervals), so a dead node disappears without anyone
// deleting it.
package nodehealth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/natsbus"
)

const (
	// Bucket is the KV bucket the heartbeats live in.
	Bucket = "svcpf_nodes"
	// DefaultInterval is how often a node writes its heartbeat.
	DefaultInterval = 10 * time.Second
	// StaleBeats: a node whose last beat is older than this many of its
	// intervals is shown as stale.
	StaleBeats = 3
	// BucketBeats is the bucket's MaxAge in intervals of the node that
	// creates it: a stale node is shown for a while, then disappears.
	BucketBeats = 6
	// maxName bounds a node's name (a KV key).
	maxName = 200
)

// Feed is one feed a node serves.
type Feed struct {
	Name    string `json:"name"`
	Version int64  `json:"version"`
	// LoadedAt is when the version was loaded (zero: never loaded).
	LoadedAt time.Time `json:"loaded_at,omitzero"`
}

// Counts are the sizes of the node's read models.
type Counts struct {
	Sessions          int `json:"sessions"`
	SettingsDocuments int `json:"settings_documents"`
}

// Snapshot is what a node says about itself at one beat.
type Snapshot struct {
	// NotReady is the node's /health message when not ready; "" when ready.
	NotReady string
	Feeds    []Feed
	Counts   Counts
}

// Beat is the JSON a node writes under its name.
type Beat struct {
	Name      string    `json:"name"`
	Services  []string  `json:"services"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// IntervalSeconds is the node's heartbeat interval: a reader tells a
	// stale node by it.
	IntervalSeconds float64 `json:"interval_seconds"`
	Ready           bool    `json:"ready"`
	NotReady        string  `json:"not_ready,omitempty"`
	Feeds           []Feed  `json:"feeds"`
	Counts          Counts  `json:"counts"`
}

// ValidateName checks a node's name: it is a KV key, so letters, digits,
// '-', '_', '.' (not at either end) and '=' only.
func ValidateName(name string) error {
	if name == "" || len(name) > maxName {
		return fmt.Errorf("node name must be 1 to %d characters", maxName)
	}
	if strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return fmt.Errorf("node name %q: a dot may not start or end it, nor follow another", name)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.=", r)
		if !ok {
			return fmt.Errorf("node name %q: only letters, digits, '-', '_', '.' and '=' are allowed", name)
		}
	}
	return nil
}

// DefaultName is the name a node takes when none is configured: the
// host's name and the service, such as "dns1-resolver"; the host's name is
// cleaned to what a key allows.
func DefaultName(host, service string) string {
	var b strings.Builder
	for _, r := range host {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	h := b.String()
	if h == "" {
		h = "node"
	}
	if len(h) > maxName-len(service)-1 {
		h = h[:maxName-len(service)-1]
	}
	return h + "-" + service
}

// bucketConfig is the bucket a node creates when it is missing.
func bucketConfig(interval time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: Bucket, History: 1, TTL: BucketBeats * interval,
		Description: "svc-pf node heartbeats"}
}

// AnnouncerConfig configures an Announcer.
type AnnouncerConfig struct {
	NATS     *nats.Conn
	Name     string
	Services []string
	Version  string
	// Interval between beats; default DefaultInterval.
	Interval time.Duration
	// Snapshot is the node's state now; it must be cheap (it runs once a
	// beat, on the announcer's goroutine, never on the DNS path).
	Snapshot func() Snapshot
	Logger   *slog.Logger
	// Clock is time.Now unless a test sets it.
	Clock func() time.Time
}

// Announcer writes a node's heartbeat every interval until its Run ends.
type Announcer struct {
	cfg     AnnouncerConfig
	kv      *natsbus.KV
	started time.Time
	log     *slog.Logger
}

// NewAnnouncer validates cfg.
func NewAnnouncer(cfg AnnouncerConfig) (*Announcer, error) {
	if cfg.NATS == nil || cfg.Snapshot == nil {
		return nil, errors.New("nodehealth: NATS and Snapshot are required")
	}
	if err := ValidateName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Interval < 10*time.Millisecond {
		return nil, errors.New("nodehealth: the heartbeat interval must be at least 10ms")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	kv, err := natsbus.NewKV(cfg.NATS, bucketConfig(cfg.Interval))
	if err != nil {
		return nil, err
	}
	return &Announcer{cfg: cfg, kv: kv, started: cfg.Clock(), log: cfg.Logger.With("node", cfg.Name)}, nil
}

// Run beats at once and then every interval until ctx ends. A failed
// write is logged once per outage (and its end once), not at every beat;
// the node runs on without it.
func (a *Announcer) Run(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		err := a.beat(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !failing:
			failing = true
			a.log.Warn("node heartbeat not written; retrying every interval", "bucket", Bucket, "error", err)
		case err == nil && failing:
			failing = false
			a.log.Info("node heartbeat written again", "bucket", Bucket)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// beat writes one heartbeat, within one interval.
func (a *Announcer) beat(ctx context.Context) error {
	s := a.cfg.Snapshot()
	b := Beat{Name: a.cfg.Name, Services: a.cfg.Services, Version: a.cfg.Version,
		StartedAt: a.started.UTC(), UpdatedAt: a.cfg.Clock().UTC(), IntervalSeconds: a.cfg.Interval.Seconds(),
		Ready: s.NotReady == "", NotReady: s.NotReady, Feeds: s.Feeds, Counts: s.Counts}
	if b.Feeds == nil {
		b.Feeds = []Feed{}
	}
	body, err := json.Marshal(b)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Interval)
	defer cancel()
	return a.kv.Put(ctx, a.cfg.Name, body)
}

// Node is a node as the orgmanager shows it: its last beat, how old that
// is, and whether it is stale.
type Node struct {
	Beat
	// AgeSeconds is how long ago the last beat was written.
	AgeSeconds float64 `json:"age_seconds"`
	// Stale: the last beat is older than StaleBeats intervals.
	Stale bool `json:"stale"`
}

// Age is AgeSeconds as a duration, for the console.
func (n Node) Age() time.Duration {
	return time.Duration(n.AgeSeconds * float64(time.Second)).Round(time.Second)
}

// FeedAge is how long ago a feed's version was loaded, at now; 0 when it
// never was.
func FeedAge(f Feed, now time.Time) time.Duration {
	if f.LoadedAt.IsZero() {
		return 0
	}
	return now.Sub(f.LoadedAt).Round(time.Second)
}

// List reads every node's last beat from the bucket, by name; no bucket
// (no node has ever beaten) is no nodes. A value that is not a beat is
// left out.
func List(ctx context.Context, js jetstream.JetStream, now time.Time) ([]Node, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return []Node{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open KV bucket %s: %w", Bucket, err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read KV bucket %s: %w", Bucket, err)
	}
	defer func() { _ = w.Stop() }()
	out := []Node{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read KV bucket %s: %w", Bucket, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("read KV bucket %s: the watch ended early", Bucket)
			}
			if e == nil { // every current value has been delivered
				slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
				return out, nil
			}
			var b Beat
			if json.Unmarshal(e.Value(), &b) != nil || b.Name != e.Key() {
				continue
			}
			out = append(out, At(b, now))
		}
	}
}

// At is b as seen at now.
func At(b Beat, now time.Time) Node {
	n := Node{Beat: b, AgeSeconds: max(0, now.Sub(b.UpdatedAt).Seconds())}
	interval := time.Duration(b.IntervalSeconds * float64(time.Second))
	if interval <= 0 {
		interval = DefaultInterval
	}
	n.Stale = now.Sub(b.UpdatedAt) > StaleBeats*interval
	return n
}
