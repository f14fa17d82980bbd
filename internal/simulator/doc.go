// Package simulator answers, without sending a DNS query, what the filter
// would do: the categories of a name (/api/v1/domain), and a subscriber's
// verdict with its reason, the rule that matched and the trace of the
// decision (/api/v1/simulate), over HTTP and the same calls over NATS.
//
// Each request runs in a sandboxed Lua worker (internal/luapool) whose
// entry file, the embedded default or the operator's lua.file, shapes the
// answer; its built-in functions (the svcpf module) call the one decision
// of internal/policy over the node's read models, so the simulator and
// the resolver decide alike. A runaway script is stopped after
// lua.call_timeout and its worker reused.
package simulator
