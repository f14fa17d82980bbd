package luapool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// DefaultCallTimeout bounds a call when Config.CallTimeout is zero.
const DefaultCallTimeout = 5 * time.Second

// abandonGrace is how long a call that overran its deadline is waited for
// before its worker is abandoned: the VM stops at its next instruction, so a
// call still running a second later is stuck in Go code (a built-in ignoring
// its context, a pathological string pattern), not merely descheduled.
const abandonGrace = time.Second

// Config configures a Pool.
type Config struct {
	// Workers is the number of Lua states, each serving one call at a time
	// (the simulator's lua.workers); at least 1.
	Workers int
	// File is the entry script's path; "" uses Source.
	File string
	// Source is the entry script used when File is "" (the simulator's
	// embedded default); it is named "<embedded>" in messages.
	Source []byte
	// Modules are the Go built-ins a script reaches with require(name). They
	// are not globals: a script writes local m = require("name").
	Modules map[string]Module
	// CallTimeout bounds one call, and the entry file's top level when a
	// worker is created; 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	// Metrics counts worker creation failures and calls; nil counts nothing.
	Metrics Metrics
	// Logger receives the script's print() output at debug level; nil
	// discards it.
	Logger *slog.Logger
}

// Module is a preloaded module: the functions of the table require returns.
type Module map[string]Func

// Func is a Go built-in callable from Lua. Its arguments are converted from
// Lua as Call converts results (nil, bool, string, int64, float64, []any,
// map[string]any); the args slice is the callee's. One exception: when
// Call's argument is a flat map[string]any (strings, booleans, numbers)
// and the script hands its table to a built-in with no field changed,
// added or removed, the built-in receives Call's very map (its numbers as
// the caller put them, not int64), which it must not write. Its result is converted
// to Lua as Call converts arguments, except that a map[string]any enters Lua
// unconverted, as an object read field by field (wrap.go), and comes back
// from Call as the same map if the script did not change it: a built-in
// must not write a map it returned, nor its parts, after returning it. A returned error is raised in Lua: the
// script may catch it with pcall (it reads as the error's message), and if it
// does not, Call's error wraps this very error, so errors.As finds it. ctx is
// the call's context: a built-in that honours it is stopped with the call.
type Func func(ctx context.Context, args []any) (any, error)

// Metrics counts what the simulator API's svc_pf_simulator_lua_* metrics
// count (docs/simulator.md, Metrics). Implementations must be safe for
// concurrent use.
type Metrics interface {
	// WorkerCreateError is called with the error message when New fails or
	// a replacement worker cannot be created.
	WorkerCreateError(msg string)
	// Call is called when a call is handed to a worker (not for a call whose
	// context ends while it waits for one).
	Call(fn string)
	// CallError is called when such a call returns an error.
	CallError(fn string)
}

type nopMetrics struct{}

func (nopMetrics) WorkerCreateError(string) {}
func (nopMetrics) Call(string)              {}
func (nopMetrics) CallError(string)         {}

// Pool is a fixed set of Lua workers running one entry script. It is safe for
// concurrent use.
type Pool struct {
	proto      *lua.FunctionProto // the entry script, compiled once and shared by all workers
	modules    map[string]Module
	moduleHint string // the "only preloaded modules: …" part of require's error
	timeout    time.Duration
	metrics    Metrics
	logger     *slog.Logger

	idle      chan *worker // free workers; capacity Config.Workers, so returning one never blocks
	closed    chan struct{}
	closeOnce sync.Once
}

// New compiles the entry script once and creates cfg.Workers workers from
// it, each running the script's top level. Any failure (bad config, missing
// file, syntax error, runtime error at the top level) is returned, naming the
// file and, when there is one, the line; Metrics.WorkerCreateError is called
// with its message.
func New(cfg Config) (*Pool, error) {
	metrics := cfg.Metrics
	if metrics == nil {
		metrics = nopMetrics{}
	}
	p, err := newPool(cfg, metrics)
	if err != nil {
		metrics.WorkerCreateError(err.Error())
		return nil, err
	}
	return p, nil
}

func newPool(cfg Config, metrics Metrics) (*Pool, error) {
	if cfg.Workers < 1 {
		return nil, fmt.Errorf("luapool: workers must be at least 1, not %d", cfg.Workers)
	}
	if cfg.CallTimeout < 0 {
		return nil, fmt.Errorf("luapool: negative call timeout %v", cfg.CallTimeout)
	}
	// Copied: replacement workers are built from it long after New, when the
	// caller may have reused its maps.
	modules := make(map[string]Module, len(cfg.Modules))
	names := make([]string, 0, len(cfg.Modules))
	for name, m := range cfg.Modules {
		mod := make(Module, len(m))
		for fname, f := range m {
			if f == nil {
				return nil, fmt.Errorf("luapool: module %s: function %s is nil", name, fname)
			}
			mod[fname] = f
		}
		modules[name] = mod
		names = append(names, name)
	}
	slices.Sort(names)
	hint := "no modules are preloaded"
	if len(names) > 0 {
		hint = "only preloaded modules: " + strings.Join(names, ", ")
	}

	name, src := cfg.File, cfg.Source
	if name == "" {
		if len(src) == 0 {
			return nil, errors.New("luapool: no entry file and no embedded source")
		}
		name = "<embedded>"
	} else {
		var err error
		if src, err = os.ReadFile(name); err != nil {
			return nil, fmt.Errorf("luapool: entry file: %w", err)
		}
	}
	proto, err := compile(name, src)
	if err != nil {
		return nil, err
	}

	timeout := cfg.CallTimeout
	if timeout == 0 {
		timeout = DefaultCallTimeout
	}
	p := &Pool{
		proto:      proto,
		modules:    modules,
		moduleHint: hint,
		timeout:    timeout,
		metrics:    metrics,
		logger:     cfg.Logger,
		idle:       make(chan *worker, cfg.Workers),
		closed:     make(chan struct{}),
	}
	for range cfg.Workers {
		w, err := p.newWorker()
		if err != nil {
			p.Close() // stops the workers already started
			return nil, err
		}
		go w.loop(p.closed)
		p.idle <- w
	}
	return p, nil
}

