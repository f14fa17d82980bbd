// Package app assembles svc-pf's services from their configuration: it is
// where the command line meets the packages. Each command (orgmanager,
// ipmapper, all) has a Config with working defaults and a Start function
// that builds the service, binds its listeners and returns a handle that
// runs it until its context ends.
package app

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/httpapi"
)

// LogConfig is the `log` section.
type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
}

// NATSConfig is the `nats` section of a service.
type NATSConfig struct {
	// URL of the NATS server. Empty: no NATS for a standalone service; the
	// embedded server under `svc-pf all`.
	URL string `yaml:"url"`
}

// DatabaseConfig is the orgmanager's `database` section.
type DatabaseConfig struct {
	// URL is sqlite:PATH or postgres://…
	URL string `yaml:"url"`
}

// DeployConfig is the orgmanager's `deploy` section.
type DeployConfig struct {
	Workers              int           `yaml:"workers"`
	VersionCheckInterval time.Duration `yaml:"version_check_interval"`
	FullRedeployInterval time.Duration `yaml:"full_redeploy_interval"`
	RetryMin             time.Duration `yaml:"retry_min"`
	RetryMax             time.Duration `yaml:"retry_max"`
	PublishTimeout       time.Duration `yaml:"publish_timeout"`
}

// OrgManagerConfig is the orgmanager's whole configuration file.
type OrgManagerConfig struct {
	HTTP     httpapi.Config `yaml:"http"`
	Log      LogConfig      `yaml:"log"`
	Database DatabaseConfig `yaml:"database"`
	NATS     NATSConfig     `yaml:"nats"`
	Deploy   DeployConfig   `yaml:"deploy"`
}

// DefaultOrgManagerConfig is what runs when the file sets nothing.
func DefaultOrgManagerConfig() OrgManagerConfig {
	return OrgManagerConfig{
		HTTP:     httpapi.Config{Address: "127.0.0.1:8080"},
		Log:      LogConfig{Level: "info"},
		Database: DatabaseConfig{URL: "sqlite:data/orgmanager.db"},
		Deploy: DeployConfig{
			Workers:              4,
			VersionCheckInterval: 30 * time.Second,
			FullRedeployInterval: 6 * time.Hour,
			RetryMin:             100 * time.Millisecond,
			RetryMax:             30 * time.Second,
			PublishTimeout:       30 * time.Second,
		},
	}
}

// Validate checks the configuration before anything starts.
func (c *OrgManagerConfig) Validate() error {
	var errs []error
	errs = append(errs, prefixed("orgmanager", c.HTTP.Validate()), c.Log.validate())
	if c.Database.URL == "" {
		errs = append(errs, errors.New("database.url is required"))
	}
	d := c.Deploy
	if d.Workers < 1 || d.Workers > 1024 {
		errs = append(errs, fmt.Errorf("deploy.workers must be 1..1024, not %d", d.Workers))
	}
	for name, v := range map[string]time.Duration{"version_check_interval": d.VersionCheckInterval,
		"full_redeploy_interval": d.FullRedeployInterval} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("deploy.%s must not be negative (0 disables it)", name))
		}
	}
	for name, v := range map[string]time.Duration{"retry_min": d.RetryMin, "retry_max": d.RetryMax, "publish_timeout": d.PublishTimeout} {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("deploy.%s must be positive", name))
		}
	}
	if d.RetryMax < d.RetryMin {
		errs = append(errs, errors.New("deploy.retry_max must not be below deploy.retry_min"))
	}
	return errors.Join(errs...)
}

// SessionsConfig is the IP Mapper's `sessions` section.
type SessionsConfig struct {
	// Bucket is the JetStream key-value bucket; keep the default unless every
	// node is configured alike.
	Bucket        string        `yaml:"bucket"`
	Replicas      int           `yaml:"replicas"`
	SweepInterval time.Duration `yaml:"sweep_interval"`
	// PurgeDeletesAfter: how old a KV delete marker must be before the IP
	// Mapper purges it; keep it well above any node's watch lag. Negative
	// disables the purge.
	PurgeDeletesAfter time.Duration `yaml:"purge_deletes_after"`
}

