package app

import (
	"errors"

	"github.com/svc-pf/svc-pf/internal/config"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

// Each command's config has one Check: what its start refuses, every
// problem at once, each naming its key. The command's Run calls it before
// anything starts, `svc-pf check` calls it alone, and a reload (SIGHUP)
// calls it on the re-read file before applying anything, so the three can
// never disagree. Check binds nothing and connects nowhere.

// Checkable is a command's config: *C has the Check its start runs.
type Checkable[C any] interface {
	*C
	Check() error
}

// LoadChecked reads a command's file as its start does (strict YAML,
// ${VAR} expansion, over def's defaults; a missing file is an error only
// when required) and checks it: what `svc-pf check` and a reload run.
func LoadChecked[C any, P Checkable[C]](path string, required bool, def func() C) (C, error) {
	cfg := def()
	if err := config.Load(path, required, &cfg); err != nil {
		return cfg, err
	}
	return cfg, P(&cfg).Check()
}

// Check is what `svc-pf orgmanager` refuses at start.
func (c *OrgManagerConfig) Check() error { return c.Validate() }

// Check is what `svc-pf ipmapper` refuses at start.
func (c *IPMapperConfig) Check() error { return c.Validate(true) }

// Check is what `svc-pf simulator` refuses at start.
func (c *SimulatorConfig) Check() error {
	return errors.Join(c.Validate(), checkFeeds(c.Feeds))
}

// Check is what `svc-pf activity` refuses at start.
func (c *ActivityConfig) Check() error { return c.Validate() }

// Check is what `svc-pf resolver` refuses at start: its own keys and the
// node's (feeds, rpz).
func (c *ResolverConfig) Check() error {
	_, err := c.parse()
	return errors.Join(err, checkFeeds(c.Feeds), rpz.Config{Zones: c.RPZ}.Validate())
}

// Check is what `svc-pf all` refuses at start.
func (c *AllConfig) Check() error {
	return errors.Join(c.Validate(), checkFeeds(c.Feeds))
}

// checkFeeds is the feeds read model's own validation of a `feeds:` list
// (names, URLs, intervals): building a client that is never run fetches
// nothing and registers no metrics.
func checkFeeds(list []feeds.FeedConfig) error {
	_, err := feeds.New(feeds.Config{Feeds: list})
	return err
}
