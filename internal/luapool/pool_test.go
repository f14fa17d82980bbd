package luapool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testDeadline is how long a test waits for something that should happen at
// once; only a hang reaches it.
const testDeadline = 10 * time.Second

// countingMetrics is a Metrics fake.
type countingMetrics struct {
	mu           sync.Mutex
	createErrors []string
	calls        map[string]int
	callErrors   map[string]int
}

func newCountingMetrics() *countingMetrics {
	return &countingMetrics{calls: map[string]int{}, callErrors: map[string]int{}}
}

func (m *countingMetrics) WorkerCreateError(msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.createErrors = append(m.createErrors, msg)
}

func (m *countingMetrics) Call(fn string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[fn]++
}

func (m *countingMetrics) CallError(fn string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.callErrors[fn]++
}

func (m *countingMetrics) snapshot() (createErrors []string, calls, callErrors map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	calls, callErrors = map[string]int{}, map[string]int{}
	for k, v := range m.calls {
		calls[k] = v
	}
	for k, v := range m.callErrors {
		callErrors[k] = v
	}
	return append([]string(nil), m.createErrors...), calls, callErrors
}

// newTestPool builds a pool over src and closes it with the test.
func newTestPool(t testing.TB, cfg Config, src string) *Pool {
	t.Helper()
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.File == "" {
		cfg.Source = []byte(src)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// callWithin calls fn and fails the test if the call does not return within
// testDeadline (a hang, not a timing assertion).
func callWithin(t *testing.T, p *Pool, ctx context.Context, fn string, arg any) (any, error) {
	t.Helper()
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := p.Call(ctx, fn, arg)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-time.After(testDeadline):
		t.Fatalf("Call(%s) did not return within %v", fn, testDeadline)
		return nil, nil
	}
}

func TestNewFails(t *testing.T) {
	dir := t.TempDir()
	badFile := filepath.Join(dir, "bad.lua")
	if err := os.WriteFile(badFile, []byte("x = 1\nfunction f()\n  y = = 2\nend\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error
	}{
		{"syntax error in a file names file and line", Config{Workers: 2, File: badFile}, []string{"bad.lua", "line:3"}},
		{"syntax error in the embedded source", Config{Workers: 1, Source: []byte("local = 3")}, []string{"<embedded>", "line:1"}},
		{"syntax error at the end of the file", Config{Workers: 1, Source: []byte("x = 1\nfunction f(\n")}, []string{"<embedded> at EOF: syntax error (the file ends at line 2)"}},
		{"missing file", Config{Workers: 1, File: filepath.Join(dir, "absent.lua")}, []string{"absent.lua", "no such file"}},
		{"runtime error at the top level", Config{Workers: 1, Source: []byte("local x = 1\nlocal y = nil + x\n")}, []string{"<embedded>:2:", "cannot perform add operation"}},
		{"error() at the top level", Config{Workers: 3, Source: []byte("error('refusing to load')")}, []string{"<embedded>:1:", "refusing to load"}},
		{"runaway top level", Config{Workers: 1, CallTimeout: 50 * time.Millisecond, Source: []byte("while true do end")}, []string{"deadline exceeded"}},
		{"require of an unknown module at the top level", Config{Workers: 1, Source: []byte("local os = require('os')")}, []string{"module os not found", "no modules are preloaded"}},
		{"no workers", Config{Workers: 0, Source: []byte("x = 1")}, []string{"workers must be at least 1"}},
		{"no source", Config{Workers: 1}, []string{"no entry file"}},
		{"nil built-in", Config{Workers: 1, Source: []byte("x = 1"), Modules: map[string]Module{"m": {"f": nil}}}, []string{"module m: function f is nil"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newCountingMetrics()
			tt.cfg.Metrics = m
			p, err := New(tt.cfg)
			if err == nil {
				p.Close()
				t.Fatal("New succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			createErrors, _, _ := m.snapshot()
			if len(createErrors) != 1 || createErrors[0] != err.Error() {
				t.Errorf("WorkerCreateError calls = %q, want one with %q", createErrors, err)
			}
		})
	}
}

func TestNewFromFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "entry.lua")
	if err := os.WriteFile(file, []byte("function hello(req) return 'hello ' .. req.name end"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newTestPool(t, Config{Workers: 2, File: file, Source: []byte("ignored(")}, "")
	v, err := p.Call(context.Background(), "hello", map[string]any{"name": "svc-pf"})
	if err != nil || v != "hello svc-pf" {
		t.Fatalf("Call = %v, %v", v, err)
	}
	// No call running: every worker the config asked for is idle.
	if n := len(p.idle); n != 2 {
		t.Errorf("%d idle workers, want 2", n)
	}
}

func TestCallErrors(t *testing.T) {
	src := `
local m = require("svcpf")
counter = 0
not_a_function = 3
function boom() local t = nil; return t.x end
function raise() error("no way") end
function raise_table() error({code = 7}) end
function returns_function() return print end
function returns_cycle() local t = {}; t.self = t; return t end
function call_builtin(req) return m.fail(req) end
`
	p := newTestPool(t, Config{Modules: map[string]Module{"svcpf": {
		"fail": func(context.Context, []any) (any, error) { return nil, errors.New("plain") },
	}}}, src)
	tests := []struct {
		fn      string
		want    []string
		wantErr error
	}{
		{"undefined_function", []string{`no global function "undefined_function"`}, ErrNoFunction},
		{"not_a_function", []string{`no global function "not_a_function"`}, ErrNoFunction},
		{"boom", []string{"<embedded>:5:", "attempt to index"}, nil},
		{"raise", []string{"<embedded>:6:", "no way"}, nil},
		{"raise_table", []string{"table: "}, nil},
		{"returns_function", []string{"result", "function has no JSON form"}, nil},
		{"returns_cycle", []string{"result", ".self", "contains itself"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.fn, func(t *testing.T) {
			_, err := p.Call(context.Background(), tt.fn, nil)
			var se *ScriptError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T) is not a *ScriptError", err, err)
			}
			if se.Func != tt.fn {
				t.Errorf("Func = %q", se.Func)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v is not %v", err, tt.wantErr)
			}
		})
	}
	// The worker is still usable after all of that.
	if v, err := p.Call(context.Background(), "call_builtin", nil); err == nil || v != nil || err.Error() != "lua call_builtin: plain" {
		t.Errorf("call_builtin = %v, %v", v, err)
	}
}

// badRequest stands for the simulator's own 400 error type.
type badRequest struct{ field string }

func (e *badRequest) Error() string { return "bad request: " + e.field }

func TestGoErrorPropagation(t *testing.T) {
	src := `
local m = require("svcpf")
function uncaught(req) return m.check(req) end
function caught(req)
  local ok, err = pcall(m.check, req)
  return {ok = ok, str = tostring(err), concat = "failed: " .. err, message = err.message, kind = type(err)}
end
function rethrown(req)
  local ok, err = pcall(m.check, req)
  error(err)
end
function stringified(req)
  local ok, err = pcall(m.check, req)
  error(tostring(err))
end
`
	check := func(_ context.Context, args []any) (any, error) {
		req, _ := args[0].(map[string]any)
		if req["domain"] == nil {
			return nil, fmt.Errorf("checking: %w", &badRequest{field: "domain"})
		}
		return "ok", nil
	}
	p := newTestPool(t, Config{Modules: map[string]Module{"svcpf": {"check": check}}}, src)
	ctx := context.Background()

	for _, fn := range []string{"uncaught", "rethrown"} {
		_, err := p.Call(ctx, fn, map[string]any{})
		var br *badRequest
		if !errors.As(err, &br) || br.field != "domain" {
			t.Errorf("%s: error %v does not wrap *badRequest", fn, err)
		}
		var se *ScriptError
		if !errors.As(err, &se) || se.Message != "checking: bad request: domain" {
			t.Errorf("%s: error %v: not a ScriptError with the Go message", fn, err)
		}
	}

	v, err := p.Call(ctx, "caught", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"ok": false, "str": "checking: bad request: domain",
		"concat": "failed: checking: bad request: domain", "message": "checking: bad request: domain", "kind": "userdata"}
	if !equalJSON(v, want) {
		t.Errorf("caught = %#v, want %#v", v, want)
	}

	// Turned into a string by the script, the error is the script's own.
	_, err = p.Call(ctx, "stringified", map[string]any{})
	var br *badRequest
	if errors.As(err, &br) || err == nil || !strings.Contains(err.Error(), "bad request: domain") {
		t.Errorf("stringified: %v", err)
	}

	if v, err := p.Call(ctx, "uncaught", map[string]any{"domain": "x"}); err != nil || v != "ok" {
		t.Errorf("uncaught with a domain = %v, %v", v, err)
	}
}

func TestRunawayScriptIsStoppedAndWorkerKept(t *testing.T) {
	src := `
calls = 0
function spin() calls = calls + 1; while true do end end
function spin_protected()
  calls = calls + 1
  while true do pcall(function() while true do end end) end
end
function count() calls = calls + 1; return calls end
`
	m := newCountingMetrics()
	// Long enough that count never runs out of time on a loaded machine.
	p := newTestPool(t, Config{Workers: 1, CallTimeout: 500 * time.Millisecond, Metrics: m}, src)
	for i, fn := range []string{"spin", "spin_protected"} {
		_, err := callWithin(t, p, context.Background(), fn, nil)
		var se *ScriptError
		if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: error %v: want a ScriptError wrapping DeadlineExceeded", fn, err)
		}
		if !strings.Contains(se.Message, "<embedded>:") || !strings.Contains(se.Message, "a call may run 500ms") {
			t.Errorf("%s: message %q", fn, se.Message)
		}
		// Same state, not a replacement: the global counter went on.
		v, err := callWithin(t, p, context.Background(), "count", nil)
		if err != nil || v != int64(2*(i+1)) {
			t.Fatalf("count after %s = %v, %v", fn, v, err)
		}
	}
	_, calls, callErrors := m.snapshot()
	if calls["spin"] != 1 || callErrors["spin"] != 1 || calls["count"] != 2 || callErrors["count"] != 0 {
		t.Errorf("calls %v, errors %v", calls, callErrors)
	}
}

func TestStuckBuiltinIsAbandonedAndReplaced(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	stuck := func(context.Context, []any) (any, error) {
		started <- struct{}{}
		<-release // ignores its context, as a misbehaving built-in would
		return nil, nil
	}
	src := `
local m = require("svcpf")
calls = 0
function stuck() return m.stuck() end
function count() calls = calls + 1; return calls end
`
	p := newTestPool(t, Config{Workers: 1, Modules: map[string]Module{"svcpf": {"stuck": stuck}}}, src)
	defer close(release)
	if v, err := callWithin(t, p, context.Background(), "count", nil); err != nil || v != int64(1) {
		t.Fatalf("count = %v, %v", v, err)
	}
	// The caller's deadline, not CallTimeout, so that count keeps the
	// default 5s.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := callWithin(t, p, ctx, "stuck", nil)
	<-started
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "worker replaced") {
		t.Fatalf("stuck: %v", err)
	}
	// A fresh worker serves the next call: its counter starts again.
	if v, err := callWithin(t, p, context.Background(), "count", nil); err != nil || v != int64(1) {
		t.Fatalf("count on the replacement = %v, %v", v, err)
	}
	// The replacement went back to the idle set: the pool kept its size.
	if n := len(p.idle); n != 1 {
		t.Errorf("%d idle workers, want 1", n)
	}
}

func TestCancelWhileQueued(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	slow := func(context.Context, []any) (any, error) {
		close(started)
		<-release
		return "slow done", nil
	}
	m := newCountingMetrics()
	p := newTestPool(t, Config{Workers: 1, Metrics: m, Modules: map[string]Module{"svcpf": {"slow": slow}}}, `
local m = require("svcpf")
function slow() return m.slow() end
function fast() return "fast" end
`)
	slowDone := make(chan error, 1)
	go func() {
		v, err := p.Call(context.Background(), "slow", nil)
		if err == nil && v != "slow done" {
			err = fmt.Errorf("slow returned %v", v)
		}
		slowDone <- err
	}()
	<-started // the only worker is now busy

	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan error, 1)
	go func() {
		_, err := p.Call(ctx, "fast", nil)
		queued <- err
	}()
	cancel()
	select {
	case err := <-queued:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("queued call: %v, want context.Canceled", err)
		}
	case <-time.After(testDeadline):
		t.Fatal("a cancelled queued call did not return while the worker was busy")
	}

	close(release)
	if err := <-slowDone; err != nil {
		t.Fatal(err)
	}
	if v, err := callWithin(t, p, context.Background(), "fast", nil); err != nil || v != "fast" {
		t.Errorf("fast = %v, %v", v, err)
	}
	_, calls, callErrors := m.snapshot()
	if calls["fast"] != 1 || callErrors["fast"] != 0 {
		t.Errorf("a call cancelled in the queue was counted: calls %v, errors %v", calls, callErrors)
	}
}

