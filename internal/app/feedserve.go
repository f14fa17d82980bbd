package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strconv"

	"github.com/svc-pf/svc-pf/internal/feedbuild"
)

// FeedServeConfig is the configuration of `svc-pf feed serve -c FILE`: the
// feed directories published over HTTP to the nodes, each at
// http://LISTEN/<name>/, the URL a node's feeds: entry names.
type FeedServeConfig struct {
	Log LogConfig `yaml:"log"`
	// Listen is the HTTP address; a change takes a restart.
	Listen string `yaml:"listen"`
	// Feeds are feed directories, each served under its name.
	Feeds []feedbuild.ServedFeed `yaml:"feeds"`
	// Parents are directories of feed directories (a feed update's
	// dirs side by side): each feed directory <sub> inside is served at
	// /<sub>/, as it appears.
	Parents []string `yaml:"parents"`
}

// DefaultFeedServeConfig is what runs when the file sets nothing but its
// directories.
func DefaultFeedServeConfig() FeedServeConfig {
	return FeedServeConfig{Log: LogConfig{Level: "info"}, Listen: feedbuild.DefaultListen}
}

// Validate checks the file without touching the disk or the network, so
// that `svc-pf check` runs anywhere: a directory's existence is the
// start's and a reload's business (ResolveServed).
func (c *FeedServeConfig) Validate() error {
	return errors.Join(c.Log.validate(), validateListen("listen", c.Listen), feedbuild.ValidateServed(c.Feeds, c.Parents))
}

// Check is what `svc-pf feed serve` refuses at start.
func (c *FeedServeConfig) Check() error { return c.Validate() }

// validateListen checks a TCP listen address: host:port, the host an IP
// address, a name or empty (every address), the port 0–65535.
func validateListen(key, addr string) error {
	if addr == "" {
		return fmt.Errorf("%s is required: want ip:port, e.g. %s", key, feedbuild.DefaultListen)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: want ip:port: %w", key, addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || port != strconv.FormatUint(n, 10) {
		return fmt.Errorf("%s %q: the port must be a number from 0 to 65535", key, addr)
	}
	return nil
}

// RunFeedServe runs `svc-pf feed serve -c FILE` until ctx ends. With rl,
// a reload swaps the served directories (feeds, parents) at once; a new
// directory that is not a directory refuses the reload, one that does not
// exist yet is logged and served as it appears. listen and log.format
// need a restart (the reloader names them).
func RunFeedServe(ctx context.Context, cfg FeedServeConfig, log *slog.Logger, rl *Reloader[FeedServeConfig]) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	srv, err := feedbuild.NewServer(feedbuild.ServerConfig{Feeds: cfg.Feeds, Parents: cfg.Parents, Listen: cfg.Listen, Log: log})
	if err != nil {
		return err
	}
	rl.Register(servedStep(srv))
	return srv.Run(ctx, nil)
}

// servedStep is the reload step of feeds and parents.
func servedStep(srv *feedbuild.Server) ReloadStep[FeedServeConfig] {
	return ReloadStep[FeedServeConfig]{Keys: []string{"feeds", "parents"}, Prepare: func(old, new FeedServeConfig) (string, func() error, error) {
		if reflect.DeepEqual(old.Feeds, new.Feeds) && reflect.DeepEqual(old.Parents, new.Parents) {
			return "feeds and parents unchanged", nil, nil
		}
		v, err := feedbuild.ResolveServed(new.Feeds, new.Parents)
		if err != nil {
			return "", nil, err
		}
		return "serving " + v.String(), func() error { srv.SetServed(v); return nil }, nil
	}}
}
