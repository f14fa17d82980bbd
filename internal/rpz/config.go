package rpz

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// ZoneConfig is one entry of the node config's `rpz:` list (docs/policy.md,
// step 3), for example
//
//	rpz:
//	  - name: operator
//	    file: /etc/svc-pf/operator.rpz
//	    poll_interval: 5s
//
// The list's order is the zones' order of evaluation: the first zone with a
// matching trigger decides, as PowerDNS consults its policies in the order
// they are defined.
type ZoneConfig struct {
	// Name labels the zone in rules ("rpz:<name> trigger=… action=…"),
	// status, logs and metrics; unique in the list. 1–64 bytes of a-z,
	// 0-9, '.', '_' and '-', starting with a letter or digit, so that a
	// rule stays one token.
	Name string `yaml:"name"`
	// File is the zone file (RFC 1035 master file syntax). It must begin
	// with the zone's SOA record, whose owner is the apex that triggers
	// are relative to.
	File string `yaml:"file"`
	// Origin is the origin of relative names before the file's first
	// $ORIGIN, as the zone statement of a name server's config would give
	// it ("rpz.example."). Default the root, as PowerDNS's rpzFile reads a
	// file without $ORIGIN: "@ SOA …" makes the root the apex, and the
	// relative owners are the triggers as written.
	Origin string `yaml:"origin"`
	// PollInterval is how often the file's identity, size and mtime are
	// checked; default 5s, at least 100ms.
	PollInterval time.Duration `yaml:"poll_interval"`
}

// DefaultPollInterval is ZoneConfig.PollInterval when left out.
const DefaultPollInterval = 5 * time.Second

// minPollInterval catches a duration written without a unit: YAML's
// "poll_interval: 5" is five nanoseconds.
const minPollInterval = 100 * time.Millisecond

const maxNameLen = 64

// Validate checks one entry; errors name the key and what to write.
func (c ZoneConfig) Validate() error {
	if err := checkZoneName(c.Name); err != nil {
		return err
	}
	if strings.TrimSpace(c.File) == "" {
		return errors.New("file: the zone file's path is required")
	}
	if c.Origin != "" {
		if strings.Contains(c.Origin, `\`) {
			return fmt.Errorf("origin %q: escapes are not supported", c.Origin)
		}
		if _, ok := dns.IsDomainName(c.Origin); !ok {
			return fmt.Errorf("origin %q is not a domain name", c.Origin)
		}
	}
	if c.PollInterval != 0 && c.PollInterval < minPollInterval {
		return fmt.Errorf("poll_interval %s is below %s; write a unit, e.g. 5s (default %s)", c.PollInterval, minPollInterval, DefaultPollInterval)
	}
	return nil
}

func checkZoneName(n string) error {
	if n == "" {
		return errors.New("name: required (it labels the zone's rules, status and metrics)")
	}
	if len(n) > maxNameLen {
		return fmt.Errorf("name %q is longer than %d bytes", n, maxNameLen)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return fmt.Errorf("name %q: use a-z, 0-9, '.', '_' and '-', starting with a letter or digit", n)
		}
	}
	return nil
}

// Config configures a Set.
type Config struct {
	// Zones are the node config's `rpz:` entries, in order of evaluation.
	// None is valid: a Set that matches nothing (leave policy's Input.RPZ
	// nil then: Set.RPZ does).
	Zones []ZoneConfig
	// MaxRecords caps the records of one zone file, so that a runaway file
	// (or $GENERATE) cannot exhaust the node's memory; default
	// DefaultMaxRecords.
	MaxRecords int
	// Logger receives loads and failures; nil discards them.
	Logger *slog.Logger
	// Registerer receives the svcpf_rpz_* metrics; nil skips them.
	Registerer prometheus.Registerer
	// Clock is the time source of loaded_at and error_at; default
	// time.Now. Polling uses real timers.
	Clock func() time.Time
}

// Validate checks every entry and that names are unique; errors name the
// entry ("rpz[1]: …").
func (c Config) Validate() error {
	if c.MaxRecords < 0 {
		return fmt.Errorf("rpz: MaxRecords %d is negative; leave it zero for the default %d", c.MaxRecords, DefaultMaxRecords)
	}
	names := make(map[string]int, len(c.Zones))
	for i, z := range c.Zones {
		if err := z.Validate(); err != nil {
			return fmt.Errorf("rpz[%d]: %w", i, err)
		}
		if j, dup := names[z.Name]; dup {
			return fmt.Errorf("rpz[%d]: name %q is already used by rpz[%d]; give each zone its own name", i, z.Name, j)
		}
		names[z.Name] = i
	}
	return nil
}