// compile parses and compiles the entry script once; workers share the
// resulting proto (gopher-lua's documented way to share byte code between
// states).
func compile(name string, src []byte) (proto *lua.FunctionProto, err error) {
	// lua.Compile re-panics anything but its own CompileError; an odd script
	// must fail New, not crash the process.
	defer func() {
		if r := recover(); r != nil {
			proto, err = nil, fmt.Errorf("luapool: compiling %s: %v", name, r)
		}
	}()
	chunk, err := parse.Parse(bytes.NewReader(src), name)
	if err != nil {
		// Parse errors read "<name> line:3(column:7) near 'x': syntax error",
		// or "<name> at EOF: syntax error" for an unfinished file, which
		// then gets its last line number.
		msg := strings.Join(strings.Fields(err.Error()), " ")
		if strings.Contains(msg, " at EOF") {
			lines := bytes.Count(src, []byte("\n"))
			if !bytes.HasSuffix(src, []byte("\n")) {
				lines++
			}
			msg += fmt.Sprintf(" (the file ends at line %d)", lines)
		}
		return nil, fmt.Errorf("luapool: %s", msg)
	}
	proto, err = lua.Compile(chunk, name)
	if err != nil {
		return nil, fmt.Errorf("luapool: compiling %s: %w", name, err)
	}
	return proto, nil
}

// Call runs the entry script's global function fn with arg (nil: no
// argument) on a free worker and returns its first result converted to Go
// (a built-in's result the script returned unchanged: that very value).
//
// It waits for a free worker while ctx allows (returning ctx.Err() as soon
// as ctx ends); the call then runs under ctx bounded by Config.CallTimeout,
// and a call stopped by either fails with a *ScriptError wrapping the
// context's error. Script failures are *ScriptError values; an error a Go
// built-in raised and the script did not catch is wrapped as is.
func (p *Pool) Call(ctx context.Context, fn string, arg any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-p.closed:
		return nil, ErrClosed
	default:
	}
	var w *worker
	select {
	case w = <-p.idle:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.closed:
		return nil, ErrClosed
	}
	p.metrics.Call(fn)
	v, err := p.run(ctx, w, fn, arg)
	if err != nil {
		p.metrics.CallError(fn)
	}
	return v, err
}

// run hands the call to w and waits for its answer; it returns w to the idle
// set unless w had to be abandoned.
func (p *Pool) run(ctx context.Context, w *worker, fn string, arg any) (any, error) {
	callCtx := w.ctx
	callCtx.start(ctx, time.Now().Add(p.timeout))
	select {
	case w.req <- request{ctx: callCtx, fn: fn, arg: arg}:
	case <-p.closed:
		return nil, ErrClosed
	}
	w.timer.Reset(p.timeout)
	select {
	case r := <-w.resp:
		w.timer.Stop()
		p.idle <- w
		return r.val, r.err
	case <-ctx.Done():
		w.timer.Stop()
		callCtx.stop(ctx.Err())
	case <-w.timer.C:
		callCtx.stop(context.DeadlineExceeded)
	}
	// The VM checks callCtx before each instruction, so the answer is
	// normally already on its way.
	grace := time.NewTimer(abandonGrace)
	defer grace.Stop()
	select {
	case r := <-w.resp:
		p.idle <- w
		return r.val, r.err
	case <-grace.C:
	}
	// Stuck in Go code: a goroutine cannot be stopped from outside, so leave
	// it to finish on its own (its state is then closed) and put a fresh
	// worker in its place, keeping the pool at its size.
	close(w.quit)
	go p.replace()
	return nil, &ScriptError{
		Func:    fn,
		Message: fmt.Sprintf("still running %v after its deadline (stuck in Go code); worker replaced", abandonGrace),
		Err:     callCtx.Err(),
	}
}

// replace creates a worker in place of an abandoned one, retrying with
// backoff: the script loaded once, so a failure here is transient or
// non-deterministic, and a pool short of a worker is still serving.
func (p *Pool) replace() {
	backoff := 100 * time.Millisecond
	for {
		w, err := p.newWorker()
		if err == nil {
			go w.loop(p.closed) // exits at once, closing the state, if the pool is closed
			p.idle <- w
			return
		}
		p.metrics.WorkerCreateError(err.Error())
		t := time.NewTimer(backoff)
		select {
		case <-p.closed:
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// Close stops the pool: later calls fail with ErrClosed, idle workers exit
// now and busy ones after their current call. It does not wait.
func (p *Pool) Close() {
	p.closeOnce.Do(func() { close(p.closed) })
}
