package activity

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ClientIP modes: how much of the client's address an event keeps.
const (
	// ClientFull keeps the address.
	ClientFull = "full"
	// ClientTruncate keeps its network: /24 for IPv4, /48 for IPv6.
	ClientTruncate = "truncate"
	// ClientHash keeps an HMAC-SHA-256 of it (its first 8 bytes in hex,
	// "h:…"), under a key drawn at random each UTC day and held only in
	// the node's memory: one client's events can be told apart within a
	// day, and nobody — the operator included — can learn the address back
	// or link two days.
	ClientHash = "hash"
	// ClientNone keeps nothing.
	ClientNone = "none"
)

// Config is the `activity` section. Under `svc-pf all` one section serves
// the node, the collector and the reports; standalone, `svc-pf resolver`
// reads the node's keys, `svc-pf activity` the collector's (Store,
// Retention, Stream) and `svc-pf orgmanager` Store to answer the reports.
type Config struct {
	// Enabled turns the node's side on: the observer, its queue and the
	// publisher (default true). Off, the resolver has no observer for it.
	Enabled bool `yaml:"enabled"`
	// SampleAllowed keeps one in this many plain allows as events (0: none,
	// 1: all); every plain allow is counted either way. Default 50.
	SampleAllowed int `yaml:"sample_allowed"`
	// ClientIP is full, truncate, hash or none (default full).
	ClientIP string `yaml:"client_ip"`
	// CountInterval is the length of a plain-allow count's interval
	// (default 1m; at least 1s, at most 1h, dividing an hour).
	CountInterval time.Duration `yaml:"count_interval"`
	// Queue is how many events the observer's queue holds before it drops
	// (svcpf_activity_dropped_total); default 65536.
	Queue int `yaml:"queue"`
	// BufferBytes bounds the encoded batches a node holds while it cannot
	// publish (NATS away); beyond it the oldest are dropped and counted.
	// Default 64 MiB.
	BufferBytes int64 `yaml:"buffer_bytes"`
	// Stream is the JetStream stream ACTIVITY's limits.
	Stream StreamConfig `yaml:"stream"`
	// Store is where the collector writes and the reports read.
	Store StoreConfig `yaml:"store"`
	// Retention is how long events and counts are kept (default 720h);
	// whole days are dropped, within an hour of their time.
	Retention time.Duration `yaml:"retention"`
	// DNSTap, when its socket is set, also writes every answered query as
	// dnstap to that socket.
	DNSTap DNSTapConfig `yaml:"dnstap"`
}

// StreamConfig bounds the ACTIVITY stream: what waits there for a
// collector is dropped, oldest first, past MaxAge or MaxBytes.
type StreamConfig struct {
	MaxAge   time.Duration `yaml:"max_age"`   // default 24h
	MaxBytes int64         `yaml:"max_bytes"` // default 1 GiB
	Replicas int           `yaml:"replicas"`  // default 1
}

// StoreConfig names the store.
type StoreConfig struct {
	// URL is "" (per-day SQLite files under <data_dir>/activity), a
	// directory ("dir:/var/lib/svc-pf/activity") or "postgres://…".
	URL string `yaml:"url"`
}

// DNSTapConfig is the dnstap output.
type DNSTapConfig struct {
	// Socket is "unix:/path" or "tcp:host:port"; empty: no dnstap.
	Socket string `yaml:"socket"`
}

// Stream is the JetStream stream's name, and Subject what nodes publish
// batches on (the stream takes SubjectPrefix + ">").
const (
	Stream        = "ACTIVITY"
	SubjectPrefix = "svcpf.activity."
	Subject       = SubjectPrefix + "batch"
)

// DefaultConfig is what runs when the file sets nothing.
func DefaultConfig() Config {
	return Config{
		Enabled: true, SampleAllowed: 50, ClientIP: ClientFull, CountInterval: time.Minute,
		Queue: 1 << 16, BufferBytes: 64 << 20,
		Stream:    StreamConfig{MaxAge: 24 * time.Hour, MaxBytes: 1 << 30, Replicas: 1},
		Retention: 720 * time.Hour,
	}
}

// Validate checks the section, naming each key that is wrong.
func (c *Config) Validate() error {
	var errs []error
	if c.SampleAllowed < 0 {
		errs = append(errs, fmt.Errorf("sample_allowed %d: want 0 (keep none), 1 (keep all) or more", c.SampleAllowed))
	}
	switch c.ClientIP {
	case ClientFull, ClientTruncate, ClientHash, ClientNone:
	default:
		errs = append(errs, fmt.Errorf("client_ip %q: want full, truncate, hash or none", c.ClientIP))
	}
	if c.CountInterval < time.Second || c.CountInterval > time.Hour || time.Hour%c.CountInterval != 0 {
		errs = append(errs, fmt.Errorf("count_interval %v: want 1s…1h, dividing an hour", c.CountInterval))
	}
	if c.Queue < 1 {
		errs = append(errs, fmt.Errorf("queue %d: want at least 1", c.Queue))
	}
	if c.BufferBytes < 0 {
		errs = append(errs, errors.New("buffer_bytes must not be negative"))
	}
	if c.Stream.MaxAge <= 0 || c.Stream.MaxBytes <= 0 || c.Stream.Replicas < 1 {
		errs = append(errs, errors.New("stream.max_age, stream.max_bytes and stream.replicas must be positive"))
	}
	if c.Retention < time.Hour {
		errs = append(errs, fmt.Errorf("retention %v: want at least 1h", c.Retention))
	}
	if u := c.Store.URL; u != "" && !strings.HasPrefix(u, "dir:") && !strings.HasPrefix(u, "postgres://") &&
		!strings.HasPrefix(u, "postgresql://") {
		errs = append(errs, fmt.Errorf("store.url %q: want empty (<data_dir>/activity), dir:/path or postgres://…", u))
	}
	if s := c.DNSTap.Socket; s != "" && !strings.HasPrefix(s, "unix:") && !strings.HasPrefix(s, "tcp:") {
		errs = append(errs, fmt.Errorf("dnstap.socket %q: want unix:/path or tcp:host:port", s))
	}
	return errors.Join(errs...)
}
