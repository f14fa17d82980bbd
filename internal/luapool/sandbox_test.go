package luapool

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestSandboxEscapesFail(t *testing.T) {
	p := newTestPool(t, Config{Modules: map[string]Module{"svcpf": {}}}, `
function try(req) return escapes[req.expr]() end
escapes = {
  ["os.exit"]          = function() return os.exit(1) end,
  ["os.execute"]       = function() return os.execute("true") end,
  ["os.getenv"]        = function() return os.getenv("HOME") end,
  ["io.open"]          = function() return io.open("/etc/passwd") end,
  ["io.write"]         = function() return io.write("x") end,
  ["require os"]       = function() return require("os") end,
  ["require io"]       = function() return require("io") end,
  ["require debug"]    = function() return require("debug") end,
  ["require file"]     = function() return require("./evil") end,
  ["dofile"]           = function() return dofile("/etc/passwd") end,
  ["loadfile"]         = function() return loadfile("/etc/passwd") end,
  ["loadstring"]       = function() return loadstring("return 1") end,
  ["load"]             = function() return load(function() return nil end) end,
  ["debug.getregistry"] = function() return debug.getregistry() end,
  ["debug.sethook"]    = function() return debug.sethook() end,
  ["package.loadlib"]  = function() return package.loadlib("x", "y") end,
  ["package.loaders"]  = function() return package.loaders end,
  ["module"]           = function() return module("x") end,
  ["channel.make"]     = function() return channel.make() end,
  ["coroutine.create"] = function() return coroutine.create(function() end) end,
  ["collectgarbage"]   = function() return collectgarbage() end,
  ["_printregs"]       = function() return _printregs() end,
  ["string.dump"]      = function() return string.dump(print) end,
  ["string.rep bomb"]  = function() return string.rep("x", 1e9) end,
  ["method rep bomb"]  = function() return ("xy"):rep(1e9) end,
  ["deep recursion"]   = function() local function f(n) return 1 + f(n + 1) end; return f(1) end,
  ["unpack bomb"]      = function() return unpack({}, 1, 1e8) end,
}
`)
	tests := []struct {
		expr string
		want string // a substring of the error
	}{
		{"os.exit", "attempt to index a non-table object(nil)"},
		{"os.execute", "attempt to index"},
		{"os.getenv", "attempt to index"},
		{"io.open", "attempt to index"},
		{"io.write", "attempt to index"},
		{"require os", "module os not found (only preloaded modules: svcpf)"},
		{"require io", "module io not found"},
		{"require debug", "module debug not found"},
		{"require file", "module ./evil not found"},
		{"dofile", "attempt to call a non-function object"},
		{"loadfile", "attempt to call"},
		{"loadstring", "attempt to call"},
		{"load", "attempt to call"},
		{"debug.getregistry", "attempt to index"},
		{"debug.sethook", "attempt to index"},
		{"package.loadlib", "attempt to index"},
		{"package.loaders", "attempt to index"},
		{"module", "attempt to call"},
		{"channel.make", "attempt to index"},
		{"coroutine.create", "attempt to index"},
		{"collectgarbage", "attempt to call"},
		{"_printregs", "attempt to call"},
		{"string.dump", "attempt to call"},
		{"string.rep bomb", "exceed the 1048576-byte limit"},
		{"method rep bomb", "exceed the 1048576-byte limit"},
		{"deep recursion", "stack overflow"},
		{"unpack bomb", "overflow"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			v, err := callWithin(t, p, context.Background(), "try", map[string]any{"expr": tt.expr})
			var se *ScriptError
			if !errors.As(err, &se) {
				t.Fatalf("escape %q returned %v, %v; want a ScriptError", tt.expr, v, err)
			}
			if !strings.Contains(se.Message, tt.want) {
				t.Errorf("escape %q: message %q does not contain %q", tt.expr, se.Message, tt.want)
			}
		})
	}
	// After all of that the worker still answers.
	if _, err := p.Call(context.Background(), "try", map[string]any{"expr": "nothing"}); err == nil ||
		!strings.Contains(err.Error(), "attempt to call") {
		t.Errorf("worker after the escapes: %v", err)
	}
}

func TestSandboxKeepsTheUsualLibraries(t *testing.T) {
	p := newTestPool(t, Config{}, `
function f()
  local t = {3, 1, 2}
  table.sort(t)
  local ok, err = pcall(error, "caught", 0)
  return {
    sorted = table.concat(t, ","),
    upper = string.upper("abc"),
    method = ("x"):rep(3),
    match = string.match("www.example.com", "^www%.(.+)$"),
    floor = math.floor(2.7),
    pcall = {ok, err},
    version = _VERSION,
    globals = _G == getfenv(0),
    number = tonumber("0x10"),
    select = select("#", 1, 2, 3),
  }
end
`)
	v, err := p.Call(context.Background(), "f", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"sorted": "1,2,3", "upper": "ABC", "method": "xxx", "match": "example.com",
		"floor": int64(2), "pcall": []any{false, "caught"}, "version": "Lua 5.1", "globals": true,
		"number": int64(16), "select": int64(3)}
	if !equalJSON(v, want) {
		t.Errorf("f = %#v\nwant %#v", v, want)
	}
}
