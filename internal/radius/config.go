// Package radius turns RADIUS accounting into IP Mapper sessions. A NAS
// sends Accounting-Requests over UDP; the Server authenticates them by the
// NAS's source network and shared secret, maps their attributes to a
// session (producer "radius") and writes it through the IP Mapper's client,
// and answers Accounting-Response only once the IP Mapper has confirmed the
// write. Data flows
//
//	NAS → UDP → radius.Server → mapperclient → NATS → IP Mapper → KV "sessions" → nodes
//
// The mapping, the session id rule, the ordering rule and the failure
// behaviour are documented in docs/radius.md.
package radius

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
)

// Config is the `radius:` section, plus what the caller wires in.
type Config struct {
	// Listen are the UDP addresses the accounting server binds
	// ("127.0.0.1:1813"; port 0 lets the kernel choose).
	Listen []string `yaml:"listen"`
	// Clients are the NASes allowed to send accounting, each known by the
	// network its packets come from (longest match wins) and its secret.
	Clients []ClientConfig `yaml:"clients"`
	// Realms maps a User-Name realm ("user@realm", matched without case)
	// to the organisation of the session; a realm not named here leaves
	// the client entry's organisation.
	Realms map[string]string `yaml:"realms"`
	// Attributes chooses which RADIUS attributes fill the session.
	Attributes AttributesConfig `yaml:"attributes"`
	// SessionTTL, when > 0, makes every written session expire that long
	// after its last Start or Interim-Update, so that a NAS that vanishes
	// without a Stop does not leave sessions behind for ever. 0: no
	// expiry.
	SessionTTL time.Duration `yaml:"session_ttl"`
	// StateSize bounds the ordering memory (sessions whose newest event is
	// remembered); default 262144.
	StateSize int `yaml:"state_size"`
	// MaxBatch bounds how many requests go to the IP Mapper in one
	// set-session-batch; default 512.
	MaxBatch int `yaml:"max_batch"`
	// WriteTimeout bounds one IP Mapper call; default 5s. A request whose
	// write does not finish in time is not answered (the NAS retransmits).
	WriteTimeout time.Duration `yaml:"write_timeout"`
}

// ClientConfig is one NAS (or a network of NASes sharing a secret).
type ClientConfig struct {
	// Network is a prefix (192.0.2.0/24) or a single address.
	Network string `yaml:"network"`
	// Secret is the RADIUS shared secret; never logged. Write ${VAR} to
	// take it from the environment.
	Secret string `yaml:"secret"`
	// Org is the organisation of this NAS's sessions unless the realm
	// names another.
	Org string `yaml:"org"`
}

// Attribute sources the mapping may name.
const (
	SourceNone             = "none"
	SourceUserName         = "user-name"
	SourceCallingStationID = "calling-station-id"
	SourceCalledStationID  = "called-station-id"
	SourceNASIdentifier    = "nas-identifier"
	SourceNASPortID        = "nas-port-id"
)

var sources = []string{SourceNone, SourceUserName, SourceCallingStationID, SourceCalledStationID, SourceNASIdentifier, SourceNASPortID}

// AttributesConfig chooses the attribute behind each identity field: one
// of none, user-name, calling-station-id, called-station-id,
// nas-identifier, nas-port-id.
type AttributesConfig struct {
	// Username: default user-name.
	Username string `yaml:"username"`
	// DeviceID: default calling-station-id. The value is classified:
	// msisdn:<digits>, mac:<aa:bb:…>, else csid:<value>.
	DeviceID string `yaml:"deviceid"`
	// Location: default none.
	Location string `yaml:"location"`
	// KeepRealm keeps "@realm" in the username when the realm chose the
	// organisation (by default it is cut off: inside the organisation the
	// realm says nothing).
	KeepRealm bool `yaml:"keep_realm"`
	// IPv4/IPv6 allocation attributes cannot be turned off one by one:
	// an address the NAS assigned is the subscriber's.
}

// Defaults for the zero values.
const (
	defaultStateSize    = 1 << 18
	defaultMaxBatch     = 512
	defaultWriteTimeout = 5 * time.Second
	maxSecretLen        = 128
)

// withDefaults fills the zero values.
func (c Config) withDefaults() Config {
	if c.StateSize == 0 {
		c.StateSize = defaultStateSize
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = defaultMaxBatch
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = defaultWriteTimeout
	}
	a := &c.Attributes
	if a.Username == "" {
		a.Username = SourceUserName
	}
	if a.DeviceID == "" {
		a.DeviceID = SourceCallingStationID
	}
	if a.Location == "" {
		a.Location = SourceNone
	}
	return c
}

// Enabled reports whether the section asks for a server at all.
func (c Config) Enabled() bool { return len(c.Listen) > 0 }

