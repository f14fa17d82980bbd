// Package luapool runs an operator's Lua entry script in a fixed pool of
// sandboxed gopher-lua workers.
//
// Data flow: simulator HTTP handler → Pool.Call(ctx, "simulate_user", req) →
// a free worker → the entry script's global function → the preloaded Go
// built-ins (the simulator's svcpf module, Config.Modules) → the policy
// engine; a built-in's result enters Lua unconverted, as a userdata that
// converts a field when the script reads it (wrap.go), and the function's
// returned value comes back as a Go value — the built-in's own map when the
// script did not change it — that the simulator encodes as the JSON body
// (docs/simulator.md, the Lua contract).
//
// The entry script is parsed and compiled once; every worker is its own
// *lua.LState running that compiled chunk, so a worker's globals persist from
// call to call, and a worker is only ever used by one goroutine. The package
// knows nothing of the names the simulator calls: it runs a named global
// function with one argument and converts values JSON-style in both
// directions (README.md has the rules).
//
// Bounds: a call runs under a deadline (Config.CallTimeout) checked before
// every Lua instruction; a worker stuck in Go code past its deadline is
// abandoned and replaced, so Call always returns. The sandbox has no os, io,
// debug, package, channel or coroutine library and cannot load code;
// require reaches Config.Modules only. Memory is not bounded beyond
// string.rep and the VM's stack limits; README.md lists what remains.
package luapool
