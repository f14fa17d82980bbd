// Package app assembles svc-pf's services from their configuration: it is
// where the command line meets the packages, and it only wires them —
// protocol and business logic live in the packages it assembles. Each
// command (orgmanager, ipmapper, all) has its own file, with a Config that
// has working defaults and a Start function that builds the service, binds
// its listeners and returns a handle that runs it until its context ends.
// This file holds what the commands share.
package app

import (
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
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
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

// Version is the build's version string, set by the command.
type Version string

// newRegistry is a private registry with the Go runtime and process
// collectors, one per listener.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
