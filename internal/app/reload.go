package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Reloader re-reads a command's config file when asked (SIGHUP) and
// applies what may change without a restart. A reload is all or nothing:
// the file is read and checked exactly as at start (its Check), then every
// registered step prepares its change against the config in force; any
// error refuses the whole reload, logged with every reason, and the old
// config stays in force entirely. Only when everything is prepared are the
// changes committed, and the log says what changed and which changed keys
// need a restart.
type Reloader[C any] struct {
	cfg ReloaderConfig[C]

	mu    sync.Mutex // one reload at a time; guards cur and steps
	cur   C
	steps []ReloadStep[C]
}

// ReloaderConfig configures a Reloader.
type ReloaderConfig[C any] struct {
	// Path is the config file.
	Path string
	// Load reads, expands, decodes and checks the file as the command's
	// start does.
	Load func(path string) (C, error)
	// Current is the config the command started with.
	Current C
	// Logger receives the reload's outcome.
	Logger *slog.Logger
}

// ReloadStep is what a running command can change without a restart.
type ReloadStep[C any] struct {
	// Keys are the config keys (dotted YAML paths) the step applies; a
	// change elsewhere is named in the restart warning.
	Keys []string
	// MayFail marks a step whose commit may fail: such steps commit
	// before the others, so that a failure leaves nothing applied.
	MayFail bool
	// Prepare compares the new config with the one in force. It returns
	// what changed, in words, and the commit that applies it (nil: nothing
	// to apply), or an error that refuses the whole reload. Prepare must
	// not change what is in force.
	Prepare func(old, new C) (change string, commit func() error, err error)
}

// NewReloader returns a Reloader for a command started with cfg.Current.
func NewReloader[C any](cfg ReloaderConfig[C]) (*Reloader[C], error) {
	if cfg.Path == "" || cfg.Load == nil {
		return nil, errors.New("reload: a config path and a Load are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reloader[C]{cfg: cfg, cur: cfg.Current}, nil
}

// Register adds a step. Steps commit in the order registered, those that
// may fail first.
func (r *Reloader[C]) Register(s ReloadStep[C]) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, s)
}

// Current is the config in force.
func (r *Reloader[C]) Current() C {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// Reload re-reads the file and applies it, or refuses it whole. It returns
// the reason a reload was refused (also logged).
func (r *Reloader[C]) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	log := r.cfg.Logger
	next, err := r.cfg.Load(r.cfg.Path)
	if err != nil {
		log.Error("reload refused; the running config stays in force. Fix the file (svc-pf check shows every error) and send SIGHUP again",
			"file", r.cfg.Path, "err", err)
		return err
	}
	var (
		changes []string
		commits []func() error
		errs    []error
		keys    []string
	)
	steps := slices.Clone(r.steps)
	slices.SortStableFunc(steps, func(a, b ReloadStep[C]) int {
		switch {
		case a.MayFail == b.MayFail:
			return 0
		case a.MayFail:
			return -1
		}
		return 1
	})
	for _, s := range steps {
		keys = append(keys, s.Keys...)
		change, commit, err := s.Prepare(r.cur, next)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		changes = append(changes, change)
		if commit != nil {
			commits = append(commits, commit)
		}
	}
	if err := errors.Join(errs...); err != nil {
		log.Error("reload refused; the running config stays in force", "file", r.cfg.Path, "err", err)
		return err
	}
	for i, commit := range commits {
		if err := commit(); err != nil {
			// Steps whose commit may fail come first: one step may
			// fail today (forwarders), so nothing was applied before it.
			err = fmt.Errorf("reload: applying the change %d of %d: %w", i+1, len(commits), err)
			log.Error("reload failed while applying", "file", r.cfg.Path, "err", err, "applied_before", i)
			return err
		}
	}
	log.Info("reload: " + strings.Join(changes, "; "))
	// Against the config the command started with: a key only a restart
	// applies still has that value.
	if restart := restartKeys(r.cfg.Current, next, keys); len(restart) > 0 {
		log.Warn("reload: " + strings.Join(restart, ", ") + " changed; restart to apply")
	}
	r.cur = next
	return nil
}

// Run calls Reload for each signal on sig until ctx ends. A panic in a
// step would end the process like any other; a refused reload is only
// logged.
func (r *Reloader[C]) Run(ctx context.Context, sig <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
			_ = r.Reload()
		}
	}
}

// restartKeys names the keys that differ between old and new outside the
// keys a step applies.
func restartKeys[C any](old, new C, applied []string) []string {
	var out []string
	for _, k := range diffKeys(reflect.ValueOf(old), reflect.ValueOf(new), "") {
		if !slices.ContainsFunc(applied, func(a string) bool { return k == a || strings.HasPrefix(k, a+".") }) {
			out = append(out, k)
		}
	}
	return out
}

// diffKeys lists the dotted YAML keys whose values differ, descending
// into structs (an inline struct adds no level) and naming a list, map or
// other value as a whole.
func diffKeys(a, b reflect.Value, prefix string) []string {
	if a.Kind() != reflect.Struct {
		if reflect.DeepEqual(a.Interface(), b.Interface()) {
			return nil
		}
		return []string{prefix}
	}
	var out []string
	t := a.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		key := prefix
		switch {
		case strings.Contains(opts, "inline"):
		case name == "":
			// No YAML key: set by the program, not the file.
			continue
		case prefix == "":
			key = name
		default:
			key = prefix + "." + name
		}
		out = append(out, diffKeys(a.Field(i), b.Field(i), key)...)
	}
	return out
}

// LogLevelStep is the reload step of log.level, which every command
// registers: lg takes the new level at once (log.format needs a restart:
// every service holds loggers derived from the handler).
func LogLevelStep[C any](lg *Logging, get func(C) LogConfig) ReloadStep[C] {
	return ReloadStep[C]{Keys: []string{"log.level"}, Prepare: func(old, new C) (string, func() error, error) {
		o, n := get(old).Level, get(new).Level
		if o == n {
			return "log.level unchanged", nil, nil
		}
		change := fmt.Sprintf("log.level %s → %s", o, n)
		if lg.debug {
			change += " (--debug keeps debug)"
		}
		return change, func() error { lg.SetLevel(n); return nil }, nil
	}}
}