// Validate checks the file's keys, every problem at once, each naming its
// key. It never quotes a secret.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	for i, l := range c.Listen {
		if _, err := netip.ParseAddrPort(l); err != nil {
			errs = append(errs, fmt.Errorf("radius.listen[%d] %q: want address:port (127.0.0.1:1813, [::1]:1813)", i, l))
		}
	}
	if len(c.Listen) > 0 && len(c.Clients) == 0 {
		errs = append(errs, errors.New("radius.clients: at least one NAS is needed; without one every packet is dropped"))
	}
	seen := map[netip.Prefix]int{}
	for i, cl := range c.Clients {
		p, err := parseNetwork(cl.Network)
		if err != nil {
			errs = append(errs, fmt.Errorf("radius.clients[%d].network: %w", i, err))
		} else if j, dup := seen[p]; dup {
			errs = append(errs, fmt.Errorf("radius.clients[%d].network %s: already clients[%d]'s", i, p, j))
		} else {
			seen[p] = i
		}
		switch {
		case cl.Secret == "":
			errs = append(errs, fmt.Errorf("radius.clients[%d].secret is required", i))
		case len(cl.Secret) > maxSecretLen:
			errs = append(errs, fmt.Errorf("radius.clients[%d].secret is longer than %d bytes", i, maxSecretLen))
		}
		if err := identity.ValidateOrg(cl.Org); err != nil {
			errs = append(errs, fmt.Errorf("radius.clients[%d].org: %w", i, err))
		}
	}
	// In sorted order: the same file gives the same errors in the same
	// order, whatever the map's iteration order (svc-pf check, a reload's
	// log).
	realms := slices.Sorted(maps.Keys(c.Realms))
	for _, realm := range realms {
		org := c.Realms[realm]
		if realm == "" || strings.ContainsAny(realm, "@ \t") {
			errs = append(errs, fmt.Errorf("radius.realms %q: a realm is the part after '@' (example.net)", realm))
		}
		if err := identity.ValidateOrg(org); err != nil {
			errs = append(errs, fmt.Errorf("radius.realms[%s]: %w", realm, err))
		}
	}
	lower := map[string]string{}
	for _, realm := range realms {
		l := strings.ToLower(realm)
		if other, dup := lower[l]; dup {
			errs = append(errs, fmt.Errorf("radius.realms: %q and %q are the same realm (realms match without case)", other, realm))
		}
		lower[l] = realm
	}
	for _, f := range []struct{ key, v string }{
		{"username", c.Attributes.Username}, {"deviceid", c.Attributes.DeviceID}, {"location", c.Attributes.Location},
	} {
		if !validSource(f.v) {
			errs = append(errs, fmt.Errorf("radius.attributes.%s %q: want one of %s", f.key, f.v, strings.Join(sources, ", ")))
		}
	}
	if c.SessionTTL < 0 {
		errs = append(errs, errors.New("radius.session_ttl must not be negative"))
	} else if c.SessionTTL > 0 && c.SessionTTL < time.Second {
		errs = append(errs, errors.New("radius.session_ttl: at least 1s (the IP Mapper counts whole seconds)"))
	}
	if c.StateSize < 1024 {
		errs = append(errs, errors.New("radius.state_size must be at least 1024"))
	}
	if c.MaxBatch < 1 || c.MaxBatch > 10000 {
		errs = append(errs, errors.New("radius.max_batch must be 1..10000"))
	}
	if c.WriteTimeout < 10*time.Millisecond {
		errs = append(errs, errors.New("radius.write_timeout must be at least 10ms"))
	}
	return errors.Join(errs...)
}

func validSource(s string) bool {
	for _, v := range sources {
		if s == v {
			return true
		}
	}
	return false
}

// parseNetwork accepts a prefix or a bare address (its host prefix).
func parseNetwork(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a prefix (192.0.2.0/24)", s)
		}
		return normPrefix(p), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or prefix (192.0.2.0/24)", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// normPrefix masks p and turns an IPv4-mapped prefix into its IPv4 form,
// since source addresses are matched unmapped.
func normPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// client is a ClientConfig parsed.
type client struct {
	network netip.Prefix
	secret  []byte
	org     string
}

// clientTable finds the NAS entry of a source address by longest match.
type clientTable []client // longest prefix first

func newClientTable(cs []ClientConfig) clientTable {
	t := make(clientTable, 0, len(cs))
	for _, c := range cs {
		p, _ := parseNetwork(c.Network) // validated
		t = append(t, client{network: p, secret: []byte(c.Secret), org: c.Org})
	}
	// Longest first, so the first match is the longest.
	for i := 1; i < len(t); i++ {
		for j := i; j > 0 && t[j].network.Bits() > t[j-1].network.Bits(); j-- {
			t[j], t[j-1] = t[j-1], t[j]
		}
	}
	return t
}

func (t clientTable) lookup(a netip.Addr) *client {
	a = a.Unmap()
	for i := range t {
		if t[i].network.Contains(a) {
			return &t[i]
		}
	}
	return nil
}