// IPMapperConfig is the IP Mapper's whole configuration file.
type IPMapperConfig struct {
	HTTP     httpapi.Config `yaml:"http"`
	Log      LogConfig      `yaml:"log"`
	NATS     NATSConfig     `yaml:"nats"`
	Sessions SessionsConfig `yaml:"sessions"`
}

// DefaultIPMapperConfig is what runs when the file sets nothing.
func DefaultIPMapperConfig() IPMapperConfig {
	return IPMapperConfig{
		HTTP:     httpapi.Config{Address: "127.0.0.1:8083"},
		Log:      LogConfig{Level: "info"},
		Sessions: SessionsConfig{Bucket: "sessions", Replicas: 1, SweepInterval: time.Second, PurgeDeletesAfter: 24 * time.Hour},
	}
}

// Validate checks the configuration before anything starts. standalone
// requires nats.url: the IP Mapper cannot work without NATS.
func (c *IPMapperConfig) Validate(standalone bool) error {
	var errs []error
	errs = append(errs, prefixed("ipmapper", c.HTTP.Validate()), c.Log.validate())
	if standalone && c.NATS.URL == "" {
		errs = append(errs, errors.New("nats.url is required: the IP Mapper keeps its sessions in NATS JetStream"))
	}
	if c.Sessions.Bucket == "" {
		errs = append(errs, errors.New("sessions.bucket is required"))
	}
	if c.Sessions.Replicas < 1 || c.Sessions.Replicas > 5 {
		errs = append(errs, errors.New("sessions.replicas must be 1..5"))
	}
	if c.Sessions.SweepInterval <= 0 {
		errs = append(errs, errors.New("sessions.sweep_interval must be positive"))
	}
	return errors.Join(errs...)
}

// EmbeddedNATSConfig is the `nats` section of `svc-pf all`.
type EmbeddedNATSConfig struct {
	// Listen is the embedded server's client address. The default port
	// 4223 leaves 4222 to a system NATS server that may run beside it.
	Listen string `yaml:"listen"`
	// StoreDir holds JetStream's files; default <data_dir>/nats.
	StoreDir string `yaml:"store_dir"`
}

// AllConfig is the configuration of `svc-pf all`: every service in one
// process around an embedded NATS server.
type AllConfig struct {
	// DataDir holds the SQLite database and JetStream's files by default.
	DataDir    string             `yaml:"data_dir"`
	Log        LogConfig          `yaml:"log"`
	NATS       EmbeddedNATSConfig `yaml:"nats"`
	OrgManager OrgManagerConfig   `yaml:"orgmanager"`
	IPMapper   IPMapperConfig     `yaml:"ipmapper"`
}

// DefaultAllConfig is what runs when the file sets nothing.
func DefaultAllConfig() AllConfig {
	return AllConfig{
		DataDir:    "data",
		Log:        LogConfig{Level: "info"},
		NATS:       EmbeddedNATSConfig{Listen: "127.0.0.1:4223"},
		OrgManager: DefaultOrgManagerConfig(),
		IPMapper:   DefaultIPMapperConfig(),
	}
}

// Validate checks the configuration before anything starts.
func (c *AllConfig) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir is required"))
	}
	errs = append(errs, c.Log.validate(), prefixed("orgmanager", c.OrgManager.Validate()),
		prefixed("ipmapper", c.IPMapper.Validate(false)))
	return errors.Join(errs...)
}

func prefixed(section string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", section, err)
}

func (l LogConfig) validate() error {
	if _, err := parseLevel(l.Level); err != nil {
		return err
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log.level %q: want debug, info, warn or error", s)
	}
	return lv, nil
}

// NewLogger returns the logger for a log section, writing text lines to w
// (stderr); debug forces the debug level (the --debug flag).
func NewLogger(w io.Writer, l LogConfig, debug bool) *slog.Logger {
	lv, err := parseLevel(l.Level)
	if err != nil || debug {
		lv = slog.LevelDebug
	}
	if err != nil && !debug {
		lv = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lv}))
}

// redactURL hides a password in a database or NATS URL for logs.
func redactURL(u string) string {
	at := strings.LastIndexByte(u, '@')
	scheme := strings.Index(u, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return u
	}
	cred := u[scheme+3 : at]
	if i := strings.IndexByte(cred, ':'); i >= 0 {
		return u[:scheme+3] + cred[:i] + ":***" + u[at:]
	}
	return u
}
