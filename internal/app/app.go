// Package app assembles svc-pf's services from their configuration: it is
// where the command line meets the packages, and it only wires them —
// protocol and business logic live in the packages it assembles. Each
// command (orgmanager, ipmapper, all) has its own file, with a Config that
// has working defaults and a Start function that builds the service, binds
// its listeners and returns a handle that runs it until its context ends.
// This file holds what the commands share.
package app

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// defaultDataDir holds the embedded defaults' state (SQLite, JetStream),
// relative to the working directory.
const defaultDataDir = "data"

// LogConfig is the `log` section.
type LogConfig struct {
	// Level is debug, info, warn or error; a reload (SIGHUP) applies a
	// new one.
	Level string `yaml:"level"`
	// Format is text (key=value lines, the default) or json (one JSON
	// object per line, with time, level and msg), for a log collector
	// that parses lines. A change needs a restart: every service holds
	// loggers derived from the handler.
	Format string `yaml:"format"`
}

// NATSConfig is the `nats` section of a service.
type NATSConfig struct {
	// URL of the NATS server. Empty: no NATS for a standalone service; the
	// embedded server under `svc-pf all`.
	URL string `yaml:"url"`
}

func prefixed(section string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", section, err)
}

func (l LogConfig) validate() error {
	var errs []error
	if _, err := parseLevel(l.Level); err != nil {
		errs = append(errs, err)
	}
	switch l.Format {
	case "", "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log.format %q: want text or json", l.Format))
	}
	return errors.Join(errs...)
}

func parseLevel(s string) (slog.Level, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log.level %q: want debug, info, warn or error", s)
	}
	return lv, nil
}

// NewLogger returns the logger for a log section, writing to w (stderr)
// in its format; debug forces the debug level (the --debug flag).
func NewLogger(w io.Writer, l LogConfig, debug bool) *slog.Logger {
	return NewLogging(w, l, debug).Logger
}

// Logging is a command's logger with the level a reload may change.
type Logging struct {
	Logger *slog.Logger
	level  *slog.LevelVar
	debug  bool // --debug: the level stays debug whatever the file says
}

// NewLogging builds the logger for a log section (an invalid level: info,
// which the command's check then refuses).
func NewLogging(w io.Writer, l LogConfig, debug bool) *Logging {
	lg := &Logging{level: new(slog.LevelVar), debug: debug}
	lg.SetLevel(l.Level)
	opts := &slog.HandlerOptions{Level: lg.level}
	if l.Format == "json" {
		lg.Logger = slog.New(slog.NewJSONHandler(w, opts))
	} else {
		lg.Logger = slog.New(slog.NewTextHandler(w, opts))
	}
	return lg
}

// SetLevel applies a log.level (debug under --debug; info when invalid)
// and returns the level now in force.
func (lg *Logging) SetLevel(level string) slog.Level {
	lv, err := parseLevel(level)
	switch {
	case lg.debug:
		lv = slog.LevelDebug
	case err != nil:
		lv = slog.LevelInfo
	}
	lg.level.Set(lv)
	return lv
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

// Version is the build's version string, set by the command.
type Version string

// newRegistry is a private registry with the Go runtime and process
// collectors, one per listener.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