func TestCallerCancellationStopsARunningCall(t *testing.T) {
	p := newTestPool(t, Config{}, `function spin() while true do end end`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Call(ctx, "spin", nil)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
	case <-time.After(testDeadline):
		t.Fatal("cancelling the caller's context did not stop the script")
	}
}

func TestClose(t *testing.T) {
	p := newTestPool(t, Config{Workers: 2}, `function f() return 1 end`)
	p.Close()
	p.Close() // idempotent
	if _, err := p.Call(context.Background(), "f", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Call after Close: %v", err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	src := `
local m = require("svcpf")
function echo(req)
  local out = {n = req.n * 2, tags = {}}
  for i, tag in ipairs(req.tags) do out.tags[i] = string.upper(tag) end
  out.sum = m.add(req.n, 1)
  return out
end
`
	add := func(_ context.Context, args []any) (any, error) { return args[0].(int64) + args[1].(int64), nil }
	m := newCountingMetrics()
	p := newTestPool(t, Config{Workers: 2, Metrics: m, Modules: map[string]Module{"svcpf": {"add": add}}}, src)
	const goroutines, calls = 32, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				n := g*1000 + i
				v, err := p.Call(context.Background(), "echo", map[string]any{"n": n, "tags": []string{"a", "b"}})
				want := map[string]any{"n": int64(2 * n), "tags": []any{"A", "B"}, "sum": int64(n + 1)}
				if err != nil || !equalJSON(v, want) {
					errs <- fmt.Errorf("echo(%d) = %v, %v", n, v, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	_, counted, _ := m.snapshot()
	if counted["echo"] != goroutines*calls {
		t.Errorf("counted %d calls, want %d", counted["echo"], goroutines*calls)
	}
}

func TestPrintGoesToTheLogger(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(b)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	src := `function f() print("hello", 42, nil, {}) return true end`
	p := newTestPool(t, Config{Logger: logger}, src)
	if _, err := p.Call(context.Background(), "f", nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if !strings.Contains(out, `msg="lua print"`) || !strings.Contains(out, `text="hello\t42\tnil\ttable: `) {
		t.Errorf("log output %q", out)
	}
	// Without a logger print is still there, and silent.
	quiet := newTestPool(t, Config{}, src)
	if v, err := quiet.Call(context.Background(), "f", nil); err != nil || v != true {
		t.Errorf("f without a logger = %v, %v", v, err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func TestModulesAreNotGlobals(t *testing.T) {
	p := newTestPool(t, Config{Modules: map[string]Module{"svcpf": {
		"one": func(context.Context, []any) (any, error) { return 1, nil },
	}}}, `
function f()
  local a, b = require("svcpf"), require("svcpf")
  return {global = svcpf == nil, same = a == b, one = a.one()}
end
`)
	v, err := p.Call(context.Background(), "f", nil)
	if want := map[string]any{"global": true, "same": true, "one": int64(1)}; err != nil || !equalJSON(v, want) {
		t.Errorf("f = %v, %v; want %v", v, err, want)
	}
}
