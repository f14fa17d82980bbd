package luapool

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// FuzzCall runs arbitrary scripts in the sandbox with a short timeout: New
// and Call may fail, but must not panic or hang, and a result must be made
// of the converted types only.
func FuzzCall(f *testing.F) {
	for _, src := range []string{
		"function f(req) return req end",
		"function f(req) return {a = {b = {c = req.domain, n = req.n + 0.5}}, list = req.tags} end",
		"function f() while true do end end",
		"function f() while true do pcall(function() while true do end end) end end",
		"function f() error('x') end",
		"function f() error({}) end",
		"function f() local t = {}; t[1] = t; return t end",
		"function f() local t = {1}; for i = 1, 30 do t = {t, t} end; return t end",
		"function f() return setmetatable({}, {__jsontype = 'array'}) end",
		"function f() return {1, nil, 3, [10] = 10, x = 'y'} end",
		"function f() return 1/0 end",
		"function f() return 0/0 end",
		"function f() return {a = {-1/0}} end",
		"function f() return string.rep('ab', 1e7) end",
		"function f() return require('svcpf').echo({1, 2, {x = 1}}) end",
		"function f() return pcall(require('svcpf').fail) end",
		"function f() return require('os') end",
		"function f() local function r(n) return r(n + 1) + 1 end; return r(1) end",
		"function f() return unpack({}, 1, 1e6) end",
		"function f() return ('x'):rep(1000):gsub('x', '%0%0') end",
		"function f() return string.format('%5.2f %q %s', 3.14159, 'a\\nb', nil) end",
		"x = ",
		"return",
		"f = 3",
		"local t = setmetatable({}, {__index = function(t, k) return k end}); function f() return t.x end",
		"setmetatable(_G, {__index = function() error('boom') end})",
		// built-in results wrapped as Go objects (wrap.go)
		"function f() return require('svcpf').obj() end",
		"function f() local r = require('svcpf').obj(); r.self = r; return r end",
		"function f() local r = require('svcpf').obj(); r.x = nil; r.y = {r.n, r.list}; for k, v in pairs(r) do r[k .. '2'] = v end; return r end",
		"function f() local r = require('svcpf').obj(); table.insert(r.list, r.n); return {r.n, r.list, next(r)} end",
		"function f() local r = require('svcpf').obj(); return next(r, 'zz') end",
		"function f() local r = require('svcpf').obj(); r.n.q = 1; return r end",
		// the argument table handed back (argBack) and Objects that are not maps
		"function f(req) return require('svcpf').echo(req) end",
		"function f(req) req.n = req.n + 1; return {require('svcpf').echo(req), req} end",
		"function f(req) setmetatable(req, {__jsontype = 'array'}); return require('svcpf').echo(req) end",
		"function f() return require('svcpf').objx() end",
		"function f() local o = require('svcpf').objx(); o.z = o.nested; o.nested.x[3] = o; return {o, o.nested} end",
	} {
		f.Add(src)
	}
	mod := Module{
		"echo": func(_ context.Context, args []any) (any, error) {
			if len(args) == 0 {
				return nil, errors.New("echo needs an argument")
			}
			return args[0], nil
		},
		"fail": func(context.Context, []any) (any, error) { return nil, errors.New("failed") },
		"objx": func(context.Context, []any) (any, error) { return &testObject{}, nil },
		"obj": func(context.Context, []any) (any, error) {
			return map[string]any{"x": "y", "n": map[string]any{"a": int64(1), "b": nil},
				"list": []any{"a", map[string]any{"c": true}}}, nil
		},
	}
	req := map[string]any{"domain": "example.com", "n": 1, "tags": []any{"a", "b"}, "verbose": true}
	// flat: a built-in handed its table back unchanged gets this very map
	flat := map[string]any{"domain": "example.com", "n": int64(1), "verbose": true, "x": 0.5}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := New(Config{
			Workers:     1,
			Source:      []byte(src),
			CallTimeout: 20 * time.Millisecond,
			Modules:     map[string]Module{"svcpf": mod},
		})
		if err != nil {
			return
		}
		defer p.Close()
		for _, arg := range []map[string]any{req, flat} {
			v, err := p.Call(context.Background(), "f", arg)
			if err != nil {
				var se *ScriptError
				if !errors.As(err, &se) {
					t.Fatalf("error %v (%T) is not a *ScriptError", err, err)
				}
				continue
			}
			if err := checkConverted(v, 0); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// checkConverted reports a value toGo cannot produce: a type outside its
// list, or a number JSON cannot hold.
func checkConverted(v any, depth int) error {
	if depth > maxDepth {
		return errors.New("deeper than maxDepth")
	}
	switch v := v.(type) {
	case nil, bool, string, int64:
		return nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return errors.New("NaN or ±Inf in a result: the body's encoder would fail on it")
		}
		return nil
	case []any:
		for _, e := range v {
			if err := checkConverted(e, depth+1); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		for _, e := range v {
			if err := checkConverted(e, depth+1); err != nil {
				return err
			}
		}
		return nil
	case *testObject: // a built-in's Object the script left unchanged
		return nil
	}
	return errors.New("unexpected type in a result")
}
